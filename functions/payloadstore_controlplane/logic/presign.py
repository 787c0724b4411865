"""Presigned URLs: mint keys, remember them, and refuse keys this namespace was never issued."""

from __future__ import annotations

import time

from ..models.api import PresignGetResponse, PresignPutResponse, PresignRequest
from ..models.domain import JOB_ID_RE, IssueRecord, PayloadKind, job_id_time_s, new_job_id
from ..models.errors import (
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    PayloadTooLarge,
    TooManyPresigns,
    Unprocessable,
)
from ..observability import logger, metrics_count
from ..routes import CLIENT
from ..store.records import LeaseMismatch, NotRunning, ResultIssued, ResultIssuedBefore
from .context import Deps, Principal, find_job, issue_record
from .guard import refuse_enqueue
from .lifecycle import lease_mismatch
from .payload_keys import key_for, parse_key


def iso_utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def presign_put(p: Principal, req: PresignRequest, deps: Deps) -> PresignPutResponse:
    s = deps.settings
    size = req.size
    # PresignRequest refuses op=put without a size, and only op=put is presigned here.
    assert size is not None
    if size > s.max_payload_bytes:
        raise PayloadTooLarge(
            f"size {size} exceeds MAX_PAYLOAD_BYTES={s.max_payload_bytes}",
            max_payload_bytes=s.max_payload_bytes,
        )
    wanted = PayloadKind.ARGS if p.role == CLIENT else PayloadKind.RESULT
    if req.kind != wanted:
        raise Forbidden(f"a {p.role} token presigns kind={wanted.value} only")
    now = deps.clock()
    attempt: int | None = None
    if req.kind is PayloadKind.RESULT:
        issued_result = _issue_result(p, req, size, now, deps)
        if isinstance(issued_result, PresignPutResponse):
            return issued_result
        job_id, attempt = req.job_id or "", issued_result
    elif req.job_id:
        job = deps.jobs.get_job(req.job_id)
        issued = (
            issue_record(job, PayloadKind.ARGS, deps)
            if job is not None and job.namespace == p.namespace
            else None
        )
        if issued is None:
            raise NotFound(f"no {req.kind.value} key was issued for job {req.job_id}")
        return _represign(p, req, issued, deps)
    else:
        job_id = new_job_id(int(now * 1000))
        # A presigned args key is the first half of an S3-tier enqueue: the hard mark applies.
        refuse_enqueue(deps, job_id=job_id)
        # The job is born here, awaiting its upload; it holds what was issued for its key.
        deps.jobs.create_args_issue(job_id, p.namespace, size, req.content_type, req.sha256)

    key = key_for(job_id, req.kind, attempt)
    signed = deps.objects.presign_put(key, size, req.content_type, req.sha256)
    metrics_count("Presigns", op="put")
    logger.info("presigned put", extra={"job_id": job_id, "kind": req.kind.value, "size": size})
    return PresignPutResponse(
        url=signed.url,
        headers=signed.headers,
        bucket=deps.objects.bucket,
        key=key,
        job_id=job_id,
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
    )


