"""Multipart downloads: part-aligned ranges of the presigned GET, several at once, each hashed as
it lands; the composite sha256 (sha256 of the parts' binary sha256s, S3's COMPOSITE checksum),
or the parts' CRC64NVMEs combined, is checked against the reference's: PayloadCorrupt on a
mismatch. Into a buffer, each range is read straight into its place (readinto); into a file, each
worker reads its range into a part-sized buffer of its own and writes it at its offset, so the
memory held is (workers x part size), whatever the size of the payload.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx

from . import _cancel, _checksum
from ._http import RetryPolicy
from ._multipart import (
    PART_SLICE_BYTES,
    PartsProgress,
    composite_hex,
    first_failure,
    part_ranges,
    workers,
)
from ._transfer import (
    S3_RETRY_STATUSES,
    ThreadConnections,
    _raise_refused,
    client_ssl_context,
    fresh_buffer,
    plain_client,
    s3_error,
)
from .errors import PayloadCorrupt, PayloadLost, ServiceUnavailable, TransferError

log = logging.getLogger("payloadstore")


class _Grant:
    """The presigned GET the workers share; renewed once for all when S3 refuses it."""

    def __init__(self, grant: dict, presign_again: Callable[[], dict]):
        self._grant = grant
        self._again = presign_again
        self._generation = 0
        self._lock = threading.Lock()

    def get(self) -> tuple[dict, int]:
        with self._lock:
            return self._grant, self._generation

    def renew(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._grant = self._again()
                self._generation += 1


class _Ranges(ThreadConnections):
    """Ranged GETs read into the caller's memory: http.client readinto on a kept-alive
    connection per thread (a plain httpx client), else httpx's stream (an injected client)."""

    def __init__(self, s3: httpx.Client):
        timeout = s3.timeout.read if s3.timeout.read is not None else 300.0
        super().__init__(client_ssl_context(s3), timeout)
        self._s3 = s3
        self._direct = plain_client(s3)
        self._connections: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._cut = False

    def _opened(self, conn: http.client.HTTPConnection) -> None:
        # Kept so that close() reaches the workers' connections too.
        with self._lock:
            self._connections.append(conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    def interrupt(self) -> None:
        """Cut every worker's connection (a cancel): reads blocked on a silent server end now,
        and no request goes out after this."""
        with self._lock:
            self._cut = True
            for conn in self._connections:
                _cancel.cut_connection(conn)

    def read(
        self,
        url: str,
        start: int,
        target: memoryview,
        landed: Callable[[memoryview], None] | None = None,
    ) -> httpx.Response | None:
        """Fill `target` with bytes start..start+len-1; None when done, else S3's refusal.
        `landed(view)` is called with each slice as it arrives (checked while still in cache)."""
        headers = {"Range": f"bytes={start}-{start + len(target) - 1}"}
        if not self._direct:
            return self._read_httpx(url, headers, target, landed)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._connection(parts.scheme, parts.hostname or "", parts.port)
        try:
            conn.request("GET", path, headers={**headers, "Accept-Encoding": "identity"})
            self._check_cut()
            response = conn.getresponse()
        except (OSError, http.client.HTTPException):
            # A kept-alive connection the server closed meanwhile: one fresh try.
            self.discard()
            self._check_cut()
            conn = self._connection(parts.scheme, parts.hostname or "", parts.port)
            conn.request("GET", path, headers={**headers, "Accept-Encoding": "identity"})
            self._check_cut()
            response = conn.getresponse()
        if response.status not in (200, 206):
            body = response.read()
            return httpx.Response(
                response.status,
                headers=response.getheaders(),
                content=body,
                request=httpx.Request("GET", url),
            )
        filled = 0
        while filled < len(target):
            n = response.readinto(target[filled : filled + PART_SLICE_BYTES])
            if not n:
                break
            if landed is not None:
                landed(target[filled : filled + n])
            filled += n
        if filled != len(target) or response.read(1):
            self.discard()
            raise http.client.IncompleteRead(b"", len(target) - filled)
        if response.will_close:
            self.discard()
        return None

    def _check_cut(self) -> None:
        """Interrupted while this worker connected (its socket was not there to cut)."""
        if self._cut:
            self.discard()
            raise ConnectionAbortedError("the download was interrupted")

    def _read_httpx(
        self,
        url: str,
        headers: dict,
        target: memoryview,
        landed: Callable[[memoryview], None] | None = None,
    ) -> httpx.Response | None:
        with self._s3.stream("GET", url, headers=headers) as response:
            if response.status_code not in (200, 206):
                response.read()
                return response
            filled = 0
            for chunk in response.iter_bytes():
                n = min(len(chunk), len(target) - filled)
                target[filled : filled + n] = chunk[:n]
                if landed is not None and n:
                    landed(target[filled : filled + n])
                filled += n
            if filled != len(target):
                raise http.client.IncompleteRead(b"", len(target) - filled)
        return None


class _Writer:
    """Where each verified range goes: a place in the caller's buffer (read straight into it),
    or an offset of a file (through a part-sized buffer per worker)."""

    def __init__(self, into: Any, size: int, part_bytes: int):
        self.buffer: bytearray | None = None
        self._view: memoryview | None = None
        self._fd: int | None = None
        self._file: BinaryIO | None = None
        self._own_file = False
        self._path: str | None = None
        self._temp: str | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._part_bytes = part_bytes
        if into is None:
            self.buffer = fresh_buffer(size)
            self._view = memoryview(self.buffer)
        elif isinstance(into, (bytearray, memoryview)):
            view = memoryview(into).cast("B")
            if view.readonly or len(view) < size:
                raise ValueError(f"into must be a writable buffer of at least {size} bytes")
            self._view = view
        else:
            if isinstance(into, (str, os.PathLike)):
                # Into a temporary file beside it, renamed over it once verified: a failed or
                # interrupted download leaves the old file whole and no partial one.
                self._path = replaceable(os.fspath(into))
                if self._path is None:
                    self._file, self._own_file = open(into, "wb"), True  # noqa: SIM115
                else:
                    fd, self._temp = temp_beside(self._path)
                    self._file, self._own_file = os.fdopen(fd, "wb"), True
            else:
                self._file = into
            try:
                self._fd = self._file.fileno()
                self._base = self._file.tell()
            except (AttributeError, OSError, ValueError):
                self._fd = None
                self._base = self._file.tell() if hasattr(self._file, "tell") else 0

    def target(self, start: int, length: int) -> memoryview:
        if self._view is not None:
            return self._view[start : start + length]
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = bytearray(self._part_bytes)
        return memoryview(scratch)[:length]

    def commit(self, start: int, view: memoryview) -> None:
        if self._view is not None:
            return
        if self._fd is not None:
            written = 0
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], self._base + start + written)
            return
        assert self._file is not None
        with self._lock:
            self._file.seek(self._base + start)
            self._file.write(view)

    def close(self, size: int, ok: bool) -> None:
        if self._file is not None:
            if ok and self._fd is not None:
                self._file.seek(self._base + size)
            if self._own_file:
                self._file.close()
            if self._temp is not None and self._path is not None:
                if ok:
                    os.replace(self._temp, self._path)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(self._temp)
        if self._view is not None and self.buffer is not None:
            self._view.release()


