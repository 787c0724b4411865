"""Blobs: content uploaded once per namespace and referenced by any number of jobs and results.

A blob's key is `blobs/<namespace>/<sha256>`: the namespace is part of the key, so a sha256 known
in one namespace gives nothing in another (its record, its object and its URLs are its own).
The control plane records a blob (store/jobs/blobs.py) only once its upload is verified (HEAD:
size and the sha256 checksum S3 computed, which was signed into the PUT), and refuses with 409
`unknown_blob` a job or a result that names a blob its namespace does not have. A blob lives as
long as the newest job that references it, within the retention: when a job references a blob
older than half the retention, the object is copied onto itself (S3 CopyObject: no bytes
through the control plane) so the bucket's lifecycle counts from then, and its record is
renewed.

A blob above MULTIPART_THRESHOLD is uploaded in parts with the payloads' multipart code: POST
.../blobs opens the upload (`multipart`), POST .../payloads/parts {"blob": sha256, ...} signs
each part's sha256 into its URL, and the next POST .../blobs completes the upload as an enqueue
completes a payload's (logic/verify.py: every issued part there with its signed checksum, then
the composite) before the blob is recorded. S3 cannot check a multipart object's whole sha256,
so every reader does (the SDK's blob cache): see docs/design.md "Blobs"."""

from __future__ import annotations

from collections.abc import Iterable

from ..models.api import (
    BlobDownload,
    BlobRequest,
    BlobResponse,
    BlobUpload,
    PartsRequest,
    PartsResponse,
    PresignMultipart,
)
from ..models.errors import Conflict, NotFound, UnknownBlob
from ..observability import logger, metrics_count
from ..store.records import (
    BlobUploadRecord,
    MultipartUpload,
    PartDiffers,
    PartsIssued,
    sha256_hex_to_b64,
)
from ..store.s3_objects import ObjectInfo
from .context import Deps, Principal
from .policy import policy_headers
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
    the upload."""
    sha, size, now = req.sha256, req.size, deps.clock()
    key = blob_key(p.namespace, sha)
    retention = deps.settings.retention_s
    record = deps.jobs.blob_records(p.namespace, [sha])[0]
    if record is not None:
        if record.size != size:
            raise Conflict(
                f"the namespace's blob {sha} has {record.size} bytes, not {size}",
                reason="size_mismatch",
            )
        expires = renew_old(p.namespace, {sha: record}, deps).get(sha, now + record.ttl_ms / 1000)
        return _exists(sha, size, key, expires)
    upload = deps.jobs.blob_upload(p.namespace, sha)
    if upload is not None:
        return _continue_upload(p, req, upload, deps)
    info = deps.objects.head(key)
    if info is not None and info.size == size and _is_the_blob(info, sha):
        age = max(now - (info.last_modified or now), 0.0)
        ttl = int(retention - age)
        if age > retention / 2 or ttl <= 0:
            # Uploaded long ago and never recorded (or its record expired): renew it first.
            if not deps.objects.copy_onto_itself(key, BLOB_CONTENT_TYPE):
                return _upload(p, sha, size, now, deps, req.checksum_algorithm)
            ttl = retention
        deps.jobs.record_blob(p.namespace, sha, size, ttl)
        metrics_count("BlobsVerified")
        logger.info("blob verified", extra={"sha256": sha, "size": size})
        return _exists(sha, size, key, now + ttl)
    return _upload(p, sha, size, now, deps, req.checksum_algorithm)


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
    retention = deps.settings.retention_s
    deps.jobs.record_blob(p.namespace, sha, upload.size, retention, uploaded=True)
    metrics_count("BlobsVerified")
    logger.info(
        "blob multipart completed",
        extra={"sha256": sha, "size": upload.size, "parts": plan.part_count},
    )
    return _exists(sha, upload.size, key, now + retention)


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


def renew_old(namespace: str, records: dict, deps: Deps) -> dict[str, float]:
    """Renew each blob of `records` (sha256 -> BlobRecord) older than half the retention: copy
    its object onto itself and record it again for the whole retention. Returns sha256 -> new
    expiry of those renewed; a blob whose object is gone is left out (and not renewed)."""
    retention = deps.settings.retention_s
    renewed: dict[str, float] = {}
    for sha, record in records.items():
        if record.ttl_ms >= retention * 500:
            continue
        if deps.objects.copy_onto_itself(blob_key(namespace, sha), BLOB_CONTENT_TYPE):
            deps.jobs.record_blob(namespace, sha, record.size, retention)
            renewed[sha] = deps.clock() + retention
            metrics_count("BlobsRenewed")
            logger.info("blob renewed", extra={"sha256": sha, "size": record.size})
    return renewed


def referenced(namespace: str, sha256s: Iterable[str], deps: Deps) -> set[str]:
    """Check the blobs some jobs (or a result) reference, renewing old ones: the set of those
    the namespace does not have (empty: all good). One Redis round trip for all of them."""
    wanted = sorted({s.lower() for s in sha256s})
    if not wanted:
        return set()
    records = deps.jobs.blob_records(namespace, wanted)
    found = {sha: r for sha, r in zip(wanted, records, strict=True) if r is not None}
    renew_old(namespace, found, deps)
    return set(wanted) - set(found)


def check_referenced(namespace: str, sha256s: Iterable[str], deps: Deps) -> None:
    """409 unknown_blob unless the namespace has every one of these blobs."""
    missing = referenced(namespace, sha256s, deps)
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