def _issue_result(
    p: Principal, req: PresignRequest, size: int, now: float, deps: Deps
) -> int | PresignPutResponse:
    """Record the result key of the delivery holding `req.lease`: the attempt whose key it is,
    or the answer to a re-presign of this delivery's key.

    Only for the delivery holding the job: running in this namespace, with its lease. A result
    key belongs to one delivery: a redelivery may upload another result (most results differ
    between runs), replacing what an earlier delivery had presigned."""
    if not req.job_id or not req.lease:
        raise Unprocessable("kind=result needs the job_id and the lease of the delivery")
    job_id = req.job_id
    if not JOB_ID_RE.match(job_id):
        raise NotFound(f"job {job_id} not found")
    outcome = deps.jobs.create_result_issue(
        job_id, p.namespace, size, req.content_type, req.sha256, int(now * 1000), lease=req.lease
    )
    match outcome:
        case ResultIssued(attempt=attempt):
            return attempt
        case ResultIssuedBefore():
            # This delivery presigned its result before: a re-presign (the same facts, counted).
            job = deps.jobs.get_job(job_id)
            issued = issue_record(job, PayloadKind.RESULT, deps) if job is not None else None
            if issued is None:
                # The job's hash expired (or was removed) between the script and this read.
                raise NotFound(f"job {job_id} not found")
            return _represign(p, req, issued, deps)
        case LeaseMismatch(state=state):
            raise lease_mismatch(job_id, state)
        case NotRunning(state=state):
            raise Conflict(f"job {job_id} is {state or 'not started'}, not running")
    # Missing. A queued inline job has no hash until its first delivery.
    job = find_job(p.namespace, job_id, deps)
    if job is not None:
        raise Conflict(f"job {job_id} is {job.state}, not running")
    raise NotFound(f"job {job_id} not found")


def _represign(
    p: Principal, req: PresignRequest, issued: IssueRecord, deps: Deps
) -> PresignPutResponse:
    if issued.namespace != p.namespace:
        raise NotFound(f"no {req.kind.value} key was issued for job {issued.job_id}")
    if (issued.size, issued.sha256, issued.content_type) != (
        req.size,
        req.sha256,
        req.content_type,
    ):
        # The issued sha256 is not echoed: the answer says what differs, never the value.
        differs = [
            name
            for name, mine, theirs in (
                ("size", req.size, issued.size),
                ("sha256", req.sha256, issued.sha256),
                ("content_type", req.content_type, issued.content_type),
            )
            if mine != theirs
        ]
        raise Conflict(
            "a re-presign must repeat the size, sha256 and content_type of the first; "
            f"this one differs in {', '.join(differs)}"
        )
    count = deps.jobs.bump_presign(
        issued.job_id, issued.kind.value, deps.settings.max_presigns_per_job
    )
    if count == 0:
        raise NotFound(f"no {req.kind.value} key was issued for job {issued.job_id}")
    if count < 0:
        raise TooManyPresigns(
            f"job {issued.job_id} reached MAX_PRESIGNS_PER_JOB={deps.settings.max_presigns_per_job}"
        )
    signed = deps.objects.presign_put(issued.key, issued.size, issued.content_type, issued.sha256)
    now = deps.clock()
    metrics_count("Presigns", op="put")
    logger.info("re-presigned put", extra={"job_id": issued.job_id, "presigns": count})
    return PresignPutResponse(
        url=signed.url,
        headers=signed.headers,
        bucket=issued.bucket,
        key=issued.key,
        job_id=issued.job_id,
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
    )


def presign_get(p: Principal, req: PresignRequest, deps: Deps) -> PresignGetResponse:
    now = deps.clock()
    retention = deps.settings.result_ttl_s
    parsed = parse_key(req.key)
    if parsed is None:
        raise NotFound("key was never issued to this namespace")
    job_id, kind = parsed
    job = deps.jobs.get_job(job_id)
    issued = issue_record(job, kind, deps) if job is not None else None
    if issued is None:
        # The record expires with the retention; the id's timestamp tells "expired" from "never".
        if now - job_id_time_s(job_id) > retention:
            raise Gone(f"key is past the {retention // 3600} h retention")
        raise NotFound("key was never issued to this namespace")
    if issued.namespace != p.namespace or issued.key != req.key:
        # (another key of the job: a result key an earlier delivery was given, since replaced)
        raise NotFound("key was never issued to this namespace")
    if now - issued.issued_at > retention:
        # S3's lifecycle rounds to midnight UTC, so the object may linger: refuse it anyway.
        raise Gone(f"key is past the {retention // 3600} h retention")
    url = deps.objects.presign_get(issued.key)
    metrics_count("Presigns", op="get")
    return PresignGetResponse(url=url, expires_at=iso_utc(now + deps.settings.presign_ttl_s))
