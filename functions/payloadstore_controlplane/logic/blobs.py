"""Blobs: content uploaded once per namespace and referenced by any number of jobs and results.

A blob's key is `blobs/<namespace>/<sha256>`: the namespace is part of the key, so a sha256 known
in one namespace gives nothing in another (its record, its object and its URLs are its own).
The control plane records a blob (store/jobs/blobs.py) only once its upload is verified (HEAD:
size and the sha256 checksum S3 computed, which was signed into the PUT), and refuses with 409
`unknown_blob` a job or a result that names a blob its namespace does not have. A job keeps the
blobs it references readable for its own remaining life (models/blob_lifetime.py): the request
path only records, in Redis, until when a reference needs a blob whose object expires sooner;
the scheduled renewer (logic/renewals.py) copies those objects onto themselves ahead of their
expiry. No S3 copy runs on a request.

A blob above MULTIPART_THRESHOLD is uploaded in parts with the payloads' multipart code: POST
.../blobs opens the upload (`multipart`), POST .../payloads/parts {"blob": sha256, ...} signs
each part's sha256 into its URL, and the next POST .../blobs completes the upload as an enqueue
completes a payload's (logic/verify.py: every issued part there with its signed checksum, then
the composite) before the blob is recorded. S3 cannot check a multipart object's whole sha256,
so every reader does (the SDK's blob cache): see docs/design.md "Blobs"."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..models.api import (
    BlobDownload,
    BlobRequest,
    BlobResponse,
    BlobUpload,
    PartsRequest,
    PartsResponse,
    PresignMultipart,
)
from ..models.errors import Conflict, NotFound, PolicyMismatch, UnknownBlob
from ..models.policy import RETENTION_DAYS, RETENTION_TAG, NamespacePolicy
from ..observability import logger, metrics_count
from ..store.records import (
    BlobUploadRecord,
    MultipartUpload,
    PartDiffers,
    PartsIssued,
    sha256_hex_to_b64,
)
from ..store.s3.objects import ObjectInfo
from .context import Deps, Principal
from .policy import check_object_policy, encryption_of, policy_headers
from .presign import (
    check_part_checksums,
    check_part_sizes,
    iso_utc,
    multipart_spec,
    sign_parts,
)
from .verify import PartsPlan, check_composite, check_full_object, complete_upload

BLOB_PREFIX = "blobs/"
BLOB_CONTENT_TYPE = "application/octet-stream"
# The bucket's lifecycle aborts an incomplete multipart upload after a day: the CP forgets it
# by then too.
BLOB_UPLOAD_TTL_S = 86_400
# A reference's need is rounded up to this step: a blob in steady use costs one zset write per
# second at most, not one per job.
NEED_STEP_MS = 1000


def blob_key(namespace: str, sha256: str) -> str:
    return f"{BLOB_PREFIX}{namespace}/{sha256}"


def unknown_blob(missing: Iterable[str]) -> UnknownBlob:
    names = sorted(set(missing))
    return UnknownBlob(
        f"the namespace has no blob {', '.join(names)}: create it with POST .../blobs and "
        "upload it first",
        blobs=names,
    )


def ensure_blob(p: Principal, req: BlobRequest, deps: Deps) -> BlobResponse:
    """The blob as the namespace has it (`exists`), else a presigned PUT of it (above
    MULTIPART_THRESHOLD: a multipart upload). An object found at the key (an upload just done)
    is verified and recorded here, a multipart upload completed and verified: POST again after
    the upload. An object too close to its lifecycle expiry to be referenced is uploaded again
    (the new upload moves its expiry): no copy on this path."""
    sha, size, now = req.sha256, req.size, deps.clock()
    key = blob_key(p.namespace, sha)
    record = deps.jobs.blob_records(p.namespace, [sha])[0]
    if record is not None and record.policy not in (None, encryption_of(p.policy, deps)):
        # Verified under another encryption than the namespace's now: not its blob any more
        # (references to it are refused); the object is checked, and uploaded again.
        _cap_for_replacement(p, sha, deps)
        record = None
    if record is not None:
        if record.size != size:
            raise Conflict(
                f"the namespace's blob {sha} has {record.size} bytes, not {size}",
                reason="size_mismatch",
            )
        return _exists(sha, size, key, now + record.ttl_ms / 1000)
    upload = deps.jobs.blob_upload(p.namespace, sha)
    if upload is not None:
        return _continue_upload(p, req, upload, deps)
    info = deps.objects.head(key)
    if info is not None and info.size == size and _is_the_blob(info, sha):
        tags = deps.objects.tags(key) or {}
        if _meets_policy(p, key, info, tags, deps):
            written = info.last_modified if info.last_modified is not None else now
            life = deps.settings.blob_lifetime(lifecycle_days(tags))
            ttl_s = life.record_ttl_s(written, now)
            if ttl_s > 0:
                deps.jobs.record_blob(
                    p.namespace, sha, size, int(ttl_s * 1000), policy=encryption_of(p.policy, deps)
                )
                metrics_count("BlobsVerified")
                logger.info("blob verified", extra={"sha256": sha, "size": size})
                return _exists(sha, size, key, now + ttl_s)
            logger.info("blob found too close to its expiry, upload again", extra={"sha256": sha})
    return _upload(p, sha, size, now, deps, req.checksum_algorithm)


def _cap_for_replacement(p: Principal, sha: str, deps: Deps) -> None:
    """The record a retry still takes (verified under the encryption before a change) is about
    to see its object replaced by an upload under the current policy, whose class may be
    shorter (`30d` then `1d`): the record is cut to what any object written from now under
    that class lives, so it never promises the old object's days (the renewer, reading the
    record, would not copy the new object in time). A shorter record is left as it is."""
    life = deps.settings.blob_lifetime(lifecycle_days({RETENTION_TAG: p.policy.retention}))
    now = deps.clock()
    if deps.jobs.cap_blob_record(p.namespace, sha, int(life.record_ttl_s(now, now) * 1000)):
        logger.info("blob record cut to the class of its next upload", extra={"sha256": sha})


def _meets_policy(
    p: Principal, key: str, info: ObjectInfo, tags: dict[str, str], deps: Deps
) -> bool:
    """Whether the blob's object carries the namespace's encryption and retention tag, the
    check a payload reference passes (logic/policy.py). One that does not (uploaded under the
    policy before a change) is never recorded: the answer is a fresh upload under the current
    policy, which replaces the object."""
    try:
        check_object_policy(key, info, p.policy, deps, tags)
    except PolicyMismatch:
        logger.info("blob uploaded under another policy, upload again", extra={"key": key})
        return False
    return True


def lifecycle_days_of(key: str, info: ObjectInfo, deps: Deps) -> int:
    """The days of the lifecycle rule that expires this blob's object: its retention tag's class
    (the namespace policy it was uploaded under), else the `blobs/` backstop (an object uploaded
    before namespace policies, or without a tag). S3 honours the shortest rule that matches."""
    return lifecycle_days(deps.objects.tags(key) if info.tag_count else {})


def lifecycle_days(tags: dict[str, str] | None) -> int:
    """The lifecycle days of an object with these tags (see `lifecycle_days_of`)."""
    retention = (tags or {}).get(RETENTION_TAG)
    return RETENTION_DAYS.get(retention or "", max(RETENTION_DAYS.values()))


def _is_the_blob(info: ObjectInfo, sha: str) -> bool:
    """S3's checksum of an object at a blob's key is the blob's: its sha256 (a single PUT, or a
    copy), the COMPOSITE of a multipart upload (`<base64>-<parts>`), which only the CP
    completes at that key after checking each part against the checksum it signed, or the
    FULL_OBJECT CRC64NVME of one the CP completed with the uploader's CRC (no sha256 then)."""
    checksum = info.sha256_b64
    if checksum == sha256_hex_to_b64(sha) or (checksum is not None and "-" in checksum):
        return True
    return checksum is None and bool(info.crc64nvme_b64) and info.checksum_type == "FULL_OBJECT"


