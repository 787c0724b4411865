"""Moving payload bytes to and from S3 through presigned URLs (never through the control plane).

Uploads stream the encoded chunks (memoryviews into the caller's buffers) in slices, with an
explicit Content-Length, so a 64 MiB array is never joined into one more 64 MiB bytes object.
Downloads land in one preallocated bytearray and are hashed as they arrive.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC
from typing import Any, NoReturn

import httpx

from ._http import RetryPolicy
from .errors import PayloadCorrupt, PayloadLost, ServiceUnavailable, TransferError

log = logging.getLogger("payloadstore")

SLICE_BYTES = 1 << 20  # what one write hands to the socket; bounds the per-write copy in h11
S3_RETRY_STATUSES = frozenset({500, 502, 503, 504})
PROGRESS_MIN_BYTES = 1 << 20


def want_progress(progress: bool | None, size: int) -> bool:
    if progress is not None:
        return progress
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) and size >= PROGRESS_MIN_BYTES


class Progress:
    """tqdm when it is installed, else a plain one-line counter on stderr."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.enabled = enabled
        self._bar = None
        self._done = 0
        self._total = total
        self._desc = desc
        self._last_pct = -1
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            leave=True,
        )

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        self._done += n
        pct = int(self._done * 100 / self._total) if self._total else 100
        if pct != self._last_pct:
            self._last_pct = pct
            sys.stderr.write(
                f"\r{self._desc} {pct:3d}% {self._done / 2**20:.1f}/{self._total / 2**20:.1f} MiB"
            )
            sys.stderr.flush()

    def reset(self) -> None:
        if self._bar is not None:
            self._bar.reset(total=self._total)
        self._done = 0
        self._last_pct = -1

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")
            sys.stderr.flush()


def iter_slices(chunks: Iterable[Any], progress: Progress | None = None) -> Iterator[memoryview]:
    for chunk in chunks:
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        for start in range(0, len(view), SLICE_BYTES):
            piece = view[start : start + SLICE_BYTES]
            if progress is not None:
                progress.update(len(piece))
            yield piece


def s3_error(response: httpx.Response) -> tuple[str, str]:
    """(code, message) from S3's XML error body."""
    text = response.text if response.content else ""
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else str(response.status_code)), (
        message.group(1) if message else response.reason_phrase
    )


def looks_expired(response: httpx.Response, expires_at: Any) -> bool:
    _, message = s3_error(response)
    if "expired" in message.lower():
        return True
    deadline = expiry_epoch(expires_at)
    return deadline is not None and time.time() >= deadline


def expiry_epoch(expires_at: Any) -> float | None:
    """`expires_at` as epoch seconds; the control plane sends ISO 8601 UTC."""
    if expires_at is None:
        return None
    if isinstance(expires_at, (int, float)):
        return float(expires_at)
    try:
        from datetime import datetime

        parsed = datetime.fromisoformat(str(expires_at))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    except ValueError:
        return None


def upload(
    s3: httpx.Client,
    grant: dict,
    chunks: list,
    size: int,
    *,
    presign_again: Callable[[], dict],
    retry: RetryPolicy,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    desc: str = "upload",
) -> dict:
    """PUT the chunks to the grant's URL with exactly the grant's headers; return the grant that
    worked. A 403 from an expired URL asks the control plane for a new URL for the same key."""
    bar = Progress(size, desc, want_progress(progress, size))
    other_403_seen = False
    try:
        for attempt in range(retry.max_attempts):
            last = attempt == retry.max_attempts - 1
            if attempt:
                bar.reset()
            headers = {str(k): str(v) for k, v in (grant.get("headers") or {}).items()}
            if not any(k.lower() == "content-length" for k in headers):
                headers["Content-Length"] = str(size)
            try:
                response = s3.request(
                    grant.get("method", "PUT"),
                    grant["url"],
                    content=iter_slices(chunks, bar),
                    headers=headers,
                )
            except httpx.TransportError as e:
                if last:
                    raise ServiceUnavailable(f"upload to S3 failed: {e!r}") from e
                delay = retry.backoff(attempt)
                log.warning(
                    "retrying upload error=%s attempt=%d delay_s=%.2f",
                    type(e).__name__,
                    attempt + 1,
                    delay,
                )
                sleep(delay)
                continue
            if response.status_code in (200, 201, 204):
                return grant
            code, message = s3_error(response)
            if response.status_code == 403 and not last:
                expired = looks_expired(response, grant.get("expires_at"))
                if expired or not other_403_seen:
                    other_403_seen = other_403_seen or not expired
                    log.info("re-presigning upload key=%s reason=%s", grant.get("key"), code)
                    grant = presign_again()
                    continue
            if response.status_code in S3_RETRY_STATUSES and not last:
                delay = retry.backoff(attempt)
                log.warning(
                    "retrying upload status=%d attempt=%d delay_s=%.2f",
                    response.status_code,
                    attempt + 1,
                    delay,
                )
                sleep(delay)
                continue
            _raise_refused(response, code, message, "upload to S3")
        raise ServiceUnavailable("upload to S3 did not succeed within the retry budget")
    finally:
        bar.close()


