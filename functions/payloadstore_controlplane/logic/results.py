"""Client-side reads: job status, and the result long-poll."""

from __future__ import annotations

import base64

from ..models.api import EnqueueResponse, JobError, JobStatusResponse, ResultResponse
from ..models.domain import JobStatus, PayloadKind, Tier, job_id_time_s
from ..models.errors import PayloadStoreError
from ..models.limits import DELIVERIES_BUDGET, delivery_bytes
from ..observability import logger
from ..store.records import JobRecord
from .blobs import downloads
from .context import Deps, Principal, load_job, payload_ref
from .downloads import download_for
from .kept_errors import error_of
from .policy import refuse_consumed, schedule_consume


def _done_value(job: JobRecord, deps: Deps) -> bytes | None:
    return job.done if job.done_read else deps.jobs.done_value(job.job_id)


def _error(job: JobRecord, deps: Deps) -> JobError | None:
    if job.result_kind != "e":
        return None
    raw = _done_value(job, deps)
    # An `inline: never` namespace's error is read back from S3 (logic/kept_errors.py).
    return error_of(raw, deps) if raw else None


def _result_ref(job: JobRecord, deps: Deps):
    if job.result_kind != "s":
        return None
    return payload_ref(job.job_id, PayloadKind.RESULT, job.result_issue, deps)


def job_status(p: Principal, job_id: str, deps: Deps) -> JobStatusResponse:
    return status_of(load_job(p, job_id, deps), deps)


def status_of(job: JobRecord, deps: Deps, *, traceback: bool = True) -> JobStatusResponse:
    """The job status answer of a job record (a listing leaves the traceback out)."""
    error = _error(job, deps)
    if error is not None and not traceback:
        error = error.model_copy(update={"traceback": None})
    result = job.result_issue if job.result_kind == "s" else None
    return JobStatusResponse(
        job_id=job.job_id,
        queue=job.queue or "",
        state=JobStatus(job.state),
        attempts=job.attempts,
        tier=Tier(job.tier),
        payloadRef=payload_ref(job.job_id, PayloadKind.ARGS, job.args, deps),
        resultRef=_result_ref(job, deps),
        error=error,
        # An inline job's hash has no enqueue time: its id carries it.
        created_at=job.created_ms / 1000 if job.created_ms else job_id_time_s(job.job_id),
        updated_at=job.updated_ms / 1000 if job.updated_ms else None,
        cancel_requested=job.cancel_requested,
        retries=job.retries or None,
        args_size=job.args_size,
        result_size=result.size if result else None,
    )


def get_result(p: Principal, job_id: str, wait_s: float, deps: Deps) -> ResultResponse:
    """The result or terminal error; state queued/running when still pending after the wait."""
    # The hash and the done list in one round trip: a finished job is answered from it.
    job = load_job(p, job_id, deps, with_done=True)
    if not JobStatus(job.state).terminal and wait_s > 0:
        deps.jobs.wait_done(job_id, min(wait_s, deps.settings.result_max_wait_s))
        job = load_job(p, job_id, deps, with_done=True)
    state = JobStatus(job.state)
    if not state.terminal:
        return ResultResponse(job_id=job_id, state=state)
    inline = _done_value(job, deps) if job.result_kind == "i" else None
    if job.result_kind == "s":
        # Retention `consume`: past the grace of the first read the object is deleted: 410
        # result_consumed (from the hash; whatever the namespace's policy is now).
        refuse_consumed(job, PayloadKind.RESULT, deps)
    ref = _result_ref(job, deps)
    if ref is not None and p.policy.consume:
        # Retention `consume`: the first complete read starts the result's grace; a re-read
        # within it works (the time is the first read's: ZADD NX, HSETNX).
        schedule_consume(
            p.namespace,
            job_id,
            PayloadKind.RESULT,
            ref.key,
            deps.settings.consume_result_grace_s,
            deps,
            read=True,
            # A download URL handed out before the 410s start must find its object.
            object_outlives_s=deps.settings.presign_ttl_s + deps.settings.consume_result_grace_s,
        )
    return ResultResponse(
        job_id=job_id,
        state=state,
        resultRef=ref,
        resultInline=base64.b64encode(inline).decode("ascii") if inline is not None else None,
        error=_error(job, deps),
        download=download_for(ref, deps),
        blobs=downloads(job.namespace, job.result_blobs, deps),
    )


# What an enqueue with ?wait copies from the result answer once the job ended.
_RESULT_FIELDS = ("state", "resultRef", "resultInline", "error", "download", "blobs")


def with_result(p: Principal, answer: EnqueueResponse, wait_s: float, deps: Deps):
    """An enqueue's answer with the job's result, as `GET .../result` gives it, when the job
    ends within `wait_s` (enqueue-and-wait, issue 34); else the answer as it was. The job is
    in its queue by now whatever happens here: a failure to read its result (Redis gone away
    mid-wait) answers the job id, never an error that would make the client enqueue again."""
    try:
        result = get_result(p, answer.job_id, wait_s, deps)
    except PayloadStoreError as e:
        logger.warning(
            "result not read after enqueue", extra={"job_id": answer.job_id, "code": e.code}
        )
        return answer
    if not result.state.terminal:
        return answer
    return answer.model_copy(update={f: getattr(result, f) for f in _RESULT_FIELDS})


def with_results(p: Principal, answers: list, wait_s: float, deps: Deps) -> list:
    """A batch's answers, each job that ended within `wait_s` (one deadline for the batch,
    waited on job by job) with its result; refused items as they were. The answer keeps under
    Lambda's limit (models/limits.py): a result that would not fit is left out, and that job
    answers its id only (its result stays readable with GET .../result)."""
    # One wait for the whole batch, capped as a single result wait is (RESULT_MAX_WAIT_S).
    deadline = deps.clock() + min(wait_s, deps.settings.result_max_wait_s)
    left = DELIVERIES_BUDGET
    out = []
    for answer in answers:
        if isinstance(answer, EnqueueResponse):
            full = with_result(p, answer, max(deadline - deps.clock(), 0.0), deps)
            size = delivery_bytes(full)
            if full is not answer and size > left:
                logger.info("result left out of a batch answer: over the answer's byte budget")
                size = delivery_bytes(answer)
            else:
                answer = full
            left -= size
        out.append(answer)
    return out
