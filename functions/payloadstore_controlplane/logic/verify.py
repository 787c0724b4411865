"""Before a reference is accepted, the object must exist with the issued size and checksum."""

from __future__ import annotations

from ..models.domain import IssueRecord, PayloadRef
from ..models.errors import Conflict
from ..store.records import sha256_hex_to_b64
from .context import Deps


def check_ref_matches_issue(ref: PayloadRef, issued: IssueRecord, deps: Deps) -> None:
    if ref.kind != "s3":
        raise Conflict(f"payloadRef.kind must be 's3', got {ref.kind!r}")
    if ref.key != issued.key:
        raise Conflict("the reference's key is not the job's issued key")
    if ref.bucket != deps.objects.bucket or ref.bucket != issued.bucket:
        raise Conflict("payloadRef.bucket is not this control plane's bucket")
    if ref.size != issued.size:
        raise Conflict(f"payloadRef.size {ref.size} differs from the issued size {issued.size}")
    if ref.sha256 and issued.sha256 and ref.sha256.lower() != issued.sha256:
        raise Conflict("payloadRef.sha256 differs from the sha256 the key was issued with")
    if ref.sha256 and not issued.sha256:
        raise Conflict("payloadRef.sha256 was not part of the presign; presign with it")


def verify_uploaded(ref: PayloadRef, issued: IssueRecord, deps: Deps) -> None:
    """HEAD the object; refuse with 409 saying which check failed. Writes nothing."""
    check_ref_matches_issue(ref, issued, deps)
    info = deps.objects.head(issued.key)
    if info is None:
        raise Conflict("payload not uploaded: no object at the issued key", reason="not_uploaded")
    if info.size != issued.size:
        raise Conflict(
            f"size mismatch: object has {info.size} bytes, issued for {issued.size}",
            reason="size_mismatch",
        )
    if issued.sha256:
        expected = sha256_hex_to_b64(issued.sha256)
        if info.sha256_b64 != expected:
            raise Conflict(
                "checksum mismatch: the object's sha256 is not the one signed at presign",
                reason="checksum_mismatch",
            )
