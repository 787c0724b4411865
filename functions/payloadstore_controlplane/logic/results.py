"""Client-side reads: job status, and the result long-poll."""

from __future__ import annotations

import base64

from ..models.api import EnqueueResponse, JobError, JobStatusResponse, ResultResponse
from ..models.domain import JobStatus, PayloadKind, PayloadRef, Tier, job_id_time_s
from ..models.limits import DELIVERIES_BUDGET, delivery_bytes
from ..observability import logger, metrics_count
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
    result = read_result(p, job_id, wait_s, deps)
    answered(p, job_id, result.resultRef, deps)
    return result


def answered(p: Principal, job_id: str, ref: PayloadRef | None, deps: Deps) -> None:
    """What an answer that carries a result starts: retention `consume`, the first complete
    read of an S3 result starts its grace; a re-read within it works (the time is the first
    read's: ZADD NX, HSETNX). Called only for a result the answer really carries."""
    if ref is not None and p.policy.consume:
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


def read_result(p: Principal, job_id: str, wait_s: float, deps: Deps) -> ResultResponse:
    """`get_result`'s answer, without starting anything (`answered` does)."""
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


def with_result(
    p: Principal, answer: EnqueueResponse, wait_s: float, deps: Deps, *, start: bool = True
) -> EnqueueResponse:
    """An enqueue's answer with the job's result, as `GET .../result` gives it, when the job
    ends within `wait_s` (enqueue-and-wait, issue 34); else the answer as it was. The job is
    in its queue by now whatever happens here: any failure of the wait or of the read (Redis
    gone away mid-BLMOVE, a 410) answers the job id with `waited: false`, never an error that
    would make a client without an Idempotency-Key enqueue again (issue 43).
    `start`: whether the answer surely carries the result (`answered`); a batch decides that
    only once it has weighed it."""
    try:
        result = read_result(p, answer.job_id, wait_s, deps)
        if start and result.state.terminal:
            answered(p, answer.job_id, result.resultRef, deps)
    except Exception as e:  # noqa: BLE001 - the job is queued: whatever failed, answer its id
        return _not_waited(answer, e)
    if not result.state.terminal:
        return answer
    return answer.model_copy(update={f: getattr(result, f) for f in _RESULT_FIELDS})


def _not_waited(answer: EnqueueResponse, e: Exception) -> EnqueueResponse:
    logger.warning(
        "result not read after enqueue",
        extra={
            "job_id": answer.job_id,
            "error": type(e).__name__,
            "code": getattr(e, "code", None),
        },
    )
    metrics_count("EnqueueWaitFailed")
    return answer.model_copy(update={"waited": False})


def with_results(p: Principal, answers: list, wait_s: float, deps: Deps) -> list:
    """A batch's answers, each job that ended within `wait_s` (one deadline for the batch,
    waited on job by job) with its result; refused items as they were. The answer keeps under
    Lambda's limit (models/limits.py): a result that would not fit is left out, and that job
    answers its id only (its result stays readable with GET .../result, and nothing is started
    for it: a `consume` grace starts with the read that carries it). Once one wait fails, the
    jobs after it are not waited on: each answers its id with `waited: false`."""
    # One wait for the whole batch, capped as a single result wait is (RESULT_MAX_WAIT_S).
    deadline = deps.clock() + min(wait_s, deps.settings.result_max_wait_s)
    # The refused items' answers are in it too, wherever they stand: charged first.
    left = DELIVERIES_BUDGET - sum(
        delivery_bytes(a) for a in answers if not isinstance(a, EnqueueResponse)
    )
    failed = False
    out = []
    for answer in answers:
        if isinstance(answer, EnqueueResponse):
            if failed:
                full = answer.model_copy(update={"waited": False})
            else:
                full = with_result(p, answer, max(deadline - deps.clock(), 0.0), deps, start=False)
                failed = full.waited is False
            size = delivery_bytes(full)
            if full.state is not None and size > left:
                logger.info("result left out of a batch answer: over the answer's byte budget")
                full = answer
                size = delivery_bytes(answer)
            elif full.state is not None:
                try:
                    answered(p, full.job_id, full.resultRef, deps)
                except Exception as e:  # noqa: BLE001 - as a failed wait: the job's id only
                    full, failed = _not_waited(answer, e), True
                    size = delivery_bytes(full)
            answer = full
            left -= size
        out.append(answer)
    return out
