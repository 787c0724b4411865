"""What a job carried, for operators: its arguments and result as stored (inline bytes, or the S3
reference with a presigned GET). The dashboard and `payloadstore status --show-args` decode the
bytes on their side; the control plane never does (it keeps them opaque).

Reading here is not the result's read under retention `consume`: an operator's look schedules
no deletion (the owner's `GET .../result` does)."""

from __future__ import annotations

import base64

from ..models.api import JobPayloadsResponse, PayloadView
from ..models.domain import JobStatus, PayloadKind, PayloadRef, Tier
from ..models.limits import DELIVERIES_BUDGET, delivery_bytes
from ..store.records import JobRecord
from .context import Deps, Principal, load_job, payload_ref
from .downloads import download_for
from .policy import consumed_at_ms


def _s3_view(job: JobRecord, kind: PayloadKind, ref: PayloadRef, deps: Deps) -> PayloadView:
    """An S3 payload: its reference, and a presigned GET unless retention `consume` deleted it."""
    if consumed_at_ms(job, kind, deps) is not None:
        return PayloadView(
            tier="s3", size=ref.size, contentType=ref.contentType, ref=ref, gone="consumed"
        )
    return PayloadView(
        tier="s3",
        size=ref.size,
        contentType=ref.contentType,
        ref=ref,
        download=download_for(ref, deps),
    )


def _args(job: JobRecord, deps: Deps) -> PayloadView:
    if job.tier is Tier.S3:
        ref = payload_ref(job.job_id, PayloadKind.ARGS, job.args, deps)
        if ref is None:
            return PayloadView(tier="s3", gone="not_uploaded")
        return _s3_view(job, PayloadKind.ARGS, ref, deps)
    raw = deps.jobs.inline_args(
        job.namespace,
        job.queue or "",
        job.job_id,
        job.stream_id,
        job.created_ms or 0,
    )
    if raw is None:
        # A succeeded (or lost) inline job's entry is deleted at its end, bytes and all.
        return PayloadView(tier="inline", size=job.args_size, gone="not_kept")
    return PayloadView(tier="inline", inline=base64.b64encode(raw).decode("ascii"), size=len(raw))


def _result(job: JobRecord, deps: Deps) -> PayloadView | None:
    match job.result_kind:
        case "s":
            ref = payload_ref(job.job_id, PayloadKind.RESULT, job.result_issue, deps)
            if ref is None:
                return None
            return _s3_view(job, PayloadKind.RESULT, ref, deps)
        case "i":
            raw = job.done if job.done_read else deps.jobs.done_value(job.job_id)
            if raw is None:
                return PayloadView(tier="inline", gone="expired")
            return PayloadView(
                tier="inline", inline=base64.b64encode(raw).decode("ascii"), size=len(raw)
            )
    return None


def job_payloads(p: Principal, job_id: str, deps: Deps) -> JobPayloadsResponse:
    job = load_job(p, job_id, deps, with_done=True)
    answer = JobPayloadsResponse(
        job_id=job.job_id,
        queue=job.queue or "",
        state=JobStatus(job.state),
        args=_args(job, deps),
        result=_result(job, deps),
    )
    return _within_budget(answer)


def _within_budget(answer: JobPayloadsResponse) -> JobPayloadsResponse:
    """The answer under its byte budget (models/limits.py). Each inline payload alone fits (at
    most the largest INLINE_THRESHOLD), but arguments and result both inline near it would not:
    then the arguments' bytes are left out (`gone: answer_limit`) and the result, which
    `GET .../result` also answers, is kept. Only a job that ended moments ago has both (a
    succeeded job's inline arguments are freed at its end)."""
    if answer.result is None or answer.result.inline is None or answer.args.inline is None:
        return answer
    if delivery_bytes(answer) <= DELIVERIES_BUDGET:
        return answer
    args = answer.args.model_copy(update={"inline": None, "gone": "answer_limit"})
    return answer.model_copy(update={"args": args})