def _exists(sha: str, size: int, key: str, expires: float) -> BlobResponse:
    return BlobResponse(sha256=sha, size=size, exists=True, key=key, expires_at=iso_utc(expires))


def _upload(
    p: Principal, sha: str, size: int, now: float, deps: Deps, algorithm: str | None = None
) -> BlobResponse:
    key = blob_key(p.namespace, sha)
    if deps.settings.multipart(size):
        return _open_upload(p, sha, size, deps, algorithm or "SHA256")
    signed = deps.objects.presign_put(
        key, size, BLOB_CONTENT_TYPE, sha, policy_headers=policy_headers(p.policy, deps)
    )
    metrics_count("Presigns", op="blob")
    logger.info("presigned blob put", extra={"sha256": sha, "size": size})
    return BlobResponse(
        sha256=sha,
        size=size,
        exists=False,
        key=key,
        upload=BlobUpload(
            url=signed.url,
            headers=signed.headers,
            expires_at=iso_utc(now + deps.settings.presign_ttl_s),
        ),
    )


def _open_upload(p: Principal, sha: str, size: int, deps: Deps, algorithm: str) -> BlobResponse:
    """Create the blob's multipart upload (an upload a concurrent caller opened first wins: its
    instructions are answered and ours is aborted)."""
    key = blob_key(p.namespace, sha)
    part_bytes = deps.settings.multipart_part_bytes_for(size)
    created = deps.objects.create_multipart(
        key, BLOB_CONTENT_TYPE, algorithm, policy_headers=policy_headers(p.policy, deps)
    )
    upload_id, _, part_bytes, algorithm = deps.jobs.open_blob_upload(
        p.namespace, sha, created, size, part_bytes, BLOB_UPLOAD_TTL_S, algorithm
    )
    if upload_id != created:
        deps.objects.abort_multipart(key, created)
    metrics_count("Presigns", op="multipart")
    logger.info(
        "blob multipart upload created",
        extra={"sha256": sha, "size": size, "checksum": algorithm},
    )
    return _multipart_answer(key, sha, size, upload_id, part_bytes, algorithm, deps)


