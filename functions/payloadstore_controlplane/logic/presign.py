"""Presigned URLs: mint keys, remember them, and refuse keys this namespace was never issued."""

from __future__ import annotations

import time

from ..models.api import (
    PartsRequest,
    PartsResponse,
    PartUrl,
    PresignGetResponse,
    PresignMultipart,
    PresignPutResponse,
    PresignRequest,
)
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
from ..store.records import (
    LeaseMismatch,
    NotMultipart,
    NotRunning,
    PartDiffers,
    PartsIssued,
    PresignCapReached,
    ResultIssued,
    ResultIssuedBefore,
)
from .context import Deps, Principal, find_job, issue_record
from .guard import refuse_enqueue
from .lifecycle import lease_mismatch
from .payload_keys import key_for, parse_key
from .policy import policy_headers, refuse_consumed

# A CRC64NVME multipart presign answers the URLs of this many first parts with the upload: at
# the default part size (16 MiB) an upload up to 1 GiB needs no parts call at all.
FIRST_PART_URLS = 64


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
    part_bytes = s.multipart_part_bytes_for(size) if s.multipart(size) else None
    crc = req.checksum_algorithm == "CRC64NVME"
    if part_bytes is None and not (req.crc64nvme if crc else req.sha256):
        # Without a checksum signed in, same-size bytes could replace the object after the
        # CP checked it; with one, S3 itself refuses them.
        raise Unprocessable(
            "op=put needs crc64nvme (base64 CRC64NVME of the bytes to upload)"
            if crc
            else "op=put needs sha256 (hex sha256 of the bytes to upload)"
        )
    sha256 = None if part_bytes else req.sha256
    crc64nvme = None if part_bytes else req.crc64nvme
    now = deps.clock()
    attempt: int | None = None
    if req.kind is PayloadKind.RESULT:
        issued_result = _issue_result(p, req, size, part_bytes, now, deps)
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
        deps.jobs.create_args_issue(
            job_id, p.namespace, size, req.content_type, sha256, part_bytes, crc64nvme
        )

    key = key_for(job_id, req.kind, attempt)
    algorithm = req.checksum_algorithm or "SHA256"
    if part_bytes:
        return _multipart_presign(
            p, req, job_id, key, size, part_bytes, algorithm, attempt, now, deps
        )
    signed = deps.objects.presign_put(
        key,
        size,
        req.content_type,
        sha256,
        crc64nvme,
        policy_headers=policy_headers(p.policy, deps),
    )
    metrics_count("Presigns", op="put")
    logger.info("presigned put", extra={"job_id": job_id, "kind": req.kind.value, "size": size})
    return PresignPutResponse(
        url=signed.url,
        headers=signed.headers,
        bucket=deps.objects.bucket,
        key=key,
        job_id=job_id,
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
        checksum_algorithm=algorithm,
    )


def _multipart_presign(
    p: Principal,
    req: PresignRequest,
    job_id: str,
    key: str,
    size: int,
    part_bytes: int,
    algorithm: str,
    attempt: int | None,
    now: float,
    deps: Deps,
) -> PresignPutResponse:
    """Create the key's multipart upload and record it (a result's: for `attempt` only)."""
    crc = algorithm == "CRC64NVME"
    upload_id = deps.objects.create_multipart(
        key, req.content_type, algorithm, policy_headers(p.policy, deps)
    )
    first = first_part_count(size, part_bytes) if crc else 0
    recorded = deps.jobs.record_upload(
        job_id, req.kind.value, upload_id, algorithm, first, attempt=attempt
    )
    if recorded is None:
        # This delivery's lease lapsed while S3 created the upload, and a redelivery issued
        # its own result since: that one stays on record. Ours is never completed; the
        # bucket's lifecycle aborts it (payloads may not abort: grants.py).
        raise lease_mismatch(job_id)
    if not recorded:
        raise NotFound(f"job {job_id} not found")
    metrics_count("Presigns", op="multipart")
    logger.info(
        "multipart upload created",
        extra={
            "job_id": job_id,
            "kind": req.kind.value,
            "size": size,
            "parts": part_bytes,
            "checksum": algorithm,
        },
    )
    return _multipart_answer(key, job_id, upload_id, size, part_bytes, algorithm, now, deps)


