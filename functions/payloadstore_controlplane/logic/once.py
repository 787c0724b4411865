"""Requests sent with an `Idempotency-Key` answered once: client operations (redrive, purge,
retry, cancel), and the next deliveries of a daemon's result post or failure report (`next`).

A client re-sends a request whose answer it lost (a cut connection, a gateway's 502/504 after
the Lambda ran). For these routes the second run is not the first one's answer: a redrive with
`limit=N` would retry N more jobs, a purge answers `cancelled: 0`, a retry of a job that ran
and failed again retries it again. With the header, the first request claims the key
(operate_once.lua, on the namespace's slot); a repeat gets the first one's answer for
IDEMPOTENCY_TTL_S, as an inline enqueue's repeat gets the same job. A repeat that arrives while
the first still runs is `503` with `Retry-After` (retried by the SDKs until the answer is
kept: the repeat waits first, up to REPEAT_WAIT_S, for that answer); the same key on another request (route, path or body) is `422`. A request that fails
keeps nothing: its key may be sent again and runs then. Past Redis's maxmemory the claim still
runs (a retry cut between its steps is finished by its re-send) but the answer is not kept: the
request is answered, its claim dropped, and a repeat runs again as one without a key does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ..models.api import NextPoll, PollResponse
from ..models.domain import JobStatus, PayloadKind
from ..models.errors import ServiceUnavailable, Unprocessable
from ..observability import logger
from .blobs import downloads as blob_downloads
from .blobs import unpacked
from .context import Deps, Principal, payload_ref
from .daemon import next_deliveries
from .downloads import download_for
from .enqueue import IDEMPOTENCY_KEY_RE

M = TypeVar("M", bound=BaseModel)

# How long a claim holds while its request runs: above the longest operation (redrive and purge
# stop at 10 s, API Gateway answers within 29 s), so a repeat never runs beside the first.
RUNNING_S = 60
# How long a repeat waits for the answer of its first request, still running (capped by what
# the invocation can afford): above the 10 s a redrive or purge may take.
REPEAT_WAIT_S = 20.0
REPEAT_RECHECK_S = 0.1


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
    wait_s: float = 0.0,
) -> tuple[int, M]:
    """(status, answer) of `run()`, run at most once per `key` in the namespace; without a key,
    `run()` as it is. A repeat that arrives while the first request runs waits up to `wait_s`
    for its answer (503 after that)."""
    if key is None:
        return run()
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise Unprocessable("invalid Idempotency-Key: use [A-Za-z0-9_.:-], 1-128 chars")
    print_ = fingerprint(what, request)
    state, answer = deps.jobs.operation_claim(p.namespace, key, print_, RUNNING_S)
    # A repeat while the first runs (a cut connection, sent again at once) waits for its answer
    # here: 503s alone would spend the SDK's few attempts (Retry-After 2 s each) within a
    # redrive's or purge's 10 s, and the caller would be told to try again, with a new key, an
    # operation that was done.
    deadline = time.monotonic() + wait_s
    while state == "running" and time.monotonic() < deadline:
        time.sleep(min(REPEAT_RECHECK_S, max(deadline - time.monotonic(), 0.0)))
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
    kept = deps.jobs.operation_done(
        p.namespace,
        key,
        print_,
        f"{status} {result.model_dump_json()}",
        deps.settings.idempotency_ttl_s,
    )
    if not kept:
        # Redis is full: the answer is not kept (a record per request would grow it past its
        # maxmemory), the claim is dropped, and a repeat runs again as one without a key.
        logger.warning("operation answer not kept: redis memory full", extra={"what": what})
    return status, result


# -- a result post or failure report with `next`, sent again ----------------------------------

# How long the deliveries a post with `next` took are remembered for its repeat: above the
# SDK's retries of one post (a few attempts, backoff capped at 5 s, each up to wait_s + 20 s).
NEXT_TAKEN_TTL_S = 120
# How often a repeat that arrived while its first post still waits looks for what it took.
NEXT_RECHECK_S = 0.1


def next_once(
    p: Principal, key: str | None, nxt: NextPoll, wait_s: float, deps: Deps
) -> list[PollResponse]:
    """The next deliveries of a stored post (`next`). With an Idempotency-Key, the post sent
    again after its answer was lost gets the deliveries the first one took (each still leased
    to this daemon, same lease), not a second batch while the first waits out
    VISIBILITY_TIMEOUT_S; a delivery since ended, cancelled or taken elsewhere is left out.
    The post itself is idempotent already (a repeat of the accepted post changes nothing)."""
    if key is None:
        return next_deliveries(p, nxt, wait_s, deps)
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise Unprocessable("invalid Idempotency-Key: use [A-Za-z0-9_.:-], 1-128 chars")
    # The first post claims the key before it waits: a repeat that arrives while it still waits
    # (the daemon's connection was cut, the SDK sent the post again) waits for what it takes,
    # rather than taking a second batch while the first one's goes to nobody.
    deadline = time.monotonic() + wait_s
    while not deps.jobs.next_claim(p.namespace, key, NEXT_TAKEN_TTL_S):
        taken = deps.jobs.next_taken(p.namespace, key)
        if taken is not None:
            again = [redelivery(p, job_id, lease, deps) for job_id, lease in taken]
            found = [d for d in again if d is not None]
            logger.info(
                "next deliveries answered again", extra={"taken": len(taken), "found": len(found)}
            )
            return found
        if time.monotonic() >= deadline:
            return []  # the first still waits (its wait began earlier, so rarely)
        time.sleep(min(NEXT_RECHECK_S, max(deadline - time.monotonic(), 0.0)))
    try:
        found = next_deliveries(p, nxt, max(deadline - time.monotonic(), 0.0), deps)
    except BaseException:
        with contextlib.suppress(Exception):
            deps.jobs.forget_next(p.namespace, key)
        raise
    pairs = [(d.job_id, d.lease) for d in found if d.lease]
    with contextlib.suppress(Exception):
        # Not kept (Redis away): a repeat waits out its wait and answers none, as the claim
        # holds; the deliveries return after VISIBILITY_TIMEOUT_S.
        if pairs:
            deps.jobs.remember_next(p.namespace, key, pairs, NEXT_TAKEN_TTL_S)
        else:
            deps.jobs.forget_next(p.namespace, key)  # took none: a repeat takes anew
    return found


def redelivery(p: Principal, job_id: str, lease: str, deps: Deps) -> PollResponse | None:
    """The delivery a poll answered for the job under `lease`, built again from the job and its
    queue entry, while that lease is still the job's running one; else None."""
    job = deps.jobs.get_job(job_id)
    if (
        job is None
        or job.namespace != p.namespace
        or job.state is not JobStatus.RUNNING
        or job.lease != lease
        or not job.queue
        or not job.stream_id
    ):
        return None
    entry = deps.jobs.read_entry(p.namespace, job.queue, job.stream_id)
    expiry_ms = deps.jobs.lease_expiry_ms(job_id)
    if entry is None or entry.job_id != job_id or expiry_ms is None:
        return None
    ref = payload_ref(job_id, PayloadKind.ARGS, job.args, deps) if entry.inline is None else None
    return PollResponse(
        job_id=job_id,
        namespace=p.namespace,
        queue=entry.queue,
        attempt=job.attempts,
        lease=lease,
        lease_expires_at=expiry_ms / 1000,
        lease_expires_in_s=max(expiry_ms / 1000 - deps.clock(), 0.0),
        payloadRef=ref,
        payloadInline=(
            base64.b64encode(entry.inline).decode("ascii") if entry.inline is not None else None
        ),
        download=download_for(ref, deps),
        blobs=blob_downloads(p.namespace, unpacked(entry.blobs), deps),
    )
