"""Multipart transfers: payloads above the control plane's MULTIPART_THRESHOLD move in parts.

Upload: part n+1 is hashed while the parts before it upload (several at once, on a small
thread pool: hashlib and the sockets release the GIL), and part URLs are asked for in batches
(4, 8, 16, ... up to 100 parts a call) as their sha256s are known, so no whole-payload hash
stands in front of the first byte. Each part's URL signs its length and sha256: S3 refuses
other bytes. A part that fails is retried alone; URLs that expired are re-presigned in one call
for every part still to upload (the control plane's presign cap counts calls, not parts).

A file (a blob's) is read by part instead (`read_part`): each part is read and hashed, dropped,
and read again by the worker that uploads it, with at most two parts per worker read ahead, so
the memory held is a few parts whatever the file's size.

Download: part-aligned ranges of the presigned GET, several at once, each hashed as it lands;
the composite sha256 (sha256 of the parts' binary sha256s, S3's COMPOSITE checksum) is checked
against the reference's: PayloadCorrupt on a mismatch. Into a buffer, each range is read straight
into its place (readinto); into a file, each worker reads its range into a part-sized buffer of
its own and writes it at its offset, so the memory held is (workers x part size), whatever the
size of the payload.
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
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx

from . import _checksum
from ._http import RetryPolicy
from ._transfer import (
    READ_SLICE_BYTES,
    S3_RETRY_STATUSES,
    SLICE_BYTES,
    Progress,
    ThreadConnections,
    _raise_refused,
    client_ssl_context,
    fresh_buffer,
    looks_expired,
    plain_client,
    s3_error,
    want_progress,
)
from .errors import PayloadCorrupt, PayloadLost, ServiceUnavailable, TransferError

log = logging.getLogger("payloadstore")

# Parts in flight at once (each a connection): PAYLOADSTORE_PART_WORKERS overrides.
DEFAULT_WORKERS = 8
URL_BATCH_MAX = 100
FIRST_URL_BATCH = 4


def workers() -> int:
    try:
        return max(1, int(os.environ.get("PAYLOADSTORE_PART_WORKERS", DEFAULT_WORKERS)))
    except ValueError:
        return DEFAULT_WORKERS


def part_ranges(size: int, part_bytes: int) -> list[tuple[int, int, int]]:
    """(part number, offset, length) of each part."""
    return [(i // part_bytes + 1, i, min(part_bytes, size - i)) for i in range(0, size, part_bytes)]


def composite_hex(digests: Iterable[bytes]) -> str:
    """S3's COMPOSITE SHA-256 of parts, hex: sha256 of their binary sha256s in part order."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


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


class _Bar:
    """Progress shared by the worker threads."""

    def __init__(self, size: int, desc: str, progress: bool | None):
        self._bar = Progress(size, desc, want_progress(progress, size))
        self._lock = threading.Lock()

    def update(self, n: int) -> None:
        if self._bar.enabled:
            with self._lock:
                self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


def _slices(data: memoryview | bytes) -> Iterable[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), SLICE_BYTES):
        yield view[start : start + SLICE_BYTES]


def _first_failure(futures: list[Future]) -> BaseException | None:
    for f in futures:
        if f.done() and f.exception() is not None:
            return f.exception()
    return None


# -- upload ----------------------------------------------------------------------------------


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


def _wait_for_room(futures: list[Future], most: int) -> None:
    pending = [f for f in futures if not f.done()]
    while len(pending) >= most:
        wait(pending, return_when=FIRST_COMPLETED)
        pending = [f for f in pending if not f.done()]


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
    bar = _Bar(size, desc, progress)
    digests: list[bytes] = []
    crcs: list[tuple[int, int]] = []
    futures: list[Future] = []
    batch: list[tuple[int, memoryview | bytes | _Later, dict]] = []
    batch_size = FIRST_URL_BATCH
    ranges = part_ranges(size, part_bytes)

    def spec_of(number: int, data: Any, length: int) -> dict:
        if crc:
            value = _checksum.of(data)
            crcs.append((value, length))
            return {"number": number, "size": length, "crc64nvme": _checksum.to_b64(value)}
        digests.append(hashlib.sha256(data).digest())
        return {"number": number, "size": length, "sha256": digests[-1].hex()}

    def submit(number: int, data: Any) -> None:
        futures.append(
            pool.submit(_put_part, s3, urls, number, data, retry=retry, sleep=sleep, bar=bar)
        )

    try:
        with ThreadPoolExecutor(workers(), thread_name_prefix="payload-part") as pool:
            try:
                for number, start, length in ranges:
                    data: memoryview | bytes | _Later
                    if read_part is not None:
                        _wait_for_room(futures, 2 * workers())
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
                    failed = _first_failure(futures)
                    if failed is not None:
                        raise failed
                    urls.issue([s for _, _, s in batch])
                    for n, d, _ in batch:
                        submit(n, d)
                    batch, batch_size = [], min(batch_size * 2, URL_BATCH_MAX)
                wait(futures, return_when=FIRST_EXCEPTION)
                failed = _first_failure(futures)
                if failed is not None:
                    raise failed
            except BaseException:
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
    bar: _Bar,
) -> None:
    """PUT one part with exactly its signed headers; retried alone (transport errors, 5xx), its
    URL renewed on an expiry."""
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
                content=_slices(data),  # type: ignore[arg-type]  # memoryviews
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


# -- download --------------------------------------------------------------------------------


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

    def _opened(self, conn: http.client.HTTPConnection) -> None:
        # Kept so that close() reaches the workers' connections too.
        with self._lock:
            self._connections.append(conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

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
            response = conn.getresponse()
        except (OSError, http.client.HTTPException):
            # A kept-alive connection the server closed meanwhile: one fresh try.
            self.discard()
            conn = self._connection(parts.scheme, parts.hostname or "", parts.port)
            conn.request("GET", path, headers={**headers, "Accept-Encoding": "identity"})
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
            n = response.readinto(target[filled : filled + READ_SLICE_BYTES])
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
    bar = _Bar(size, desc, progress)
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
        with ThreadPoolExecutor(
            min(workers(), len(ranges)) or 1, thread_name_prefix="payload-range"
        ) as pool:
            futures = [pool.submit(fetch, i, s, n) for i, (_, s, n) in enumerate(ranges)]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
                failed = _first_failure(futures)
                if failed is not None:
                    raise failed
            except BaseException:
                # A failed range, Ctrl-C or SIGTERM: no range starts after this, and those in
                # flight stop at their next slice, so leaving the pool waits ~ one slice.
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
