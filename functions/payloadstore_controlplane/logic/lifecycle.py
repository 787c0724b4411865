"""The job life cycle beyond one delivery: heartbeats (lease extension) and cancel.

Leases: every delivery gets a fresh opaque lease (`start_delivery`); result posts, failure
reports and heartbeats must carry it, and only the current delivery's lease is accepted
(409 `lease_mismatch` otherwise, and nothing changes). A heartbeat moves the lease's expiry one
visibility timeout ahead, in the job hash (which poll checks before any redelivery) and in the
queue group's pending list (XCLAIM ... JUSTID restarts the entry's idle clock, so pollers do not
even try to reclaim it).

Cancel: a queued job ends `cancelled` at once and is never delivered; a running job gets
`cancel_requested`, which its daemon learns from the next heartbeat answer (it then posts the
error type `Cancelled` and the job ends `cancelled`); a job whose daemon died with a cancel
requested ends `cancelled` at its next delivery instead of running again.
"""

from __future__ import annotations

from functools import lru_cache

from ..models.api import CancelResponse, HeartbeatRequest, HeartbeatResponse
from ..models.domain import JobStatus, job_id_time_s
from ..models.errors import Conflict, LeaseMismatch, NotFound
from ..observability import bind_job, logger, metrics_count
from ..store.records import CancelledQueued, Ended, HeartbeatTaken, Missing, dumps
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


def cancel(p: Principal, job_id: str, deps: Deps) -> CancelResponse:
    job = find_job(p.namespace, job_id, deps)
    if job is None:
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
    return CancelResponse(job_id=job_id, state=JobStatus.RUNNING, cancel_requested=True)


@lru_cache(maxsize=1)
def cancelled_error() -> str:
    return dumps({"type": CANCELLED_ERROR_TYPE, "message": "cancelled by a client"})
