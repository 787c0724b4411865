"""The job life cycle beyond one delivery: heartbeats (lease extension) and cancel.

Leases: every delivery gets a fresh opaque lease (`start_delivery`); result posts, failure
reports and heartbeats must carry it, and only the current delivery's lease is accepted
(409 `lease_mismatch` otherwise, and nothing changes). A heartbeat moves the lease's expiry one
visibility timeout ahead, in the job hash (which poll checks before any redelivery) and in the
queue group's pending list (XCLAIM ... JUSTID restarts the entry's idle clock, so pollers do not
even try to reclaim it).

Leases long-poll (`POST /v1/daemon/leases`): one call per busy daemon renews every lease it
holds (as a heartbeat each), then waits on the daemon's cancel list (keys.cancels) up to
POLL_MAX_WAIT_S, answering early when a cancel of one of its jobs is requested. A busy daemon
makes one such call per POLL_MAX_WAIT_S whatever its job count, in place of a heartbeat per job
every VISIBILITY_TIMEOUT_S/3.

Cancel: a queued job ends `cancelled` at once and is never delivered; a running job gets
`cancel_requested` and its holder's cancel list gets the job id, which wakes the daemon's
leases long-poll (or the next heartbeat answer says it): the daemon then posts the error type
`Cancelled` and the job ends `cancelled`. A job whose daemon died with a cancel requested ends
`cancelled` at its next delivery instead of running again.
"""

from __future__ import annotations

from functools import lru_cache

from ..models.api import (
    CancelResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    LeasesRequest,
    LeasesResponse,
)
from ..models.domain import JOB_ID_RE, JobStatus, job_id_time_s
from ..models.errors import Conflict, Forbidden, LeaseMismatch, NotFound
from ..observability import bind_job, logger, metrics_count
from ..store.records import CancelledQueued, CancelRequested, Ended, HeartbeatTaken, Missing, dumps
from .context import Deps, Principal, find_job
from .policy import keep_for_class

CANCELLED_ERROR_TYPE = "Cancelled"


def lease_mismatch(job_id: str, state: str | None = None) -> LeaseMismatch:
    where = f" (the job is {state})" if state and state != JobStatus.RUNNING else ""
    return LeaseMismatch(
        f"this lease is not the current delivery's of job {job_id}{where}: it was delivered "
        "again, finished or cancelled; stop working on it"
    )


def heartbeat(p: Principal, job_id: str, body: HeartbeatRequest, deps: Deps) -> HeartbeatResponse:
    bind_job(job_id)
    expires_ms = int((deps.clock() + deps.settings.visibility_timeout_s) * 1000)
    beat = deps.jobs.heartbeat(job_id, p.namespace, body.lease, expires_ms)
    if isinstance(beat, Missing):
        raise NotFound(f"job {job_id} not found")
    if not isinstance(beat, HeartbeatTaken):
        raise lease_mismatch(job_id, beat.state)
    if beat.entry_id and beat.queue and beat.consumer:
        # Best effort: the lease expiry in the job hash is what poll trusts.
        deps.jobs.touch_entry(p.namespace, beat.queue, beat.entry_id, beat.consumer)
    return HeartbeatResponse(
        lease_expires_at=expires_ms / 1000,
        lease_expires_in_s=float(deps.settings.visibility_timeout_s),
        cancel_requested=beat.cancel_requested,
    )


def _renew(
    p: Principal, held: dict[str, str], expires_ms: int, deps: Deps
) -> tuple[list[str], list[str]]:
    """Renew each (job id -> lease) as a heartbeat does: (cancel requested, lost) job ids."""
    cancelled: list[str] = []
    lost: list[str] = []
    for job_id, lease in held.items():
        beat = deps.jobs.heartbeat(job_id, p.namespace, lease, expires_ms)
        if not isinstance(beat, HeartbeatTaken):
            lost.append(job_id)
            continue
        if beat.entry_id and beat.queue and beat.consumer:
            deps.jobs.touch_entry(p.namespace, beat.queue, beat.entry_id, beat.consumer)
        if beat.cancel_requested:
            cancelled.append(job_id)
    return cancelled, lost


def renew_leases(p: Principal, req: LeasesRequest, wait_s: float, deps: Deps) -> LeasesResponse:
    """Renew every lease of the request, then wait up to `wait_s` (already capped by the
    invocation) for a cancel of one of the daemon's jobs; answer at once when one is found."""
    if req.namespace != p.namespace:
        raise Forbidden("token does not belong to this namespace")
    s = deps.settings
    held = {h.job_id: h.lease for h in req.leases}
    wait_s = min(wait_s, req.wait_s, s.poll_max_wait_s)
    deadline = deps.clock() + wait_s
    expires_ms = int((deps.clock() + s.visibility_timeout_s) * 1000)
    cancelled, lost = _renew(p, held, expires_ms, deps)
    woken = False
    while not cancelled and not lost:
        left = deadline - deps.clock()
        if left <= 0:
            break
        popped = deps.jobs.wait_signal(p.namespace, req.daemon_id, left)
        if not popped:
            break
        mine = {j: held[j] for j in popped if j in held}
        cancelled, lost = _renew(p, mine, expires_ms, deps)
        # A job id this request does not name: a job the daemon took since it sent it.
        woken = bool(cancelled or lost) or any(j not in held for j in popped)
        if woken:
            break
    if cancelled or lost:
        # Their wake-ups are answered here: left in the list, each would end the daemon's next
        # long-poll at once for a job it no longer names.
        deps.jobs.forget_signals(p.namespace, req.daemon_id, cancelled + lost)
        logger.info(
            "leases long-poll answered",
            extra={"daemon_id": req.daemon_id, "cancelled": len(cancelled), "lost": len(lost)},
        )
    return LeasesResponse(
        lease_expires_at=expires_ms / 1000,
        lease_expires_in_s=float(s.visibility_timeout_s),
        cancel_requested=cancelled,
        lost=lost,
        woken=woken,
    )


