"""Payload bytes through S3: presign on the wire, move the bytes with `_transfer`.

Shared by `Queue` (args), `Job` (results) and `Daemon` (args in, results out), so none of them
builds presign requests or S3 references of its own.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from . import _cancel, codec
from ._http import RetryPolicy
from ._multipart_download import download_parts, replaceable, temp_beside
from ._multipart_upload import upload_parts
from ._transfer import download, expiry_epoch, upload
from ._wire import DownloadGrant, PayloadRef, ServerConfig, UploadGrant, Wire
from .errors import ApiError, PayloadTooLarge

# A URL handed out with a reference is used only with this much life left (clock skew, a queue
# wait between the answer and the download); otherwise one presign-get call replaces it.
GRANT_MARGIN_S = 30.0


def usable(grant: DownloadGrant) -> bool:
    deadline = expiry_epoch(grant.expires_at)
    return deadline is None or deadline - time.time() > GRANT_MARGIN_S


class Payloads:
    def __init__(
        self,
        wire: Wire,
        s3_http: httpx.Client,
        *,
        config: Callable[[], ServerConfig],
        retry: RetryPolicy,
        refresh: Callable[[], ServerConfig] | None = None,
        progress: bool | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.wire = wire
        self.s3_http = s3_http
        self._config = config
        self._refresh = refresh
        self.retry = retry
        self.progress = progress
        self._sleep = sleep

    def check_size(self, size: int) -> None:
        """PayloadTooLarge, before any presign, for bytes over MAX_PAYLOAD_BYTES (read again
        first: a cap raised since the config was read does not refuse what it allows)."""
        limit = self._config().max_payload_bytes
        if size > limit and self._refresh is not None:
            limit = self._refresh().max_payload_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"payload is {size} bytes ({size / 2**20:.1f} MiB) encoded, over the "
                f"{limit} byte ({limit / 2**20:.1f} MiB) cap (MAX_PAYLOAD_BYTES)",
                size=size,
                limit=limit,
                status=None,
            )

    def store(
        self,
        encoded: Any,
        kind: str,
        *,
        job_id: str | None = None,
        lease: str | None = None,
        progress: bool | None = None,
    ) -> tuple[PayloadRef, str | None]:
        """Presign, PUT with exactly the signed headers (re-presigning the same job's key when a
        URL expires), and return (reference, job id the key belongs to). A result is presigned
        with the delivery's `lease`."""
        size = encoded.nbytes
        config = self._config()
        threshold = config.multipart_threshold
        if threshold is not None and size > threshold:
            try:
                return self._store_parts(
                    encoded, kind, job_id=job_id, lease=lease, progress=progress
                )
            except _SinglePut:
                pass
        # CRC64NVME where the server takes it (S3 checks it; several GB/s to compute), else the
        # sha256 a server before it asks for.
        crc = encoded.crc64nvme() if config.crc64nvme else None
        sha256 = None if crc else encoded.sha256()
        grant = self.wire.presign_put(
            size=size,
            kind=kind,
            sha256=sha256,
            content_type=codec.CONTENT_TYPE,
            job_id=job_id,
            lease=lease,
            crc64nvme=crc,
        )
        granted_job = grant.job_id or job_id
        latest: list[UploadGrant] = [grant]

        def presign_again() -> dict:
            latest.append(
                self.wire.presign_put(
                    size=size,
                    kind=kind,
                    sha256=sha256,
                    content_type=codec.CONTENT_TYPE,
                    job_id=granted_job,
                    lease=lease,
                    crc64nvme=crc,
                )
            )
            return latest[-1].raw

        # (hashing a large payload took a while: a transfer cancelled meanwhile sends nothing)
        _cancel.checkpoint()
        upload(
            self.s3_http,
            grant.raw,
            list(encoded.chunks),
            size,
            presign_again=presign_again,
            retry=self.retry,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc=f"upload {kind}",
        )
        done = latest[-1]
        ref = PayloadRef(
            bucket=done.bucket,
            key=done.key,
            size=size,
            content_type=codec.CONTENT_TYPE,
            sha256=sha256,
            crc64nvme=crc,
        )
        return ref, granted_job

    def _store_parts(
        self,
        encoded: Any,
        kind: str,
        *,
        job_id: str | None,
        lease: str | None,
        progress: bool | None,
    ) -> tuple[PayloadRef, str | None]:
        """A multipart upload: presign (no whole-payload checksum first), then the parts,
        checksummed one after another while the earlier ones upload. CRC64NVME (FULL_OBJECT):
        the first parts' URLs come with the presign, the reference carries the whole object's
        CRC (the parts' combined) and S3 checks it at completion. SHA256 (a server before
        CRC64NVME): each part's URL is asked for with its sha256, in batches."""
        size = encoded.nbytes
        algorithm = "CRC64NVME" if self._config().crc64nvme else None
        try:
            grant = self.wire.presign_put(
                size=size,
                kind=kind,
                sha256=None,
                content_type=codec.CONTENT_TYPE,
                job_id=job_id,
                lease=lease,
                checksum_algorithm=algorithm,
            )
        except ApiError as e:
            if e.status == 422:
                # MULTIPART_THRESHOLD was raised since the config was read: a single PUT.
                raise _SinglePut() from e
            raise
        granted_job = grant.job_id or job_id or ""
        if grant.multipart is None:
            raise _SinglePut()
        crc = grant.raw.get("checksum_algorithm") == "CRC64NVME"
        checksum = upload_parts(
            self.s3_http,
            grant.multipart,
            encoded.chunks,
            size,
            ask_parts=lambda parts: self.wire.presign_parts(granted_job, kind, parts, lease=lease),
            retry=self.retry,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc=f"upload {kind}",
            algorithm="CRC64NVME" if crc else "SHA256",
        )
        layout = {
            "part_bytes": int(grant.multipart["part_bytes"]),
            "part_count": int(grant.multipart["part_count"]),
        }
        ref = PayloadRef(
            bucket=grant.bucket,
            key=grant.key,
            size=size,
            content_type=codec.CONTENT_TYPE,
            multipart=layout if crc else {**layout, "composite_sha256": checksum},
            crc64nvme=checksum if crc else None,
        )
        return ref, granted_job

    def fetch(
        self,
        ref: PayloadRef,
        *,
        job_id: str | None = None,
        progress: bool | None = None,
        grant: DownloadGrant | None = None,
        into: Any = None,
    ) -> bytearray:
        """Download a reference and verify its checksum, CRC64NVME or sha256, as the bytes
        arrive (PayloadCorrupt / PayloadLost).

        `grant`: the presigned GET the control plane handed out with the reference (poll and
        result answers carry one); used while it is valid, else one presign-get call is made.
        A URL that S3 refuses as expired is replaced the same way."""
        if grant is None or not usable(grant):
            grant = self.wire.presign_get(ref.key, job_id=job_id)
        _cancel.checkpoint()
        if ref.multipart and ref.size:
            got = download_parts(
                self.s3_http,
                {"url": grant.url, "method": "GET", "expires_at": grant.expires_at},
                size=ref.size,
                multipart=ref.multipart,
                presign_again=lambda: self.wire.presign_get(ref.key, job_id=job_id).raw,
                retry=self.retry,
                job_id=job_id,
                key=ref.key,
                progress=self.progress if progress is None else progress,
                sleep=self._sleep,
                into=into,
                crc64nvme=ref.crc64nvme,
            )
            return got if got is not None else bytearray()
        data = download(
            self.s3_http,
            {"url": grant.url, "method": grant.method or "GET", "expires_at": grant.expires_at},
            size=ref.size,
            sha256=ref.sha256,
            crc64nvme=ref.crc64nvme,
            presign_again=lambda: self.wire.presign_get(ref.key, job_id=job_id).raw,
            retry=self.retry,
            job_id=job_id,
            key=ref.key,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc="download",
        )
        if into is not None:
            write_into(into, data)
        return data


class _SinglePut(Exception):
    """The control plane wants a single PUT for this size after all."""


def write_into(into: Any, data: bytes | bytearray | memoryview) -> None:
    """Bytes held in memory into the caller's target (a path, a binary file, a buffer)."""
    if isinstance(into, (bytearray, memoryview)):
        memoryview(into).cast("B")[: len(data)] = data
    elif isinstance(into, (str, os.PathLike)):
        # Beside it, then renamed over it: a failed write (a full disk) leaves the old file whole.
        path = replaceable(os.fspath(into))
        if path is None:  # a FIFO, a device: written in place
            with open(into, "wb") as f:
                f.write(data)
            return
        fd, temp = temp_beside(path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    else:
        into.write(data)
