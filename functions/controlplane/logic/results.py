"""Client-side reads: job status, and the result long-poll."""

from __future__ import annotations

import base64
import json

from ..models.domain import JobStatus, PayloadRef, Tier
from ..models.wire import JobError, JobStatusResponse, ResultResponse
from .context import Deps, Principal, load_job


def _ref(raw: str | None) -> PayloadRef | None:
    return PayloadRef.model_validate_json(raw) if raw else None


def _error(raw: str | None) -> JobError | None:
    return JobError.model_validate(json.loads(raw)) if raw else None


def job_status(p: Principal, job_id: str, deps: Deps) -> JobStatusResponse:
    job = load_job(p, job_id, deps)
    return JobStatusResponse(
        job_id=job_id,
        queue=job["queue"],
        state=JobStatus(job["state"]),
        attempts=int(job.get("attempts") or 0),
        tier=Tier(job["tier"]),
        payloadRef=_ref(job.get("payload_ref")),
        resultRef=_ref(job.get("result_ref")),
        error=_error(job.get("error")),
        created_at=float(job["created_at"]) if job.get("created_at") else None,
        updated_at=float(job["updated_at"]) if job.get("updated_at") else None,
    )


def get_result(p: Principal, job_id: str, wait_s: float, deps: Deps) -> ResultResponse:
    """The result or terminal error; state queued/running when still pending after the wait."""
    job = load_job(p, job_id, deps)
    if not JobStatus(job["state"]).terminal and wait_s > 0:
        deps.jobs.wait_done(job_id, min(wait_s, deps.settings.result_max_wait_s))
        job = load_job(p, job_id, deps)
    state = JobStatus(job["state"])
    if not state.terminal:
        return ResultResponse(job_id=job_id, state=state)
    inline = job.get("result_inline")
    return ResultResponse(
        job_id=job_id,
        state=state,
        resultRef=_ref(job.get("result_ref")),
        resultInline=base64.b64encode(inline).decode("ascii") if inline is not None else None,
        error=_error(job.get("error")),
    )
