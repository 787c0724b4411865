"""The OpenAPI document is the API's behaviour: schemathesis fuzzes every operation it lists.

Generic over the document: each operation of /v1/openapi.json (whatever routes exist when this
runs) gets generated requests with a client and with a daemon token, half of them inside the
token's namespace (so they reach the logic, not only the namespace check), in positive and
negative generation modes. Each answer must pass: not_a_server_error, status_code_conformance,
content_type_conformance and response_schema_conformance. The run is bounded: about
FUZZ_CASES cases in all, spread evenly, at least MIN_PER_STRATEGY per operation and variant.
"""

from __future__ import annotations

import math
import os
import time

import pytest
import requests

pytestmark = pytest.mark.e2e

FUZZ_CASES = int(os.environ.get("PAYLOADSTORE_FUZZ_CASES", "1000"))
MIN_PER_STRATEGY = 8
NAMESPACE = "dev"


def _checks():
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    return [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]


def _has_inputs(operation) -> bool:
    return bool(len(operation.path_parameters) or len(operation.query) or len(operation.body))


def _fuzz(strategy, max_examples: int, exchange):
    """A Hypothesis test that sends each generated case through `exchange` (no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        exchange(case)

    return run


def test_every_operation_answers_as_its_openapi_document_says(start_local_gateway):
    import schemathesis
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    # Given a gateway whose long-polls return at once (the fuzz does not wait on empty queues)
    gw = start_local_gateway(
        authorizer_cache_s=300, POLL_MAX_WAIT_S="0.05", RESULT_MAX_WAIT_S="0.05"
    )
    document = requests.get(f"{gw.url}/v1/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]

    # When each operation is called with generated requests, as a client and as a daemon
    variants = []
    for role in ("client", "daemon"):
        headers = gw.auth(NAMESPACE, role)
        for op in operations:
            in_ns = {"ns": NAMESPACE} if "{ns}" in op.path else None
            variants.append((op, role, headers, GenerationMode.POSITIVE, in_ns))
            variants.append((op, role, headers, GenerationMode.NEGATIVE, None))
    # Operations without parameters or body (health, the document) have one request to send;
    # the budget goes to the others.
    with_inputs = [v for v in variants if _has_inputs(v[0])]
    per_strategy = max(MIN_PER_STRATEGY, math.ceil(FUZZ_CASES / max(1, len(with_inputs))))
    checks = _checks()
    cases = 0
    failures: list[str] = []
    started = time.monotonic()
    session = requests.Session()

    http_s = 0.0

    def exchange(case, headers):
        nonlocal cases, http_s
        cases += 1
        t0 = time.monotonic()
        response = case.call(base_url=gw.url, session=session, headers=headers, timeout=30)
        http_s += time.monotonic() - t0
        case.validate_response(response, checks=checks)

    for op, role, headers, mode, path_parameters in variants:
        try:
            strategy = op.as_strategy(generation_mode=mode, path_parameters=path_parameters)
        except Exception as e:
            if mode is GenerationMode.NEGATIVE:
                continue
            raise AssertionError(f"{op.label}: cannot generate requests: {e}") from e

        call = _fuzz(strategy, per_strategy, lambda case, h=headers: exchange(case, h))
        try:
            call()
        except Unsatisfiable:
            # An operation without parameters or body has no negative case to send.
            if mode is not GenerationMode.NEGATIVE:
                raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - collected, reported all together below
            inner = getattr(e, "exceptions", ())
            detail = "; ".join(f"{type(x).__name__}: {x}" for x in inner) or repr(e)
            failures.append(f"{op.label} [{role}, {mode.value}]: {e} ({detail})")
    elapsed = time.monotonic() - started
    print(
        f"schemathesis: {cases} cases over {len(operations)} operations in {elapsed:.1f}s"
        f" ({http_s:.1f}s in HTTP)"
    )

    # Then every answer is one the document declares, with the declared body and content type
    assert not failures, "\n\n".join(failures)
    assert cases >= min(FUZZ_CASES, 1000), cases
