"""Payload bytes through S3: presign on the wire, move the bytes with `_transfer`.

Shared by `Queue` (args), `Job` (results) and `Daemon` (args in, results out), so none of them
builds presign requests or S3 references of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from . import codec
from ._http import RetryPolicy
from ._transfer import download, expiry_epoch, upload
from ._wire import DownloadGrant, PayloadRef, ServerConfig, UploadGrant, Wire
from .errors import PayloadTooLarge

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
        progress: bool | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.wire = wire
        self.s3_http = s3_http
        self._config = config
        self.retry = retry
        self.progress = progress
        self._sleep = sleep

    def check_size(self, size: int) -> None:
        """PayloadTooLarge, before any presign, for bytes over MAX_PAYLOAD_BYTES."""
        limit = self._config().max_payload_bytes
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
        sha256 = encoded.sha256()
        grant = self.wire.presign_put(
            size=size,
            kind=kind,
            sha256=sha256,
            content_type=codec.CONTENT_TYPE,
            job_id=job_id,
            lease=lease,
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
                )
            )
            return latest[-1].raw

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
        )
        return ref, granted_job

    def fetch(
        self,
        ref: PayloadRef,
        *,
        job_id: str | None = None,
        progress: bool | None = None,
        grant: DownloadGrant | None = None,
    ) -> bytearray:
        """Download a reference and verify its sha256 (PayloadCorrupt / PayloadLost).

        `grant`: the presigned GET the control plane handed out with the reference (poll and
        result answers carry one); used while it is valid, else one presign-get call is made.
        A URL that S3 refuses as expired is replaced the same way."""
        if grant is None or not usable(grant):
            grant = self.wire.presign_get(ref.key, job_id=job_id)
        return download(
            self.s3_http,
            {"url": grant.url, "method": grant.method or "GET", "expires_at": grant.expires_at},
            size=ref.size,
            sha256=ref.sha256,
            presign_again=lambda: self.wire.presign_get(ref.key, job_id=job_id).raw,
            retry=self.retry,
            job_id=job_id,
            key=ref.key,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc="download",
        )