def _blob_spec(
    key: str, upload_id: str, size: int, part_bytes: int, algorithm: str, deps: Deps
) -> PresignMultipart:
    """A blob's upload in parts: CRC64NVME (FULL_OBJECT), its first part URLs in the answer,
    or SHA256 (COMPOSITE), each part's sha256 signed into its URL by a parts call."""
    return multipart_spec(key, upload_id, size, part_bytes, algorithm, deps.clock(), deps)


def _multipart_answer(
    key: str, sha: str, size: int, upload_id: str, part_bytes: int, algorithm: str, deps: Deps
) -> BlobResponse:
    return BlobResponse(
        sha256=sha,
        size=size,
        exists=False,
        key=key,
        multipart=_blob_spec(key, upload_id, size, part_bytes, algorithm, deps),
    )


def _continue_upload(
    p: Principal, req: BlobRequest, upload: BlobUploadRecord, deps: Deps
) -> BlobResponse:
    """A POST while the blob's multipart upload is open: its instructions again while no part
    was presigned yet, else its completion, verified (409 parts_mismatch: upload what is
    missing and POST again), and the blob recorded."""
    sha, now = req.sha256, deps.clock()
    key = blob_key(p.namespace, sha)
    if upload.size != req.size:
        raise Conflict(
            f"the blob {sha} is being uploaded with {upload.size} bytes, not {req.size}",
            reason="size_mismatch",
        )
    full_object = upload.algorithm == "CRC64NVME"
    if (full_object and not req.crc64nvme) or (not full_object and not upload.parts):
        # Nothing to complete yet (a CRC64NVME upload is completed with the whole blob's CRC,
        # which only its uploader knows): the upload's instructions again.
        return _multipart_answer(
            key, sha, upload.size, upload.upload_id, upload.part_bytes, upload.algorithm, deps
        )
    plan = PartsPlan(key, upload.size, upload.part_bytes)
    aborted: list[bool] = []

    def forget() -> None:
        aborted.append(True)
        deps.jobs.drop_blob_upload(p.namespace, sha)

    try:
        composite = complete_upload(
            plan,
            MultipartUpload(
                upload_id=upload.upload_id, parts=upload.parts, algorithm=upload.algorithm
            ),
            deps,
            forget=forget,
            log_extra={"sha256": sha},
            crc64nvme=req.crc64nvme if full_object else None,
        )
    except Conflict as e:
        if not aborted:
            # Still open: whoever POSTed (the uploader missing a part, or another uploader of
            # the same content, e.g. after the first crashed) may upload the parts and POST again.
            spec = _blob_spec(
                key, upload.upload_id, upload.size, upload.part_bytes, upload.algorithm, deps
            )
            e.details["multipart"] = spec.model_dump()
        raise
    info = deps.objects.head(key)
    if info is None:
        # The upload is gone from S3 (aborted by the lifecycle) and left no object.
        deps.jobs.drop_blob_upload(p.namespace, sha)
        raise Conflict(
            "blob not uploaded: its multipart upload is gone; POST again to start a new one",
            reason="not_uploaded",
        )
    if full_object:
        check_full_object(info, plan, req.crc64nvme or "")
    else:
        check_composite(info, plan, composite)
    tags = deps.objects.tags(key) or {}
    if not _meets_policy(p, key, info, tags, deps):
        # Opened under the policy before a change: the completed object is not recorded, and
        # a new upload under the current policy takes its place.
        deps.jobs.drop_blob_upload(p.namespace, sha)
        return _upload(p, sha, upload.size, deps.clock(), deps, upload.algorithm)
    # Written no earlier than this request began (or than S3 says): its expiry counts from
    # then, by the rule of the class its tag names (the policy when the upload was opened).
    written = min(now, info.last_modified) if info.last_modified is not None else now
    life = deps.settings.blob_lifetime(lifecycle_days(tags))
    ttl_s = life.record_ttl_s(written, deps.clock())
    deps.jobs.record_blob(
        p.namespace,
        sha,
        upload.size,
        int(ttl_s * 1000),
        uploaded=True,
        policy=encryption_of(p.policy, deps),
    )
    metrics_count("BlobsVerified")
    logger.info(
        "blob multipart completed",
        extra={"sha256": sha, "size": upload.size, "parts": plan.part_count},
    )
    return _exists(sha, upload.size, key, deps.clock() + ttl_s)


