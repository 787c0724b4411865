"""Before a reference is accepted, the object must exist with the issued size and checksum.

A CRC64NVME multipart upload (FULL_OBJECT) is completed with the reference's whole-object CRC:
S3 itself checks the object it assembles against it (a part swapped for other bytes of the same
length is refused), and a HEAD with checksum mode confirms the stored CRC before the job keeps it.
A SHA256 multipart upload (clients before CRC64NVME) is checked part by part as below.

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
from ..models.errors import Conflict, PolicyMismatch, Unprocessable
from ..models.policy import NamespacePolicy
from ..observability import logger
from ..store.records import MultipartUpload, sha256_hex_to_b64
from ..store.s3.multipart import CompletionRefused, UploadedPart
from ..store.s3.objects import ObjectInfo
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
    if ref.crc64nvme and issued.crc64nvme and ref.crc64nvme != issued.crc64nvme:
        raise Conflict(
            "payloadRef.crc64nvme differs from the CRC64NVME the key was issued or completed with",
            reason="checksum_mismatch",
        )
    if ref.crc64nvme and not issued.crc64nvme and not issued.part_bytes:
        raise Conflict("payloadRef.crc64nvme was not part of the presign; presign with it")
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
    if issued.crc64nvme and info.crc64nvme_b64 != issued.crc64nvme:
        raise _checksum_mismatch("the object's CRC64NVME is not the one signed at presign")
    if issued.sha256:
        expected = sha256_hex_to_b64(issued.sha256)
        if info.sha256_b64 != expected:
            raise _checksum_mismatch("the object's sha256 is not the one signed at presign")
    if policy is not None:
        check_object_policy(issued.key, info, policy, deps)


def _check_policy(
    key: str, info: ObjectInfo | None, policy: NamespacePolicy | None, deps: Deps
) -> None:
    """The namespace's policy check of the object HEAD found (none without a policy)."""
    if policy is not None and info is not None:
        check_object_policy(key, info, policy, deps)


def _check_completed_policy(
    issued: IssueRecord,
    upload: MultipartUpload | None,
    info: ObjectInfo | None,
    policy: NamespacePolicy | None,
    deps: Deps,
) -> None:
    """The policy check of an object the key's multipart `upload` made: one created under the
    policy before a change is refused (409 policy_mismatch) and the upload forgotten, so a
    re-presign of the key opens a fresh upload under the current policy (logic/presign.py)
    instead of answering the completed one, whose parts can take no more PUTs."""
    try:
        _check_policy(issued.key, info, policy, deps)
    except PolicyMismatch:
        if upload is not None:
            kind = issued.kind.value
            deps.jobs.drop_upload(issued.job_id, kind, upload.upload_id, issued.attempt)
        elif issued.kind is PayloadKind.RESULT:
            # Completed by an earlier post that then failed (a 503) before the result was
            # stored: its kept completion is forgotten too, or the re-presign would answer
            # "completed already" and the delivery could never store its result. (Arguments
            # are left alone: their job may be queued already; a client presigns a new key.)
            kept = _kept_completion(issued)
            if kept:
                deps.jobs.reopen_result_upload(issued.job_id, issued.attempt, kept)
        raise


def _kept_completion(issued: IssueRecord) -> bytes:
    """The checksum a multipart issue keeps once completed (raw), or b"" (none kept)."""
    if issued.composite_sha256:
        return bytes.fromhex(issued.composite_sha256)
    return base64.b64decode(issued.crc64nvme) if issued.crc64nvme else b""


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
    if issued.crc64nvme:
        # A CRC64NVME upload completed before (a repeated enqueue or result post): the HEAD
        # decides, against the whole-object CRC S3 checked at completion.
        info = deps.objects.head(issued.key)
        check_full_object(info, PartsPlan.of(issued), issued.crc64nvme)
        _check_completed_policy(issued, None, info, policy, deps)
        return
    if issued.composite_sha256 is None:
        upload = deps.jobs.multipart_upload(issued.job_id, kind)
        if upload is not None and upload.algorithm == "CRC64NVME":
            _complete_full_object(ref, issued, upload, deps, policy)
            return
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
    _check_completed_policy(issued, upload, info, policy, deps)
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