def first_part_count(size: int, part_bytes: int) -> int:
    """How many part URLs go with a CRC64NVME multipart presign answer."""
    return min(-(-size // part_bytes), FIRST_PART_URLS)


def _multipart_answer(
    key: str,
    job_id: str,
    upload_id: str,
    size: int,
    part_bytes: int,
    algorithm: str,
    now: float,
    deps: Deps,
) -> PresignPutResponse:
    return PresignPutResponse(
        url=None,
        headers={},
        bucket=deps.objects.bucket,
        key=key,
        job_id=job_id,
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
        multipart=multipart_spec(key, upload_id, size, part_bytes, algorithm, now, deps),
        checksum_algorithm="CRC64NVME" if algorithm == "CRC64NVME" else "SHA256",
    )


def multipart_spec(
    key: str,
    upload_id: str,
    size: int,
    part_bytes: int,
    algorithm: str,
    now: float,
    deps: Deps,
) -> PresignMultipart:
    """The `multipart` of an answer that opened (or reopened) a multipart upload: for a
    CRC64NVME upload with the URLs of its first parts (each signs its size only: S3 checks the
    whole object's CRC at completion)."""
    count = -(-size // part_bytes)
    if algorithm != "CRC64NVME":
        # (As before CRC64NVME: the answer of a SHA256 upload is unchanged.)
        return PresignMultipart(upload_id=upload_id, part_bytes=part_bytes, part_count=count)
    urls = []
    for number in range(1, first_part_count(size, part_bytes) + 1):
        length = part_bytes if number < count else size - part_bytes * (count - 1)
        signed = deps.objects.presign_part(key, upload_id, number, length, None)
        urls.append(PartUrl(number=number, url=signed.url, headers=signed.headers))
    metrics_count("Presigns", len(urls), op="part")
    return PresignMultipart(
        upload_id=upload_id,
        part_bytes=part_bytes,
        part_count=count,
        checksum_type="FULL_OBJECT",
        parts=urls,
        parts_expire_at=iso_utc(now + deps.settings.presign_ttl_s),
    )


def _issue_result(
    p: Principal, req: PresignRequest, size: int, part_bytes: int | None, now: float, deps: Deps
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
        job_id,
        p.namespace,
        size,
        req.content_type,
        None if part_bytes else req.sha256,
        int(now * 1000),
        lease=req.lease,
        part_bytes=part_bytes,
        crc64nvme=None if part_bytes else req.crc64nvme,
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
    # A multipart issue has no whole-object checksum yet: only the size and content type repeat.
    asked_sha = req.sha256 if not issued.part_bytes else None
    asked_crc = req.crc64nvme if not issued.part_bytes else None
    issued_crc = issued.crc64nvme if not issued.part_bytes else None
    # The issued checksum is not echoed: the answer says what differs, never the value.
    differs = [
        name
        for name, mine, theirs in (
            ("size", req.size, issued.size),
            ("sha256", asked_sha, issued.sha256),
            ("crc64nvme", asked_crc, issued_crc),
            ("content_type", req.content_type, issued.content_type),
        )
        if mine != theirs
    ]
    if differs:
        raise Conflict(
            "a re-presign must repeat the size, checksum and content_type of the first; "
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
    now = deps.clock()
    if issued.part_bytes:
        upload = deps.jobs.multipart_upload(issued.job_id, issued.kind.value)
        if upload is None:
            if issued.composite_sha256 or issued.crc64nvme:
                raise Conflict(f"the multipart upload of job {issued.job_id} was completed already")
            # Its upload was forgotten without being kept: completed under the policy before
            # a change (refused, 409 policy_mismatch) or aborted. A fresh upload of the same
            # key, under the current policy, takes its place.
            return _multipart_presign(
                p,
                req,
                issued.job_id,
                issued.key,
                issued.size,
                issued.part_bytes,
                req.checksum_algorithm or "SHA256",
                issued.attempt,
                now,
                deps,
            )
        metrics_count("Presigns", op="multipart")
        return _multipart_answer(
            issued.key,
            issued.job_id,
            upload.upload_id,
            issued.size,
            issued.part_bytes,
            upload.algorithm,
            now,
            deps,
        )
    signed = deps.objects.presign_put(
        issued.key,
        issued.size,
        issued.content_type,
        issued.sha256,
        issued.crc64nvme,
        policy_headers=policy_headers(p.policy, deps),
    )
    metrics_count("Presigns", op="put")
    logger.info("re-presigned put", extra={"job_id": issued.job_id, "presigns": count})
    return PresignPutResponse(
        url=signed.url,
        headers=signed.headers,
        bucket=issued.bucket,
        key=issued.key,
        job_id=issued.job_id,
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
        checksum_algorithm="CRC64NVME" if issued.crc64nvme else "SHA256",
    )


def presign_get(p: Principal, req: PresignRequest, deps: Deps) -> PresignGetResponse:
    now = deps.clock()
    # The namespace's retention class: `1d` cuts RESULT_TTL_S short, `7d`/`30d` records of
    # finished jobs live that long (logic/daemon.py keeps them).
    retention = p.policy.read_window_s(deps.settings.result_ttl_s)
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
    # Retention `consume`: the object of a succeeded job's arguments, or of a result read past
    # its grace, is deleted: 410 arguments_consumed / result_consumed, not a URL to nothing.
    if job is not None:
        refuse_consumed(job, kind, deps)
    url = deps.objects.presign_get(issued.key)
    metrics_count("Presigns", op="get")
    return PresignGetResponse(url=url, expires_at=iso_utc(now + deps.settings.presign_ttl_s))


def presign_parts(p: Principal, req: PartsRequest, deps: Deps) -> PartsResponse:
    """UploadPart URLs for parts of the multipart upload of `req.job_id`'s key, each with its
    size and sha256 signed in. A part asked for again must repeat its sha256 (an expired URL);
    a call that asks for any part again counts one presign against MAX_PRESIGNS_PER_JOB.
    (A blob's parts, `req.blob`, are logic/blobs.py's `presign_blob_parts`.)"""
    job_id = req.job_id or ""
    wanted = PayloadKind.ARGS if p.role == CLIENT else PayloadKind.RESULT
    if req.kind != wanted:
        raise Forbidden(f"a {p.role} token presigns kind={wanted.value} only")
    job = deps.jobs.get_job(job_id) if JOB_ID_RE.match(job_id) else None
    issued = (
        issue_record(job, req.kind, deps)
        if job is not None and job.namespace == p.namespace
        else None
    )
    if issued is None:
        raise NotFound(f"no {req.kind.value} key was issued for job {job_id}")
    if not issued.part_bytes:
        raise Conflict(
            f"the {req.kind.value} key of job {job_id} is a single PUT upload, not multipart"
        )
    check_part_sizes(req, issued.size, issued.part_bytes)
    upload = deps.jobs.multipart_upload(job_id, req.kind.value)
    check_part_checksums(req, upload.algorithm if upload else "SHA256")
    outcome = deps.jobs.issue_parts(
        job_id,
        p.namespace,
        req.kind.value,
        [(part.number, part.sha256) for part in req.parts],
        deps.settings.max_presigns_per_job,
        lease=req.lease,
    )
    upload_id = _parts_outcome(req, outcome)
    urls = sign_parts(issued.key, upload_id, req, deps)
    logger.info("presigned parts", extra={"job_id": job_id, "parts": len(urls)})
    return PartsResponse(
        job_id=job_id,
        key=issued.key,
        upload_id=upload_id,
        parts=urls,
        expires_at=iso_utc(deps.clock() + deps.settings.presign_ttl_s),
    )


def sign_parts(key: str, upload_id: str, req: PartsRequest, deps: Deps) -> list[PartUrl]:
    """One presigned UploadPart URL per part asked for, its size and checksum signed in."""
    urls = []
    for part in req.parts:
        signed = deps.objects.presign_part(
            key, upload_id, part.number, part.size, part.sha256, part.crc64nvme
        )
        urls.append(PartUrl(number=part.number, url=signed.url, headers=signed.headers))
    metrics_count("Presigns", len(urls), op="part")
    return urls


def check_part_checksums(req: PartsRequest, algorithm: str) -> None:
    """422 for a part whose checksum is not the upload's: a SHA256 (COMPOSITE) upload signs
    each part's sha256 (required); a CRC64NVME (FULL_OBJECT) one takes no sha256, and a part's
    crc64nvme is optional (S3 checks the whole object at completion)."""
    for part in req.parts:
        if algorithm == "CRC64NVME" and part.sha256:
            raise Unprocessable(
                f"part {part.number}: the upload is CRC64NVME (FULL_OBJECT); give crc64nvme "
                "or no checksum, not sha256"
            )
        if algorithm != "CRC64NVME" and not part.sha256:
            raise Unprocessable(
                f"part {part.number} needs sha256: the upload is SHA256 (COMPOSITE)"
            )


def check_part_sizes(req: PartsRequest, size: int, part_bytes: int) -> None:
    """422 for a part number past the upload's last, or a part of another size."""
    count = -(-size // part_bytes)
    for part in req.parts:
        if part.number > count:
            raise Unprocessable(f"part {part.number} does not exist: the upload has {count} parts")
        expected = part_bytes if part.number < count else size - part_bytes * (count - 1)
        if part.size != expected:
            raise Unprocessable(
                f"part {part.number} must be {expected} bytes (part_bytes={part_bytes}), "
                f"not {part.size}"
            )


def _parts_outcome(req: PartsRequest, outcome: object) -> str:
    """The upload id to sign for, or the refusal of the parts call."""
    job_id = req.job_id or ""
    match outcome:
        case PartsIssued(upload_id=upload_id):
            return upload_id
        case NotMultipart():
            raise Conflict(f"the multipart upload of job {job_id} is not open (completed already?)")
        case PartDiffers(number=number):
            raise Conflict(
                f"part {number} was presigned before with another sha256: a part asked for "
                "again must repeat its size and sha256"
            )
        case PresignCapReached():
            raise TooManyPresigns(f"job {job_id} reached MAX_PRESIGNS_PER_JOB")
        case LeaseMismatch(state=state):
            raise lease_mismatch(job_id, state)
        case NotRunning(state=state):
            if req.kind is PayloadKind.ARGS:
                raise Conflict(f"job {job_id} is {state}: its args were enqueued already")
            raise Conflict(f"job {job_id} is {state or 'not started'}, not running")
    raise NotFound(f"no {req.kind.value} key was issued for job {job_id}")