def cancel(p: Principal, job_id: str, deps: Deps) -> CancelResponse:
    job = find_job(p.namespace, job_id, deps)
    if job is None:
        unfinished = deps.jobs.get_job(job_id) if JOB_ID_RE.match(job_id) else None
        if unfinished is not None and unfinished.state is JobStatus.AWAITING_UPLOAD:
            # Not a job yet, maybe an S3-tier one still awaiting its enqueue's job step: an
            # entry a cut-off enqueue appended must not run a job its client is told does not
            # exist (lifecycle_cancel.lua overrules it as a refusal would; nothing else is
            # written).
            deps.jobs.cancel(
                job_id,
                p.namespace,
                "",
                int(deps.clock() * 1000),
                cancelled_error(),
                int(job_id_time_s(job_id) * 1000),
            )
        raise NotFound(f"job {job_id} not found")
    bind_job(job_id)
    # A queued inline job has no hash before its first delivery (find_job read the index).
    inline_queue = job.queue or "" if not job.stored else ""
    outcome = deps.jobs.cancel(
        job_id,
        p.namespace,
        inline_queue,
        int(deps.clock() * 1000),
        cancelled_error(),
        job.created_ms or int(job_id_time_s(job_id) * 1000),
    )
    if isinstance(outcome, Missing):
        raise NotFound(f"job {job_id} not found")
    if isinstance(outcome, Ended):
        # `state` in the error body: a client whose earlier cancel's answer was lost tells
        # "already cancelled" (its cancel worked) from "finished otherwise" without the text.
        state = outcome.state
        if state == JobStatus.CANCELLED:
            # That earlier cancel may have been answered 503 after the job ended, before its
            # record's longer life (`7d`/`30d`) was set: set it now (idempotent, end-based).
            keep_for_class(p, job_id, deps)
        raise Conflict(f"job {job_id} is {state}; it cannot be cancelled", state=state)
    if isinstance(outcome, CancelledQueued):
        if outcome.queue:
            # The entry goes (its inline args kept for a retry) and the job is indexed among
            # the queue's cancelled jobs. A queued inline job that had no hash names no entry:
            # it is looked up near the job's id time, so the queued count drops at once; one a
            # daemon took meanwhile (or not found) goes at its delivery, which finds it
            # cancelled.
            entry_id, undelivered_only = outcome.entry_id, False
            if not entry_id and not job.stored:
                entry_id = deps.jobs.find_inline_entry(
                    p.namespace, outcome.queue, job_id, job.created_ms or 0
                )
                undelivered_only = True
            deps.jobs.settle(
                p.namespace,
                outcome.queue,
                job_id,
                entry_id,
                state=JobStatus.CANCELLED,
                retries=outcome.retries,
                now_ms=int(deps.clock() * 1000),
                keep_args=True,
                undelivered_only=undelivered_only,
            )
        keep_for_class(p, job_id, deps)
        metrics_count("JobsCancelled", was="queued")
        logger.info("job cancelled while queued")
        return CancelResponse(job_id=job_id, state=JobStatus.CANCELLED)
    metrics_count("JobsCancelled", was="running")
    logger.info("cancel requested for a running job")
    if isinstance(outcome, CancelRequested) and outcome.consumer:
        _wake_holder(p, job_id, outcome.consumer, deps)
    return CancelResponse(job_id=job_id, state=JobStatus.RUNNING, cancel_requested=True)


def _wake_holder(p: Principal, job_id: str, consumer: str, deps: Deps) -> None:
    """Wake the holding daemon's leases long-poll. The cancel is recorded whatever happens
    here: a wake-up that fails leaves it to the daemon's next renewal (POLL_MAX_WAIT_S later)."""
    try:
        deps.jobs.signal_cancel(p.namespace, consumer, job_id, deps.settings.visibility_timeout_s)
    except Exception as e:  # noqa: BLE001 - the cancel stands; logged and counted
        logger.warning("cancel wake-up not sent", extra={"error": type(e).__name__})
        metrics_count("CancelWakeFailed")


@lru_cache(maxsize=1)
def cancelled_error() -> str:
    return dumps({"type": CANCELLED_ERROR_TYPE, "message": "cancelled by a client"})
