"""Presign: a job is born at its args presign (awaiting_upload), and what the CP issued for a
key (size, content type, sha256, presign count) lives in the job hash.
A multipart upload's id and the sha256 of each part issued live in a parts hash of their own
(keys.parts) until the upload is completed; the job hash then keeps its composite sha256.
Scripts: presign_args.lua, presign_result.lua, presign_count.lua, presign_upload.lua,
presign_parts.lua, completion_multipart.lua."""

from __future__ import annotations

from typing import Any

from ...models.domain import JobStatus
from .. import keys
from ..records import (
    DEFAULT_CONTENT_TYPE,
    LeaseMismatch,
    Missing,
    MultipartUpload,
    NotMultipart,
    NotRunning,
    PartDiffers,
    PartsIssued,
    PresignCapReached,
    ResultIssued,
    ResultIssuedBefore,
    checksum_raw,
    sha_raw,
    text,
)
from ._base import StoreBase


def issue_fields(
    prefix: str,
    size: int,
    content_type: str,
    sha256: str | None,
    part_bytes: int | None = None,
    crc64nvme: str | None = None,
) -> list[Any]:
    flat: list[Any] = [prefix + "z", size, prefix + "n", 1]
    if content_type != DEFAULT_CONTENT_TYPE:
        flat += [prefix + "c", content_type]
    checksum = checksum_raw(sha256, crc64nvme)
    if checksum:
        flat += [prefix + "h", checksum]
    if part_bytes:
        flat += [prefix + "b", part_bytes]
    return flat


def _prefix(kind: str) -> str:
    return "p" if kind == "args" else "r"


class PresignSteps(StoreBase):
    def create_args_issue(
        self,
        job_id: str,
        namespace: str,
        size: int,
        content_type: str,
        sha256: str | None,
        part_bytes: int | None = None,
        crc64nvme: str | None = None,
    ) -> bool:
        """A new job in state awaiting_upload holding what was issued for its args key."""
        flat = [self._ttl, "n", namespace, "s", JobStatus.AWAITING_UPLOAD.value]
        flat += issue_fields("p", size, content_type, sha256, part_bytes, crc64nvme)
        return bool(self._run("presign_args", [keys.job(job_id)], flat))

    def create_result_issue(
        self,
        job_id: str,
        namespace: str,
        size: int,
        content_type: str,
        sha256: str | None,
        now_ms: int,
        *,
        lease: str,
        part_bytes: int | None = None,
        crc64nvme: str | None = None,
    ) -> ResultIssued | ResultIssuedBefore | LeaseMismatch | NotRunning | Missing:
        """Record the result the delivery holding `lease` will upload."""
        fields = issue_fields("r", size, content_type, sha256, part_bytes, crc64nvme)
        flat = [namespace, lease, *fields, "ri", now_ms]
        reply = self._run_on_job("presign_result", job_id, [keys.job(job_id)], flat)
        match reply[0]:
            case "ok":
                return ResultIssued(attempt=int(reply[1] or 0))
            case "exists":
                return ResultIssuedBefore()
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
            case "not_running":
                return NotRunning(reply[1])
        return Missing()

    def bump_presign(self, job_id: str, kind: str, max_presigns: int) -> int:
        """New presign count; -1 past the cap; 0 when no such key was issued."""
        count_field = "pn" if kind == "args" else "rn"
        return int(self._run("presign_count", [keys.job(job_id)], [count_field, max_presigns]))

    # -- multipart ---------------------------------------------------------------------------

    def record_upload(
        self,
        job_id: str,
        kind: str,
        upload_id: str,
        algorithm: str = "SHA256",
        first_parts: int = 0,
        attempt: int | None = None,
    ) -> bool | None:
        """Remember the multipart upload created for the job's `kind` key, its checksum
        algorithm, and parts 1..first_parts as issued (their URLs went with the presign: a
        later parts call for one of them counts as a re-presign); False: no job. A result's
        upload (`attempt`: the delivery whose key it is) is recorded only while that attempt
        still owns the result issue: None when a redelivery issued its own since."""
        keys_ = [keys.job(job_id), keys.parts(job_id, kind)]
        flat: list[Any] = [upload_id, "c" if algorithm == "CRC64NVME" else ""]
        flat.append("" if attempt is None else attempt)
        flat += range(1, first_parts + 1)
        recorded = int(self._run("presign_upload", keys_, flat))
        return None if recorded < 0 else bool(recorded)

    def issue_parts(
        self,
        job_id: str,
        namespace: str,
        kind: str,
        parts: list[tuple[int, str | None]],
        max_presigns: int,
        *,
        lease: str | None = None,
    ) -> (
        PartsIssued
        | NotMultipart
        | PartDiffers
        | PresignCapReached
        | LeaseMismatch
        | NotRunning
        | Missing
    ):
        """Record (part number, hex sha256) of parts about to be presigned."""
        flat: list[Any] = [namespace, _prefix(kind), lease or "", max_presigns]
        for number, sha256 in parts:
            flat += [number, sha_raw(sha256) or b""]
        keys_ = [keys.job(job_id), keys.parts(job_id, kind)]
        reply = self._run_on_job("presign_parts", job_id, keys_, flat)
        match reply[0]:
            case "ok":
                return PartsIssued(reply[1])
            case "single":
                return NotMultipart()
            case "differs":
                return PartDiffers(int(reply[1]))
            case "cap":
                return PresignCapReached()
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
            case "not_running" | "not_awaiting":
                return NotRunning(reply[1])
        return Missing()

    def multipart_upload(self, job_id: str, kind: str) -> MultipartUpload | None:
        """The upload in progress for the job's `kind` key, or None (none, or completed)."""
        raw = self._r.hgetall(keys.parts(job_id, kind))
        fields = {text(k): v for k, v in raw.items()}
        upload = fields.pop("u", None)
        algorithm = "CRC64NVME" if fields.pop("k", None) == b"c" else "SHA256"
        if not upload:
            return None
        return MultipartUpload(
            upload_id=text(upload),
            parts={int(n): bytes(v) for n, v in fields.items()},
            algorithm=algorithm,
        )

    def drop_upload(self, job_id: str, kind: str, upload_id: str, attempt: int | None) -> None:
        """Forget the job's upload `upload_id` (it was aborted): parts calls answer 409. An
        upload that is no longer the one on record (a redelivery's) is left alone."""
        keys_ = [keys.job(job_id), keys.parts(job_id, kind)]
        self._run("completion_multipart", keys_, [_prefix(kind), "", upload_id, attempt or 0])

    def reopen_result_upload(self, job_id: str, attempt: int | None, kept: bytes) -> bool:
        """Forget the completion (`kept`, its checksum) of attempt `attempt`'s result upload
        while the job still runs it (presign_reopen.lua): whether it was forgotten."""
        return bool(self._run("presign_reopen", [keys.job(job_id)], [attempt or 0, kept]))

    def finish_multipart(
        self, job_id: str, kind: str, composite: bytes, upload_id: str, attempt: int | None
    ) -> bool:
        """Keep the completed upload's checksum (a composite sha256, 32 bytes, or the whole
        object's CRC64NVME, 8 bytes) and drop its parts hash; False (nothing written) when the issue or the upload on record is no longer the one
        the caller completed: for a result, attempt `attempt`'s (a redelivery presigned its
        own since)."""
        keys_ = [keys.job(job_id), keys.parts(job_id, kind)]
        args = [_prefix(kind), composite, upload_id, attempt or 0]
        return bool(self._run("completion_multipart", keys_, args))