def _complete_full_object(
    ref: PayloadRef,
    issued: IssueRecord,
    upload: MultipartUpload,
    deps: Deps,
    policy: NamespacePolicy | None = None,
) -> None:
    """Complete a CRC64NVME (FULL_OBJECT) upload with the reference's whole-object CRC: S3
    checks it against the parts it holds (a part that is not the uploader's bytes, even of the
    same length, is refused: 409 checksum_mismatch, the upload aborted), and the CP checks the
    stored object's CRC with a HEAD before keeping it (8 bytes) for readers."""
    kind = issued.kind.value
    if not ref.crc64nvme:
        raise Unprocessable(
            "a CRC64NVME multipart upload is completed with the whole object's CRC: "
            "give payloadRef.crc64nvme (base64, as S3 shows it)"
        )
    plan = PartsPlan.of(issued)
    upload_id = upload.upload_id
    complete_upload(
        plan,
        upload,
        deps,
        forget=lambda: deps.jobs.drop_upload(issued.job_id, kind, upload_id, issued.attempt),
        log_extra={"job_id": issued.job_id},
        crc64nvme=ref.crc64nvme,
    )
    info = deps.objects.head(issued.key)
    check_full_object(info, plan, ref.crc64nvme)
    _check_completed_policy(issued, upload, info, policy, deps)
    # Kept only while the issue and the upload are still the ones completed here (as for a
    # SHA256 upload below).
    if not deps.jobs.finish_multipart(
        issued.job_id, kind, base64.b64decode(ref.crc64nvme), upload_id, issued.attempt
    ):
        raise _upload_replaced(issued)
    logger.info(
        "multipart completed",
        extra={"job_id": issued.job_id, "kind": kind, "parts": plan.part_count, "crc": True},
    )


def check_full_object(info: ObjectInfo | None, plan: PartsPlan, crc64nvme: str) -> None:
    """The object is there, of the plan's size, with S3's FULL_OBJECT CRC64NVME `crc64nvme`."""
    if info is None:
        raise Conflict("payload not uploaded: no object at the issued key", reason="not_uploaded")
    if info.size != plan.size:
        raise Conflict(
            f"size mismatch: object has {info.size} bytes, issued for {plan.size}",
            reason="size_mismatch",
        )
    if info.crc64nvme_b64 != crc64nvme or (info.checksum_type or "FULL_OBJECT") != "FULL_OBJECT":
        raise _checksum_mismatch("the object's CRC64NVME is not the reference's")


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
    crc64nvme: str | None = None,
) -> bytes:
    """Check the uploaded parts against the issued ones, complete the upload with them, and
    answer the composite sha256 of what was signed (a CRC64NVME upload, `crc64nvme` its whole
    object's CRC: b""). 409 parts_mismatch, naming the parts; 409 checksum_mismatch when S3
    finds the whole object is not the CRC given. An upload S3 refuses to complete is aborted
    and `forget()` drops what the CP kept of it."""
    count = plan.part_count
    listed = deps.objects.list_parts(plan.key, upload.upload_id)
    if listed is None:
        # Completed by a concurrent caller (or retry) a moment ago: the HEAD decides.
        if crc64nvme:
            return b""
        return composite_checksum([upload.parts.get(n, b"") for n in range(1, count + 1)])
    by_number = {p.number: p for p in listed}
    problems = _part_problems(plan, upload, by_number, full_object=bool(crc64nvme))
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
        if crc64nvme:
            deps.objects.complete_multipart(plan.key, upload.upload_id, ordered, crc64nvme)
        else:
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
        if crc64nvme and e.code == "BadDigest":
            raise _checksum_mismatch(
                "object storage found the uploaded parts are not the bytes of the reference's "
                "crc64nvme; the upload was aborted: upload the content again with a new presign"
            ) from e
        raise Conflict(
            f"parts mismatch: object storage refused to complete the upload ({e.code}); "
            "the upload was aborted: upload the content again with a new presign",
            reason="parts_mismatch",
        ) from e
    if crc64nvme:
        return b""
    return composite_checksum([upload.parts[n] for n in range(1, count + 1)])


def _part_problems(
    plan: PartsPlan,
    upload: MultipartUpload,
    by_number: dict[int, UploadedPart],
    full_object: bool = False,
) -> list[str]:
    count = plan.part_count
    last = plan.size - plan.part_bytes * (count - 1)
    problems = []
    for n in range(1, count + 1):
        signed, part = upload.parts.get(n), by_number.get(n)
        size = plan.part_bytes if n < count else last
        if signed is None and not full_object:
            # (A FULL_OBJECT upload's part URLs may have gone with the presign or blob answer,
            # unrecorded: any part there came from a URL this CP signed, and S3 checks the
            # whole object at completion.)
            problems.append(f"part {n} was never presigned")
        elif part is None:
            problems.append(f"part {n} is missing")
        elif part.size != size:
            problems.append(f"part {n} has {part.size} bytes, not {size}")
        elif not full_object and part.sha256_b64 != base64.b64encode(signed or b"").decode():
            # (A FULL_OBJECT upload's parts are checked whole, by S3, at completion.)
            problems.append(f"part {n} has another sha256 than the one signed")
    problems += [f"part {n} was not issued" for n in sorted(by_number) if n > count]
    return problems