def presign_blob_parts(p: Principal, req: PartsRequest, deps: Deps) -> PartsResponse:
    """POST .../payloads/parts {"blob": sha256, "parts": [...]}: UploadPart URLs for parts of
    the blob's multipart upload (opened by POST .../blobs), as for a job's payload."""
    sha = req.blob or ""
    upload = deps.jobs.blob_upload(p.namespace, sha)
    if upload is None:
        raise NotFound(
            f"the namespace has no multipart upload open for blob {sha}: POST .../blobs first"
        )
    check_part_sizes(req, upload.size, upload.part_bytes)
    check_part_checksums(req, upload.algorithm)
    outcome = deps.jobs.issue_blob_parts(
        p.namespace, sha, [(part.number, part.sha256) for part in req.parts]
    )
    match outcome:
        case PartsIssued(upload_id=upload_id):
            pass
        case PartDiffers(number=number):
            raise Conflict(
                f"part {number} was presigned before with another sha256: a part asked for "
                "again must repeat its size and sha256"
            )
        case _:
            raise NotFound(f"the namespace has no multipart upload open for blob {sha}")
    key = blob_key(p.namespace, sha)
    urls = sign_parts(key, upload_id, req, deps)
    logger.info("presigned blob parts", extra={"sha256": sha, "parts": len(urls)})
    return PartsResponse(
        blob=sha,
        key=key,
        upload_id=upload_id,
        parts=urls,
        expires_at=iso_utc(deps.clock() + deps.settings.presign_ttl_s),
    )


def referenced(
    namespace: str,
    sha256s: Iterable[str],
    deps: Deps,
    *,
    result: bool = False,
    policy: NamespacePolicy | None = None,
    any_encryption: bool = False,
) -> set[str]:
    """Check the blobs a job's args (or, `result`, a result) reference and record until when
    they are needed (models/blob_lifetime.py): the set of those the namespace does not have
    (empty: all good). One Redis script for all of them; no S3 call. With the namespace's
    `policy`, a blob verified under another encryption than its policy's now is not had (a new
    reference to it is refused as a payload uploaded before the change is; `any_encryption`:
    a retry, whose references were accepted before, takes it), and the need follows the
    namespace's class: a finished job of `7d`/`30d` keeps its record, and so names its blobs,
    that long, not RESULT_TTL_S."""
    wanted = sorted({s.lower() for s in sha256s})
    if not wanted:
        return set()
    # (the need and the margin: not the lifecycle's days)
    life = deps.settings.blob_lifetime()
    if policy is not None:
        kept_s = policy.finished_record_s(deps.settings.result_ttl_s)
        life = replace(life, result_ttl_s=max(life.result_ttl_s, kept_s))
    now = deps.clock()
    need = life.need_for_result(now) if result else life.need_for_args(now)
    # Rounded up to a step (a write at most once per step per blob, and never a need too short).
    step_ms = NEED_STEP_MS
    need_ms = -(-int(need * 1000) // step_ms) * step_ms
    encryption = encryption_of(policy, deps) if policy is not None and not any_encryption else ""
    return deps.jobs.reference_blobs(
        namespace,
        wanted,
        int(now * 1000),
        need_ms,
        int(life.known_margin_s * 1000),
        policy=encryption,
    )


def check_referenced(
    namespace: str,
    sha256s: Iterable[str],
    deps: Deps,
    *,
    result: bool = False,
    policy: NamespacePolicy | None = None,
) -> None:
    """409 unknown_blob unless the namespace has every one of these blobs."""
    missing = referenced(namespace, sha256s, deps, result=result, policy=policy)
    if missing:
        raise unknown_blob(missing)


def packed(sha256s: Iterable[str]) -> bytes:
    """The raw digests, concatenated (32 bytes each), in the order given, without repeats."""
    seen: dict[str, None] = dict.fromkeys(s.lower() for s in sha256s)
    return b"".join(bytes.fromhex(s) for s in seen)


def unpacked(raw: bytes) -> list[str]:
    return [raw[i : i + 32].hex() for i in range(0, len(raw), 32)]


def downloads(namespace: str, sha256s: Iterable[str], deps: Deps) -> list[BlobDownload] | None:
    """A presigned GET of each blob (only those a job or its result references), or None."""
    shas = list(sha256s)
    if not shas:
        return None
    expires_at = iso_utc(deps.clock() + deps.settings.presign_ttl_s)
    return [
        BlobDownload(
            sha256=sha,
            url=deps.objects.presign_get(blob_key(namespace, sha)),
            expires_at=expires_at,
        )
        for sha in shas
    ]