def replaceable(path: str) -> str | None:
    """The file a write into `path` goes beside and is renamed over: `path`, or for a symlink
    the file it names (the link stays, as `open(path, "wb")` would keep it); None for what is
    no regular file (a FIFO, /dev/stdout, a device: written in place, never replaced; a
    directory: refused by that open, before anything is fetched)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    return real if stat.S_ISREG(st.st_mode) else None


def temp_beside(path: str) -> tuple[int, str]:
    """(fd, name) of a new file beside `path`, to be renamed over it once whole: with the mode
    the file has, else the one `open(path, "wb")` would give it (0666 less the umask)."""
    fd, temp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.",
        suffix=".part",
        dir=os.path.dirname(os.path.abspath(path)),
    )
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    os.fchmod(fd, mode)
    return fd, temp


def _umask() -> int:
    """The process's umask, read without changing it (Linux); else the usual 022."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def download_parts(
    s3: httpx.Client,
    grant: dict,
    *,
    size: int,
    multipart: dict,
    presign_again: Callable[[], dict],
    retry: RetryPolicy,
    job_id: str | None = None,
    key: str | None = None,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    desc: str = "download",
    into: Any = None,
    crc64nvme: str | None = None,
) -> bytearray | None:
    """GET the object in part-aligned ranges, several at once, and check it: the CRC64NVME of
    each range as it lands, combined into the whole object's and compared with `crc64nvme`
    (the reference's), or, for a SHA256 upload, its composite sha256. Into a fresh buffer
    (returned) or `into`: a writable buffer, a path, or a binary file."""
    part_bytes = int(multipart["part_bytes"])
    expected = str(multipart.get("composite_sha256") or "").lower() or None
    ranges = part_ranges(size, part_bytes)
    shared = _Grant(grant, presign_again)
    reader = _Ranges(s3)
    writer = _Writer(into, size, part_bytes)
    bar = PartsProgress(size, desc, progress)
    digests: list[bytes] = [b""] * len(ranges)
    crcs: list[tuple[int, int]] = [(0, 0)] * len(ranges)
    ok = False
    stop = threading.Event()
    with _active_lock:
        _active_stops.add(stop)

    def pause(seconds: float) -> None:
        # A range's backoff ends at once when the download is interrupted.
        if sleep is time.sleep:
            stop.wait(seconds)
        else:
            sleep(seconds)

    def fetch(index: int, start: int, length: int) -> None:
        if stop.is_set():
            raise _Stopped()
        target = writer.target(start, length)
        crc = _read_range(
            reader,
            shared,
            start,
            target,
            retry=retry,
            sleep=pause,
            key=key,
            job_id=job_id,
            checksum=bool(crc64nvme),
            stop=stop,
        )
        if crc64nvme:
            crcs[index] = (crc, length)
        elif expected:
            digests[index] = hashlib.sha256(target).digest()
        writer.commit(start, target)
        bar.update(length)

    try:
        # A cancel of this transfer (its awaiting task went away) sets `stop` too.
        with (
            _cancel.linked(stop),
            _cancel.on_cancel(reader.interrupt),
            ThreadPoolExecutor(
                min(workers(), len(ranges)) or 1, thread_name_prefix="payload-range"
            ) as pool,
        ):
            futures = [pool.submit(fetch, i, s, n) for i, (_, s, n) in enumerate(ranges)]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
                failed = first_failure(futures)
                if failed is not None:
                    # (the ranges stopped because the caller cancelled: say so, not _Stopped)
                    _cancel.checkpoint()
                    raise failed
            except BaseException:
                # A failed range, a cancel, Ctrl-C or SIGTERM: no range starts after this, and
                # those in flight stop at their next slice, so leaving the pool waits ~ one slice.
                stop.set()
                for f in futures:
                    f.cancel()
                raise
        _verify(crcs, digests, crc64nvme=crc64nvme, expected=expected, key=key, job_id=job_id)
        ok = True
    finally:
        with _active_lock:
            _active_stops.discard(stop)
        reader.close()
        bar.close()
        writer.close(size, ok)
    return writer.buffer


