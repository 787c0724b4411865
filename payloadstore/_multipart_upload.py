"""Multipart uploads: part n+1 is hashed while the parts before it upload (several at once, on
a small thread pool: hashlib and the sockets release the GIL), and part URLs are asked for in
batches (4, 8, 16, ... up to 100 parts a call) as their sha256s are known, so no whole-payload
hash stands in front of the first byte. Each part's URL signs its length and sha256: S3 refuses
other bytes. A part that fails is retried alone; URLs that expired are re-presigned in one call
for every part still to upload (the control plane's presign cap counts calls, not parts).

A file (a blob's) is read by part instead (`read_part`): each part is read and hashed, dropped,
and read again by the worker that uploads it, with at most two parts per worker read ahead, so
the memory held is a few parts whatever the file's size.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx

from . import _cancel, _checksum
from ._http import RetryPolicy
from ._multipart import PartsProgress, composite_hex, first_failure, part_ranges, slices, workers
from ._transfer import (
    S3_RETRY_STATUSES,
    _raise_refused,
    looks_expired,
    s3_error,
)
from .errors import ServiceUnavailable

log = logging.getLogger("payloadstore")

URL_BATCH_MAX = 100
FIRST_URL_BATCH = 4


class _Source:
    """The encoded chunks as one byte sequence: a part is a view into a chunk, or (across a
    chunk boundary) the pieces joined."""

    def __init__(self, chunks: Iterable[Any]):
        self._views: list[memoryview] = []
        self._starts: list[int] = []
        offset = 0
        for chunk in chunks:
            view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
            if view.ndim != 1 or view.itemsize != 1:
                view = view.cast("B")
            if len(view):
                self._views.append(view)
                self._starts.append(offset)
                offset += len(view)

    def part(self, start: int, length: int) -> memoryview | bytes:
        pieces = []
        end = start + length
        for view, first in zip(self._views, self._starts, strict=True):
            last = first + len(view)
            if last <= start or first >= end:
                continue
            pieces.append(view[max(start, first) - first : min(end, last) - first])
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)


class _PartUrls:
    """The URL of each part; expired ones are replaced together, in one call per 100 parts."""

    def __init__(self, ask: Callable[[list[dict]], dict]):
        self._ask = ask
        self._lock = threading.Lock()
        self._urls: dict[int, dict] = {}
        self._specs: dict[int, dict] = {}
        self._generation: dict[int, int] = {}
        self._done: set[int] = set()

    def seed(self, parts: list[dict], expires_at: Any) -> None:
        """URLs that came with the presign answer (a CRC64NVME upload's first parts)."""
        with self._lock:
            for part in parts:
                number = int(part["number"])
                self._urls[number] = dict(part, expires_at=expires_at)
                self._generation[number] = self._generation.get(number, 0) + 1

    def has(self, number: int) -> bool:
        with self._lock:
            return number in self._urls

    def known(self, specs: list[dict]) -> None:
        """Specs of parts whose URL came with the presign (asked for again if it expires)."""
        with self._lock:
            for spec in specs:
                self._specs[spec["number"]] = spec

    def issue(self, specs: list[dict]) -> None:
        answer = self._ask(specs)
        with self._lock:
            for spec in specs:
                self._specs[spec["number"]] = spec
            for part in answer.get("parts") or []:
                number = int(part["number"])
                self._urls[number] = dict(part, expires_at=answer.get("expires_at"))
                self._generation[number] = self._generation.get(number, 0) + 1

    def get(self, number: int) -> tuple[dict, int]:
        with self._lock:
            return self._urls[number], self._generation[number]

    def finished(self, number: int) -> None:
        with self._lock:
            self._done.add(number)

    def renew(self, number: int, generation: int) -> None:
        """Re-presign every issued part not uploaded yet, unless another worker just did."""
        with self._lock:
            if self._generation.get(number, 0) != generation:
                return
            pending = [s for n, s in sorted(self._specs.items()) if n not in self._done]
            log.info("re-presigning parts count=%d", len(pending))
            for i in range(0, len(pending), URL_BATCH_MAX):
                answer = self._ask(pending[i : i + URL_BATCH_MAX])
                for part in answer.get("parts") or []:
                    n = int(part["number"])
                    self._urls[n] = dict(part, expires_at=answer.get("expires_at"))
                    self._generation[n] = self._generation.get(n, 0) + 1


class FileParts:
    """The parts of a file, read when asked for (os.pread: the workers share the descriptor)."""

    def __init__(self, path: str | os.PathLike):
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, start: int, length: int) -> bytes:
        pieces, got = [], 0
        while got < length:
            piece = os.pread(self._fd, length - got, start + got)
            if not piece:
                raise ServiceUnavailable(
                    f"the file is shorter than its hashed size ({start + got})"
                )
            pieces.append(piece)
            got += len(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def close(self) -> None:
        os.close(self._fd)


class _Later:
    """A part of a file, read by the worker that uploads it."""

    def __init__(self, read: Callable[[int, int], bytes], start: int, length: int):
        self.read, self.start, self.length = read, start, length

    def __len__(self) -> int:
        return self.length

    def __call__(self) -> bytes:
        return self.read(self.start, self.length)


# How often the thread handing out parts looks for a cancel while it waits for the workers.
POLL_S = 0.05


def _wait_for_room(futures: list[Future], most: int, stop: threading.Event) -> None:
    pending = [f for f in futures if not f.done()]
    while len(pending) >= most:
        wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
        _halt(stop)
        pending = [f for f in pending if not f.done()]


def _wait_all(futures: list[Future], stop: threading.Event) -> None:
    """Until every part is up or one failed; a cancel ends the wait at once."""
    while True:
        _, pending = wait(futures, timeout=POLL_S, return_when=FIRST_EXCEPTION)
        failed = first_failure(futures)
        if failed is not None:
            raise failed
        if not pending:
            return
        _halt(stop)


def _halt(stop: threading.Event) -> None:
    """TransferCancelled once the upload was stopped (its caller cancelled it)."""
    if stop.is_set():
        raise _cancel.TransferCancelled()


def upload_parts(  # noqa: C901 - one loop: read, checksum, ask URLs in batches, submit
    s3: httpx.Client,
    multipart: dict,
    chunks: Iterable[Any],
    size: int,
    *,
    ask_parts: Callable[[list[dict]], dict],
    retry: RetryPolicy,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    desc: str = "upload",
    read_part: Callable[[int, int], bytes] | None = None,
    algorithm: str = "SHA256",
) -> str:
    """Upload every part of a multipart upload (presign answer's `multipart`) from `chunks`, or
    read by `read_part(start, length)` (a file: `FileParts.read`). SHA256 (COMPOSITE): each
    part's URL is asked for with its sha256; the composite sha256 (hex) is returned. CRC64NVME
    (FULL_OBJECT): the first parts' URLs came with the presign (`multipart.parts`), the rest are
    asked for with each part's CRC; the whole object's CRC (base64, the parts' CRCs combined) is
    returned, for the reference S3 checks at completion."""
    part_bytes = int(multipart["part_bytes"])
    crc = algorithm == "CRC64NVME"
    source = _Source(() if read_part is not None else chunks)
    urls = _PartUrls(ask_parts)
    if multipart.get("parts"):
        urls.seed(list(multipart["parts"]), multipart.get("parts_expire_at"))
    bar = PartsProgress(size, desc, progress)
    digests: list[bytes] = []
    crcs: list[tuple[int, int]] = []
    futures: list[Future] = []
    batch: list[tuple[int, memoryview | bytes | _Later, dict]] = []
    batch_size = FIRST_URL_BATCH
    ranges = part_ranges(size, part_bytes)
    # Set when the caller cancels (or a part fails): no part starts after it, and those in
    # flight stop at their next slice.
    stop = threading.Event()

    def pause(seconds: float) -> None:
        # A part's backoff ends at once when the upload is stopped.
        if sleep is time.sleep:
            stop.wait(seconds)
            _halt(stop)
        else:
            sleep(seconds)

    def spec_of(number: int, data: Any, length: int) -> dict:
        if crc:
            value = _checksum.of(data)
            crcs.append((value, length))
            return {"number": number, "size": length, "crc64nvme": _checksum.to_b64(value)}
        digests.append(hashlib.sha256(data).digest())
        return {"number": number, "size": length, "sha256": digests[-1].hex()}

    def submit(number: int, data: Any) -> None:
        futures.append(
            pool.submit(
                _put_part, s3, urls, number, data, retry=retry, sleep=pause, bar=bar, stop=stop
            )
        )

    try:
        with (
            _cancel.linked(stop),
            ThreadPoolExecutor(workers(), thread_name_prefix="payload-part") as pool,
        ):
            try:
                for number, start, length in ranges:
                    _halt(stop)
                    data: memoryview | bytes | _Later
                    if read_part is not None:
                        _wait_for_room(futures, 2 * workers(), stop)
                        spec = spec_of(number, read_part(start, length), length)
                        data = _Later(read_part, start, length)
                    else:
                        data = source.part(start, length)
                        spec = spec_of(number, data, length)
                    if urls.has(number):
                        # Its URL came with the presign: upload it now.
                        urls.known([spec])
                        submit(number, data)
                        continue
                    batch.append((number, data, spec))
                    if len(batch) < batch_size and number < len(ranges):
                        continue
                    failed = first_failure(futures)
                    if failed is not None:
                        raise failed
                    urls.issue([s for _, _, s in batch])
                    for n, d, _ in batch:
                        submit(n, d)
                    batch, batch_size = [], min(batch_size * 2, URL_BATCH_MAX)
                _wait_all(futures, stop)
            except BaseException:
                # A failed part, a cancel or Ctrl-C: no part starts after this, and those in
                # flight stop at their next slice, so leaving the pool waits ~ one slice.
                stop.set()
                for f in futures:
                    f.cancel()
                raise
    finally:
        bar.close()
    if crc:
        return _checksum.to_b64(_checksum.combine_all(crcs))
    return composite_hex(digests)


def _put_part(
    s3: httpx.Client,
    urls: _PartUrls,
    number: int,
    part: memoryview | bytes | _Later,
    *,
    retry: RetryPolicy,
    sleep: Callable[[float], None],
    bar: PartsProgress,
    stop: threading.Event | None = None,
) -> None:
    """PUT one part with exactly its signed headers; retried alone (transport errors, 5xx), its
    URL renewed on an expiry. `stop` set: the part ends before its next slice."""
    halt = (lambda: _halt(stop)) if stop is not None else None
    if halt is not None:
        halt()
    data = part() if isinstance(part, _Later) else part
    renewed_once = False
    for attempt in range(retry.max_attempts):
        last = attempt == retry.max_attempts - 1
        grant, generation = urls.get(number)
        headers = {str(k): str(v) for k, v in (grant.get("headers") or {}).items()}
        try:
            response = s3.request(
                "PUT",
                grant["url"],
                content=slices(data, halt),  # type: ignore[arg-type]  # memoryviews
                headers=headers,
            )
        except httpx.TransportError as e:
            if last:
                raise ServiceUnavailable(f"upload of part {number} failed: {e!r}") from e
            delay = retry.backoff(attempt)
            log.warning(
                "retrying part part=%d error=%s attempt=%d delay_s=%.2f",
                number,
                type(e).__name__,
                attempt + 1,
                delay,
            )
            sleep(delay)
            continue
        if response.status_code in (200, 201, 204):
            urls.finished(number)
            bar.update(len(data))
            return
        code, message = s3_error(response)
        if (
            response.status_code == 403
            and not last
            and (looks_expired(response, grant.get("expires_at")) or not renewed_once)
        ):
            renewed_once = True
            urls.renew(number, generation)
            continue
        if response.status_code in S3_RETRY_STATUSES and not last:
            delay = retry.backoff(attempt)
            log.warning(
                "retrying part part=%d status=%d attempt=%d delay_s=%.2f",
                number,
                response.status_code,
                attempt + 1,
                delay,
            )
            sleep(delay)
            continue
        _raise_refused(response, code, message, f"upload of part {number} to S3")
    raise ServiceUnavailable(f"upload of part {number} did not succeed within the retry budget")
