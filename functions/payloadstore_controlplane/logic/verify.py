"""Before a reference is accepted, the object must exist with the issued size and checksum.

A multipart reference is completed here first (enqueue, result post): the parts S3 holds are
listed and checked against the parts the CP issued (every part there, of its size, with the
sha256 signed into its URL), the upload is completed with exactly those parts, and the object's
composite SHA-256 (sha256 of the parts' binary sha256s, S3's COMPOSITE checksum) is checked
against the one computed from what was signed. The job then keeps that composite (32 bytes).
A blob uploaded in parts is completed by the same code (`complete_upload`, `check_composite`:
logic/blobs.py), keyed by its namespace and sha256 instead of a job."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from ..models.domain import IssueRecord, PayloadKind, PayloadRef
from ..models.errors import Conflict
from ..models.policy import NamespacePolicy
from ..observability import logger
from ..store.records import MultipartUpload, sha256_hex_to_b64
from ..store.s3_objects import CompletionRefused, ObjectInfo, UploadedPart
from .context import Deps
from .lifecycle import lease_mismatch
from .policy import check_object_policy


@dataclass(frozen=True)
class PartsPlan:
    """What the CP issued for a multipart upload: the key, the object's size, the part size."""

    key: str
    size: int
    part_bytes: int

    @property
    def part_count(self) -> int:
        return -(-self.size // self.part_bytes)

    @classmethod
    def of(cls, issued: IssueRecord) -> PartsPlan:
        assert issued.part_bytes  # a multipart issue
        return cls(issued.key, issued.size, issued.part_bytes)


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
    if ref.multipart is not None and (
        not issued.part_bytes or ref.multipart.part_bytes != issued.part_bytes
    ):
        raise Conflict("payloadRef.multipart differs from the multipart upload issued")


def verify_uploaded(
    ref: PayloadRef,
    issued: IssueRecord,
    deps: Deps,
    *,
    policy: NamespacePolicy | None = None,
) -> None:
    """HEAD the object; refuse with 409 saying which check failed. Writes nothing, except the
    composite checksum of a multipart upload this call completed. With the namespace's
    `policy`, the object must also carry its encryption and retention tag (409
    policy_mismatch)."""
    check_ref_matches_issue(ref, issued, deps)
    if issued.part_bytes:
        _verify_multipart(ref, issued, deps, policy)
        return
    info = deps.objects.head(issued.key)
    if info is None:
        raise Conflict("payload not uploaded: no object at the issued key", reason="not_uploaded")
    _check_size(info.size, issued)
    if issued.sha256:
        expected = sha256_hex_to_b64(issued.sha256)
        if info.sha256_b64 != expected:
            raise _checksum_mismatch("the object's sha256 is not the one signed at presign")
    if policy is not None:
        check_object_policy(issued.key, info, policy, deps)


def _check_size(size: int, issued: IssueRecord) -> None:
    if size != issued.size:
        raise Conflict(
            f"size mismatch: object has {size} bytes, issued for {issued.size}",
            reason="size_mismatch",
        )


def _checksum_mismatch(detail: str) -> Conflict:
    return Conflict(f"checksum mismatch: {detail}", reason="checksum_mismatch")


def composite_checksum(part_digests: list[bytes]) -> bytes:
    """S3's COMPOSITE SHA-256 of an object uploaded in parts: sha256 of their binary sha256s."""
    return hashlib.sha256(b"".join(part_digests)).digest()


def _verify_multipart(
    ref: PayloadRef, issued: IssueRecord, deps: Deps, policy: NamespacePolicy | None
) -> None:
    kind = issued.kind.value
    plan = PartsPlan.of(issued)
    upload = None
    composite = bytes.fromhex(issued.composite_sha256) if issued.composite_sha256 else None
    if composite is None:
        upload = deps.jobs.multipart_upload(issued.job_id, kind)
        if upload is None:
            raise Conflict(
                "payload not uploaded: the multipart upload is not open (aborted or expired)",
                reason="not_uploaded",
            )
        upload_id = upload.upload_id
        composite = complete_upload(
            plan,
            upload,
            deps,
            forget=lambda: deps.jobs.drop_upload(issued.job_id, kind, upload_id, issued.attempt),
            log_extra={"job_id": issued.job_id},
        )
    info = deps.objects.head(issued.key)
    if info is None:
        raise Conflict("payload not uploaded: no object at the issued key", reason="not_uploaded")
    check_composite(info, plan, composite)
    claimed = ref.multipart.composite_sha256 if ref.multipart else None
    if claimed and claimed.lower() != composite.hex():
        raise _checksum_mismatch("payloadRef.multipart.composite_sha256 is not the object's")
    if policy is not None:
        check_object_policy(issued.key, info, policy, deps)
    if upload is not None:
        # Kept only while the issue and the upload are still the ones completed here: a
        # delivery whose lease lapsed while S3 completed its upload must not write its
        # composite onto a redelivery's result issue, nor drop that delivery's open upload.
        if not deps.jobs.finish_multipart(
            issued.job_id, kind, composite, upload.upload_id, issued.attempt
        ):
            raise _upload_replaced(issued)
        logger.info(
            "multipart completed",
            extra={"job_id": issued.job_id, "kind": kind, "parts": issued.part_count},
        )


def _upload_replaced(issued: IssueRecord) -> Conflict:
    if issued.kind is PayloadKind.RESULT:
        # The result issue is a later delivery's now: this caller's lease lapsed.
        return lease_mismatch(issued.job_id)
    return Conflict(
        "payload not uploaded: the multipart upload was replaced while it was completed",
        reason="not_uploaded",
    )


def check_composite(info: ObjectInfo, plan: PartsPlan, composite: bytes) -> None:
    """The object HEAD found has the plan's size and S3's COMPOSITE checksum of `composite`
    (`<base64>-<part count>`); 409 size_mismatch / checksum_mismatch otherwise."""
    if info.size != plan.size:
        raise Conflict(
            f"size mismatch: object has {info.size} bytes, issued for {plan.size}",
            reason="size_mismatch",
        )
    expected = f"{base64.b64encode(composite).decode()}-{plan.part_count}"
    if info.sha256_b64 != expected:
        raise _checksum_mismatch(
            "the object's composite sha256 is not the parts' signed at presign"
        )


def complete_upload(
    plan: PartsPlan,
    upload: MultipartUpload,
    deps: Deps,
    *,
    forget: Callable[[], None],
    log_extra: dict,
) -> bytes:
    """Check the uploaded parts against the issued ones, complete the upload with them, and
    answer the composite sha256 of what was signed. 409 parts_mismatch, naming the parts. An
    upload S3 refuses to complete is aborted and `forget()` drops what the CP kept of it."""
    count = plan.part_count
    listed = deps.objects.list_parts(plan.key, upload.upload_id)
    if listed is None:
        # Completed by a concurrent caller (or retry) a moment ago: the HEAD decides.
        return composite_checksum([upload.parts.get(n, b"") for n in range(1, count + 1)])
    by_number = {p.number: p for p in listed}
    problems = _part_problems(plan, upload, by_number)
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise Conflict(
            f"parts mismatch: the uploaded parts are not the {count} issued: {shown}",
            reason="parts_mismatch",
        )
    ordered = [by_number[n] for n in range(1, count + 1)]
    try:
        deps.objects.complete_multipart(plan.key, upload.upload_id, ordered)
    except CompletionRefused as e:
        # The parts matched what was issued, yet S3 will not make them an object: the upload
        # cannot be finished. Aborted (its parts' storage freed now, not after the lifecycle's
        # day); the key takes a new presign (a re-presign or a parts call answers 409 then).
        failed = deps.objects.abort_multipart(plan.key, upload.upload_id)
        forget()
        logger.warning(
            "multipart completion refused",
            extra={**log_extra, "code": e.code, "abort_error": failed},
        )
        raise Conflict(
            f"parts mismatch: object storage refused to complete the upload ({e.code}); "
            "the upload was aborted: upload the content again with a new presign",
            reason="parts_mismatch",
        ) from e
    return composite_checksum([upload.parts[n] for n in range(1, count + 1)])


def _part_problems(
    plan: PartsPlan, upload: MultipartUpload, by_number: dict[int, UploadedPart]
) -> list[str]:
    count = plan.part_count
    last = plan.size - plan.part_bytes * (count - 1)
    problems = []
    for n in range(1, count + 1):
        signed, part = upload.parts.get(n), by_number.get(n)
        size = plan.part_bytes if n < count else last
        if signed is None:
            problems.append(f"part {n} was never presigned")
        elif part is None:
            problems.append(f"part {n} is missing")
        elif part.size != size:
            problems.append(f"part {n} has {part.size} bytes, not {size}")
        elif part.sha256_b64 != base64.b64encode(signed).decode():
            problems.append(f"part {n} has another sha256 than the one signed")
    problems += [f"part {n} was not issued" for n in sorted(by_number) if n > count]
    return problems
