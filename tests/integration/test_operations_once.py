"""An operation sent with an Idempotency-Key runs once (operate_once.lua against a real Redis):
claimed by its first request, answered to its repeats, refused to another request, given back
when its request failed."""

from __future__ import annotations

import pytest

from payloadstore_controlplane.logic.context import Principal
from payloadstore_controlplane.logic.once import RUNNING_S, once
from payloadstore_controlplane.models.api import PurgeResponse
from payloadstore_controlplane.models.errors import ServiceUnavailable, Unprocessable
from payloadstore_controlplane.store import keys


def principal(ns: str) -> Principal:
    return Principal(namespace=ns, role="client", token_id="test")


def test_a_key_runs_once_answers_its_repeat_and_refuses_another_request(cp):
    from payloadstore_controlplane.handlers._deps import get_deps

    deps = get_deps()
    p = principal(cp.ns)
    runs: list[int] = []

    def run() -> tuple[int, PurgeResponse]:
        runs.append(1)
        return 200, PurgeResponse(cancelled=len(runs) * 3, remaining=0)

    # Given a first request with a key
    first = once(p, "key-1", "purge", {"queue": "a"}, PurgeResponse, deps, run)
    # When it is sent again, Then it answers the first answer and does not run again
    again = once(p, "key-1", "purge", {"queue": "a"}, PurgeResponse, deps, run)
    assert first == again == (200, PurgeResponse(cancelled=3, remaining=0))
    assert len(runs) == 1
    # and the key on another request is refused
    with pytest.raises(Unprocessable) as refused:
        once(p, "key-1", "purge", {"queue": "b"}, PurgeResponse, deps, run)
    assert refused.value.details["reason"] == "idempotency_key_reused"
    # and the record expires with IDEMPOTENCY_TTL_S
    ttl = deps.jobs._r.ttl(keys.operation(cp.ns, "key-1"))
    assert 0 < ttl <= deps.settings.idempotency_ttl_s


def test_a_repeat_while_the_first_runs_is_told_to_retry_and_a_failure_gives_the_key_back(cp):
    from payloadstore_controlplane.handlers._deps import get_deps

    deps = get_deps()
    p = principal(cp.ns)

    def repeat_meanwhile() -> tuple[int, PurgeResponse]:
        # A repeat arriving while the first request runs: 503, retry for the answer
        with pytest.raises(ServiceUnavailable) as busy:
            once(p, "key-2", "purge", {"queue": "a"}, PurgeResponse, deps, repeat_meanwhile)
        assert busy.value.headers["Retry-After"]
        raise RuntimeError("the first request fails")

    with pytest.raises(RuntimeError):
        once(p, "key-2", "purge", {"queue": "a"}, PurgeResponse, deps, repeat_meanwhile)
    # The failed request kept nothing: the key runs anew
    assert deps.jobs._r.exists(keys.operation(cp.ns, "key-2")) == 0
    answer = once(
        p,
        "key-2",
        "purge",
        {"queue": "a"},
        PurgeResponse,
        deps,
        lambda: (200, PurgeResponse(cancelled=1, remaining=0)),
    )
    assert answer == (200, PurgeResponse(cancelled=1, remaining=0))
    assert RUNNING_S >= 29  # a claim outlives API Gateway's answer time