def _raise_refused(response: httpx.Response, code: str, message: str, what: str) -> NoReturn:
    """S3 said no for good: 5xx is the service's trouble (retry later), 4xx the request's."""
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as e:
        cls = ServiceUnavailable if response.status_code >= 500 else TransferError
        raise cls(
            f"{what} refused: {code}: {message} (HTTP {response.status_code})",
            status=response.status_code,
            code=code,
        ) from e
    raise TransferError(
        f"{what} refused: {code}: {message} (HTTP {response.status_code})",
        status=response.status_code,
        code=code,
    )


def download(
    s3: httpx.Client,
    grant: dict,
    *,
    size: int | None,
    sha256: str | None,
    presign_again: Callable[[], dict],
    retry: RetryPolicy,
    job_id: str | None = None,
    key: str | None = None,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    desc: str = "download",
) -> bytearray:
    """GET the object into one bytearray, hashing as it streams; verify the sha256 when given."""
    bar = Progress(size or 0, desc, want_progress(progress, size or 0))
    try:
        for attempt in range(retry.max_attempts):
            last = attempt == retry.max_attempts - 1
            if attempt:
                bar.reset()
            try:
                with s3.stream(grant.get("method", "GET"), grant["url"]) as response:
                    if response.status_code == 200:
                        return _read_verified(response, size, sha256, bar, job_id=job_id, key=key)
                    response.read()
            except httpx.TransportError as e:
                if last:
                    raise ServiceUnavailable(f"download from S3 failed: {e!r}") from e
                delay = retry.backoff(attempt)
                log.warning(
                    "retrying download error=%s attempt=%d delay_s=%.2f",
                    type(e).__name__,
                    attempt + 1,
                    delay,
                )
                sleep(delay)
                continue
            code, message = s3_error(response)
            if response.status_code == 404:
                try:
                    response.raise_for_status()
                except httpx.HTTPStatusError as e:
                    raise PayloadLost(
                        f"payload object is gone from S3: key={key} ({code})",
                        job_id=job_id,
                        key=key,
                    ) from e
            if response.status_code == 403 and not last:
                log.info("re-presigning download key=%s reason=%s", key, code)
                grant = presign_again()
                continue
            if response.status_code in S3_RETRY_STATUSES and not last:
                delay = retry.backoff(attempt)
                log.warning(
                    "retrying download status=%d attempt=%d delay_s=%.2f",
                    response.status_code,
                    attempt + 1,
                    delay,
                )
                sleep(delay)
                continue
            _raise_refused(response, code, message, "download from S3")
        raise ServiceUnavailable("download from S3 did not succeed within the retry budget")
    finally:
        bar.close()


def _read_verified(
    response: httpx.Response,
    size: int | None,
    sha256: str | None,
    bar: Progress,
    *,
    job_id: str | None,
    key: str | None,
) -> bytearray:
    digest = hashlib.sha256()
    length = size if size is not None else int(response.headers.get("content-length") or 0)
    buffer = bytearray(length)
    view = memoryview(buffer)
    filled = 0
    for piece in response.iter_bytes():
        n = len(piece)
        digest.update(piece)
        bar.update(n)
        if filled + n > len(buffer):
            # More bytes than recorded: keep them so the hash reports what S3 really holds.
            view.release()
            buffer[filled:] = piece
            view = memoryview(buffer)
        else:
            view[filled : filled + n] = piece
        filled += n
    view.release()
    if filled < len(buffer):
        del buffer[filled:]
    actual = digest.hexdigest()
    if sha256 and actual != sha256.lower():
        raise PayloadCorrupt(
            f"payload sha256 mismatch: key={key} expected={sha256} actual={actual}",
            job_id=job_id,
            key=key,
            expected_sha256=sha256,
            actual_sha256=actual,
        )
    if size is not None and filled != size:
        raise PayloadCorrupt(
            f"payload size mismatch: key={key} expected={size} actual={filled}",
            job_id=job_id,
            key=key,
            expected_sha256=sha256,
            actual_sha256=actual,
        )
    return buffer