# The stop events of the downloads in progress, so that one call stops them all.
_active_stops: set[threading.Event] = set()
_active_lock = threading.Lock()


def interrupt_transfers() -> None:
    """Stop every multipart download of this process at its next slice (none starts a range
    after it): a daemon's second signal, for the downloads on its worker threads, where no
    KeyboardInterrupt lands (the main thread gets it)."""
    with _active_lock:
        for stop in _active_stops:
            stop.set()


def _verify(
    crcs: list[tuple[int, int]],
    digests: list[bytes],
    *,
    crc64nvme: str | None,
    expected: str | None,
    key: str | None,
    job_id: str | None,
) -> None:
    """PayloadCorrupt unless the ranges make the whole object's CRC64NVME (or, for a SHA256
    upload, its composite sha256)."""
    if crc64nvme:
        whole = _checksum.to_b64(_checksum.combine_all(crcs))
        if whole != crc64nvme:
            raise PayloadCorrupt(
                f"payload crc64nvme mismatch: key={key} expected={crc64nvme} actual={whole}",
                job_id=job_id,
                key=key,
                expected_crc64nvme=crc64nvme,
                actual_crc64nvme=whole,
            )
        return
    actual = composite_hex(digests) if expected else None
    if expected and actual != expected:
        raise PayloadCorrupt(
            f"payload composite sha256 mismatch: key={key} expected={expected} actual={actual}",
            job_id=job_id,
            key=key,
            expected_sha256=expected,
            actual_sha256=actual,
        )


class _Stopped(Exception):
    """The download was interrupted (or another range failed): this range stops here."""


def _halting(stop: threading.Event | None) -> Callable[[], None]:
    """A check that raises `_Stopped` once `stop` is set."""

    def halt() -> None:
        if stop is not None and stop.is_set():
            raise _Stopped()

    return halt


def _read_range(
    reader: _Ranges,
    shared: _Grant,
    start: int,
    target: memoryview,
    *,
    retry: RetryPolicy,
    sleep: Callable[[float], None],
    key: str | None,
    job_id: str | None,
    checksum: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """One range, retried alone; a refused URL renewed once for all workers. `checksum`: its
    CRC64NVME, taken slice by slice as the bytes land, is answered (else 0). `stop` set: the
    read ends at its next slice (`_Stopped`)."""
    halt = _halting(stop)
    for attempt in range(retry.max_attempts):
        last = attempt == retry.max_attempts - 1
        halt()
        grant, generation = shared.get()
        crc = [_checksum.EMPTY]

        def landed(view: memoryview, crc: list[int] = crc) -> None:
            halt()
            crc[0] = _checksum.update(view, crc[0]) if checksum else crc[0]

        try:
            refused = reader.read(grant["url"], start, target, landed)
        except (httpx.TransportError, OSError, http.client.HTTPException) as e:
            reader.discard()
            if last:
                raise ServiceUnavailable(f"download from S3 failed: {e!r}") from e
            delay = retry.backoff(attempt)
            log.warning(
                "retrying range offset=%d error=%s attempt=%d delay_s=%.2f",
                start,
                type(e).__name__,
                attempt + 1,
                delay,
            )
            sleep(delay)
            continue
        if refused is None:
            return crc[0]
        code, message = s3_error(refused)
        if refused.status_code == 404:
            raise PayloadLost(
                f"payload object is gone from S3: key={key} ({code})", job_id=job_id, key=key
            )
        if refused.status_code == 403 and not last:
            log.info("re-presigning download key=%s reason=%s", key, code)
            shared.renew(generation)
            continue
        if refused.status_code in S3_RETRY_STATUSES and not last:
            delay = retry.backoff(attempt)
            sleep(delay)
            continue
        if refused.status_code == 416:
            raise PayloadCorrupt(
                f"payload is shorter than its reference: key={key} ({code})",
                job_id=job_id,
                key=key,
            )
        _raise_refused(refused, code, message, "download from S3")
    raise TransferError(f"download of key={key} did not succeed within the retry budget")
