"""Blobs: content uploaded once per namespace and referenced by any number of jobs and results.

A blob's key is `blobs/<namespace>/<sha256>`: the namespace is part of the key, so a sha256 known
in one namespace gives nothing in another (its record, its object and its URLs are its own).
The control plane records a blob (store/jobs/blobs.py) only once its upload is verified (HEAD:
size and the sha256 checksum S3 computed, which was signed into the PUT), and refuses with 409
`unknown_blob` a job or a result that names a blob its namespace does not have. A blob lives as
long as the newest job that references it, within the retention: when a job references a blob
older than half the retention, the object is copied onto itself (S3 CopyObject: no bytes
through the control plane) so the bucket's lifecycle counts from then, and its record is
renewed."""

from __future__ import annotations

from collections.abc import Iterable

from ..models.api import BlobDownload, BlobRequest, BlobResponse, BlobUpload
from ..models.errors import Conflict, UnknownBlob
from ..observability import logger, metrics_count
from ..store.records import sha256_hex_to_b64
from .context import Deps, Principal
from .presign import iso_utc

BLOB_PREFIX = "blobs/"
BLOB_CONTENT_TYPE = "application/octet-stream"


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
    """The blob as the namespace has it (`exists`), else a presigned PUT of it. An object found
    at the key (an upload just done) is verified and recorded here: POST again after the upload."""
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
    info = deps.objects.head(key)
    if info is not None and info.size == size and info.sha256_b64 == sha256_hex_to_b64(sha):
        age = max(now - (info.last_modified or now), 0.0)
        ttl = int(retention - age)
        if age > retention / 2 or ttl <= 0:
            # Uploaded long ago and never recorded (or its record expired): renew it first.
            if not deps.objects.copy_onto_itself(key, BLOB_CONTENT_TYPE):
                return _upload(sha, size, key, now, deps)
            ttl = retention
        deps.jobs.record_blob(p.namespace, sha, size, ttl)
        metrics_count("BlobsVerified")
        logger.info("blob verified", extra={"sha256": sha, "size": size})
        return _exists(sha, size, key, now + ttl)
    return _upload(sha, size, key, now, deps)


def _exists(sha: str, size: int, key: str, expires: float) -> BlobResponse:
    return BlobResponse(sha256=sha, size=size, exists=True, key=key, expires_at=iso_utc(expires))


def _upload(sha: str, size: int, key: str, now: float, deps: Deps) -> BlobResponse:
    signed = deps.objects.presign_put(key, size, BLOB_CONTENT_TYPE, sha)
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
