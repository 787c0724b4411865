"""Client operations sent with an `Idempotency-Key` (redrive, purge, retry, cancel): done once.

A client re-sends a request whose answer it lost (a cut connection, a gateway's 502/504 after
the Lambda ran). For these routes the second run is not the first one's answer: a redrive with
`limit=N` would retry N more jobs, a purge answers `cancelled: 0`, a retry of a job that ran
and failed again retries it again. With the header, the first request claims the key
(operate_once.lua, on the namespace's slot); a repeat gets the first one's answer for
IDEMPOTENCY_TTL_S, as an inline enqueue's repeat gets the same job. A repeat that arrives while
the first still runs is `503` with `Retry-After` (retried by the SDKs until the answer is
kept); the same key on another request (route, path or body) is `422`. A request that fails
keeps nothing: its key may be sent again and runs then.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ..models.errors import ServiceUnavailable, Unprocessable
from .context import Deps, Principal
from .enqueue import IDEMPOTENCY_KEY_RE

M = TypeVar("M", bound=BaseModel)

# How long a claim holds while its request runs: above the longest operation (redrive and purge
# stop at 10 s, API Gateway answers within 29 s), so a repeat never runs beside the first.
RUNNING_S = 60


def fingerprint(what: str, request: Any) -> str:
    """The route, its path parameters and body, as the key's record keeps them (hashed)."""
    text = json.dumps([what, request], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def once(
    p: Principal,
    key: str | None,
    what: str,
    request: Any,
    model: type[M],
    deps: Deps,
    run: Callable[[], tuple[int, M]],
) -> tuple[int, M]:
    """(status, answer) of `run()`, run at most once per `key` in the namespace; without a key,
    `run()` as it is."""
    if key is None:
        return run()
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise Unprocessable("invalid Idempotency-Key: use [A-Za-z0-9_.:-], 1-128 chars")
    print_ = fingerprint(what, request)
    state, answer = deps.jobs.operation_claim(p.namespace, key, print_, RUNNING_S)
    if state == "answer" and answer:
        code, _, body = answer.partition(" ")
        return int(code), model.model_validate_json(body)
    if state == "mismatch":
        raise Unprocessable(
            "this Idempotency-Key was sent with another request: use a new key per operation",
            reason="idempotency_key_reused",
        )
    if state == "running":
        raise ServiceUnavailable(
            "an earlier request with this Idempotency-Key is still running: retry for its answer",
            retry_after_s=2,
        )
    try:
        status, result = run()
    except BaseException:
        # Nothing to keep: a repeat runs anew (or, should Redis be away now, once the claim
        # lapses after RUNNING_S).
        with contextlib.suppress(Exception):
            deps.jobs.operation_release(p.namespace, key, print_)
        raise
    deps.jobs.operation_done(
        p.namespace,
        key,
        print_,
        f"{status} {result.model_dump_json()}",
        deps.settings.idempotency_ttl_s,
    )
    return status, result
