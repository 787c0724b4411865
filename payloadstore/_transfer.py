"""Moving payload bytes to and from S3 through presigned URLs (never through the control plane).

Uploads stream the encoded chunks (memoryviews into the caller's buffers) in slices, with an
explicit Content-Length, so a 64 MiB array is never joined into one more 64 MiB bytes object.

Downloads land in one preallocated bytearray. With the SDK's own (plain) httpx client, the body is
read with `readinto` straight from the socket into that buffer (stdlib http.client over a kept-alive
connection per thread: no chunk objects, no copy), and a helper thread hashes the filled part in
8 MiB slices while the next bytes arrive, so verifying costs no wall time on a multi-core machine.
A large buffer is not zero-filled first (every byte is written by the body, and a short body is cut
to what arrived) and, on Linux, asks for transparent huge pages: zero-filling 100 MiB touched
25,600 fresh pages before the first byte was read, which cost about as much as the read itself.
An injected client (a mock transport, a proxy, custom mounts) is used as given, through httpx's
stream, with the same buffer and verification.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import ssl
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx

from . import _cancel, _checksum
from ._http import RetryPolicy
from .errors import PayloadCorrupt, PayloadLost, ServiceUnavailable, TransferError

log = logging.getLogger("payloadstore")

SLICE_BYTES = 1 << 20  # what one write hands to the socket; bounds the per-write copy in h11
HASH_SLICE_BYTES = 8 << 20  # downloads: hashed in slices this large, off the receiving thread
READ_SLICE_BYTES = 1 << 20  # downloads: one readinto call (progress granularity)
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
S3_RETRY_STATUSES = frozenset({500, 502, 503, 504})
PROGRESS_MIN_BYTES = 1 << 20
FRESH_BUFFER_MIN_BYTES = 4 << 20  # downloads at least this large: buffer not zero-filled first
HUGE_PAGE_BYTES = 2 << 20
MADV_HUGEPAGE = 14  # Linux


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
    """The chunks in SLICE_BYTES views; a cancelled transfer stops before its next slice."""
    for chunk in chunks:
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        for start in range(0, len(view), SLICE_BYTES):
            _cancel.checkpoint()
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
    sleep = _cancel.cancellable_sleep(sleep)
    sending = _cancel.SentRequests(s3)
    try:
        for attempt in range(retry.max_attempts):
            last = attempt == retry.max_attempts - 1
            if attempt:
                bar.reset()
            headers = {str(k): str(v) for k, v in (grant.get("headers") or {}).items()}
            if not any(k.lower() == "content-length" for k in headers):
                headers["Content-Length"] = str(size)
            try:
                # A cancel cuts its connection: a send or a wait for S3's answer ends with it.
                with _cancel.on_cancel(sending.cut):
                    response = s3.request(
                        grant.get("method", "PUT"),
                        grant["url"],
                        content=iter_slices(chunks, bar),  # type: ignore[arg-type]  # memoryviews
                        headers=headers,
                        extensions=sending.extensions,
                    )
            except httpx.TransportError as e:
                _cancel.checkpoint()
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


def download(  # noqa: C901 - the download's retry loop: re-presign, resume, verify, each a branch of one loop
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
    crc64nvme: str | None = None,
) -> bytearray:
    """GET the object into one bytearray, checking it as it fills: its CRC64NVME when the
    reference carries one (computed on each slice as it lands, while it is still in cache),
    else its sha256 when given."""
    bar = Progress(size or 0, desc, want_progress(progress, size or 0))
    direct = direct_getter(s3)
    check = Check(crc64nvme, sha256)
    sleep = _cancel.cancellable_sleep(sleep)
    try:
        for attempt in range(retry.max_attempts):
            last = attempt == retry.max_attempts - 1
            if attempt:
                bar.reset()
            try:
                if direct is not None:
                    got = direct.get_into(grant, size, bar, check.algorithm)
                    if isinstance(got, Filled):
                        return _verified(got, size, check, job_id=job_id, key=key)
                    response = got
                else:
                    with s3.stream(grant.get("method", "GET"), grant["url"]) as response:
                        if response.status_code == 200:
                            filled = _read_stream(response, size, bar, check.algorithm)
                            return _verified(filled, size, check, job_id=job_id, key=key)
                        response.read()
            except (httpx.TransportError, OSError, http.client.HTTPException) as e:
                if direct is not None:
                    direct.discard()
                # (a cancel cuts the connection of a blocked read: that error is the cancel's)
                _cancel.checkpoint()
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


class Check:
    """What a download is checked against: the reference's CRC64NVME (base64), else its
    sha256 (hex), else nothing."""

    __slots__ = ("algorithm", "expected")

    def __init__(self, crc64nvme: str | None, sha256: str | None):
        if crc64nvme:
            self.algorithm: str | None = "crc64nvme"
            self.expected: str | None = crc64nvme
        elif sha256:
            self.algorithm, self.expected = "sha256", sha256.lower()
        else:
            self.algorithm, self.expected = None, None


class Filled:
    """A downloaded body: the buffer, how many bytes arrived, and their checksum (sha256 hex,
    or CRC64NVME base64, as the download was asked to compute; "" for none)."""

    __slots__ = ("buffer", "checksum", "filled")

    def __init__(self, buffer: bytearray, filled: int, checksum: str):
        self.buffer, self.filled, self.checksum = buffer, filled, checksum


class CrcHasher:
    """CRC64NVME of a buffer as it fills, computed on the receiving thread slice by slice
    (each slice just landed, still in the CPU's cache; several GB/s: no helper thread)."""

    def __init__(self, view: memoryview):
        self._view = view
        self._done = 0
        self._crc = _checksum.EMPTY

    def advance(self, filled: int) -> None:
        if filled > self._done:
            self._crc = _checksum.update(self._view[self._done : filled], self._crc)
            self._done = filled

    def finish(self, filled: int) -> str:
        self.advance(filled)
        return _checksum.to_b64(self._crc)

    def abandon(self) -> None:
        pass


class NoHasher:
    def advance(self, filled: int) -> None:
        pass

    def finish(self, filled: int) -> str:
        return ""

    def abandon(self) -> None:
        pass


class SliceHasher:
    """sha256 of a buffer as it fills, computed by a helper thread in large slices (hashlib
    releases the GIL on large updates, so hashing overlaps the socket reads)."""

    def __init__(self, view: memoryview, threaded: bool):
        self._view = view
        self._digest = hashlib.sha256()
        self._hashed = 0
        self._target = 0
        self._done = False
        self._cond = threading.Condition()
        self._thread = None
        if threaded:
            self._thread = threading.Thread(target=self._run, name="payload-sha256", daemon=True)
            self._thread.start()

    def advance(self, filled: int) -> None:
        """Bytes up to `filled` are final: hash them (now, or in the helper thread)."""
        if self._thread is None:
            if filled - self._hashed >= HASH_SLICE_BYTES:
                self._digest.update(self._view[self._hashed : filled])
                self._hashed = filled
            return
        if filled - self._target >= HASH_SLICE_BYTES:
            with self._cond:
                self._target = filled
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._target <= self._hashed and not self._done:
                    self._cond.wait()
                start, end, done = self._hashed, self._target, self._done
            if end > start:
                self._digest.update(self._view[start:end])
                with self._cond:
                    self._hashed = end
                    self._cond.notify_all()
            elif done:
                return

    def finish(self, filled: int) -> str:
        if self._thread is not None:
            with self._cond:
                self._done = True
                self._cond.notify_all()
            self._thread.join()
        if filled > self._hashed:
            self._digest.update(self._view[self._hashed : filled])
            self._hashed = filled
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """The download failed or was cancelled: the helper thread ends (no digest wanted)."""
        if self._thread is not None:
            with self._cond:
                self._done = True
                self._target = self._hashed
                self._cond.notify_all()
            self._thread.join()


_ALLOC: list = []  # [(PyByteArray_FromStringAndSize, madvise or None)] once looked up; [None] if not


def _allocator() -> tuple[Any, Any] | None:
    if not _ALLOC:
        found = None
        try:
            import ctypes

            make = ctypes.pythonapi.PyByteArray_FromStringAndSize
            make.restype = ctypes.py_object
            make.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
            advise = None
            if sys.platform == "linux":
                advise = ctypes.CDLL(None, use_errno=True).madvise
                advise.restype = ctypes.c_int
                advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            found = (make, advise)
        except (ImportError, AttributeError, OSError):  # not CPython, or no libc to ask
            found = None
        _ALLOC.append(found)
    return _ALLOC[0]


def fresh_buffer(length: int) -> bytearray:
    """A bytearray of `length` bytes for a body to fill. Small ones are plain `bytearray(n)`.
    A large one is allocated without zero-filling (PyByteArray_FromStringAndSize(NULL, n): its
    pages are first touched by the socket's copy, as the bytes arrive) and, on Linux, its pages
    are asked to be huge (2 MiB: 512 times fewer page faults). Its content is undefined until
    written: `_fill` writes every byte or the caller cuts the buffer to what arrived."""
    allocator = _allocator() if length >= FRESH_BUFFER_MIN_BYTES else None
    if allocator is None:
        return bytearray(length)
    make, advise = allocator
    buffer = make(None, length)
    # 100 MiB filled in 2 MiB pages: ~18 ms of CPU in page faults instead of ~65 ms. Opt out on a
    # host where the kernel's compaction for huge pages stalls (THP defrag=madvise, fragmented
    # memory): PAYLOADSTORE_HUGE_PAGES=0.
    if advise is not None and os.environ.get("PAYLOADSTORE_HUGE_PAGES", "1") != "0":
        import ctypes

        first = ctypes.c_char.from_buffer(buffer)
        address = ctypes.addressof(first)
        del first  # the buffer stays resizable (an exported buffer is not)
        start = -(-address // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
        end = (address + length) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
        if end > start:
            advise(start, end - start, MADV_HUGEPAGE)  # advice only: a refusal changes nothing
    return buffer


def _threaded_hashing() -> bool:
    return (os.cpu_count() or 1) > 1


def _fill(
    read_into: Callable[[memoryview], int],
    length: int,
    bar: Progress,
    buffer: bytearray | None = None,
    algorithm: str | None = "sha256",
) -> Filled:
    """Read exactly the body into a fresh buffer of `length` bytes (any excess appended, so the
    hash reports what the server really holds). The caller cuts the buffer to `filled` when the
    body was shorter (`_with_excess`): bytes past it were never written."""
    if buffer is None or len(buffer) != length:
        buffer = fresh_buffer(length)
    view = memoryview(buffer)
    hasher: SliceHasher | CrcHasher | NoHasher
    if algorithm == "crc64nvme":
        hasher = CrcHasher(view)
    elif algorithm == "sha256":
        hasher = SliceHasher(view, threaded=_threaded_hashing() and length >= 2 * HASH_SLICE_BYTES)
    else:
        hasher = NoHasher()
    filled = 0
    try:
        while filled < length:
            # A cancelled transfer (its awaiting task went away) reads no further slice.
            _cancel.checkpoint()
            n = read_into(view[filled : min(filled + READ_SLICE_BYTES, length)])
            if not n:
                break
            filled += n
            bar.update(n)
            hasher.advance(filled)
        # (a cancel cuts the connection of a blocked read, which then ends as a short body)
        _cancel.checkpoint()
        actual = hasher.finish(filled)
    except BaseException:
        hasher.abandon()
        raise
    finally:
        view.release()
    return Filled(buffer, filled, actual)


def _read_stream(
    response: httpx.Response, size: int | None, bar: Progress, algorithm: str | None = "sha256"
) -> Filled:
    """httpx's stream into the one buffer (clients we were given: mock transports, proxies)."""
    length = size if size is not None else int(response.headers.get("content-length") or 0)
    chunks = response.iter_bytes()
    pending = memoryview(b"")

    def read_into(target: memoryview) -> int:
        nonlocal pending
        while not len(pending):
            try:
                pending = memoryview(next(chunks))
            except StopIteration:
                return 0
        n = min(len(target), len(pending))
        target[:n] = pending[:n]
        pending = pending[n:]
        return n

    got = _fill(read_into, length, bar, algorithm=algorithm)
    return _with_excess(got, bytes(pending) + b"".join(chunks), algorithm)


def _with_excess(got: Filled, rest: bytes | bytearray, algorithm: str | None = "sha256") -> Filled:
    if not rest:
        if got.filled < len(got.buffer):
            del got.buffer[got.filled :]
        return got
    # More bytes than recorded: keep them so the checksum names what S3 really holds.
    head = memoryview(got.buffer)[: got.filled]
    if algorithm == "crc64nvme":
        checksum = _checksum.to_b64(_checksum.update(rest, _checksum.of(head)))
    else:
        digest = hashlib.sha256(head)
        digest.update(rest)
        checksum = digest.hexdigest()
    head.release()
    got.buffer[got.filled :] = rest
    return Filled(got.buffer, len(got.buffer), checksum)


def _verified(
    got: Filled, size: int | None, check: Check, *, job_id: str | None, key: str | None
) -> bytearray:
    crc = check.algorithm == "crc64nvme"
    facts: dict[str, Any] = (
        {"expected_crc64nvme": check.expected, "actual_crc64nvme": got.checksum}
        if crc
        else {"expected_sha256": check.expected, "actual_sha256": got.checksum or None}
    )
    if check.expected and got.checksum != check.expected:
        raise PayloadCorrupt(
            f"payload {check.algorithm} mismatch: key={key} expected={check.expected} "
            f"actual={got.checksum}",
            job_id=job_id,
            key=key,
            **facts,
        )
    if size is not None and got.filled != size:
        raise PayloadCorrupt(
            f"payload size mismatch: key={key} expected={size} actual={got.filled}",
            job_id=job_id,
            key=key,
            **facts,
        )
    return got.buffer


# -- direct GETs: http.client readinto on a kept-alive connection --------------------------------

_DIRECT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DIRECT_LOCK = threading.Lock()


def plain_client(client: httpx.Client) -> bool:
    """A plain httpx client (default transport, no mounts, no proxy) whose GETs may take the
    readinto path; PAYLOADSTORE_DIRECT_GET=0 turns that path off."""
    transport = getattr(client, "_transport", None)
    return (
        os.environ.get("PAYLOADSTORE_DIRECT_GET", "1") != "0"
        and type(transport) is httpx.HTTPTransport
        and not getattr(client, "_mounts", None)
        and not (getattr(client, "trust_env", True) and any(os.environ.get(v) for v in PROXY_ENV))
    )


def client_ssl_context(client: httpx.Client) -> ssl.SSLContext | None:
    """The client's own TLS settings (verify=, cert=), as its transport would use them."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    return getattr(pool, "_ssl_context", None)


def direct_getter(client: httpx.Client) -> DirectGetter | None:
    """The readinto path for a plain httpx client (default transport, no mounts, no proxy);
    None for anything else, which then goes through httpx as given."""
    if os.environ.get("PAYLOADSTORE_DIRECT_GET", "1") == "0":
        return None
    with _DIRECT_LOCK:
        if client in _DIRECT:
            return _DIRECT[client]
        getter = None
        if plain_client(client):
            timeout = client.timeout.read if client.timeout.read is not None else 300.0
            connect = client.timeout.connect if client.timeout.connect is not None else 10.0
            getter = DirectGetter(client_ssl_context(client), timeout, connect)
        _DIRECT[client] = getter
        return getter


class ThreadConnections:
    """One kept-alive http.client connection per thread, to one (scheme, host, port) at a
    time: a connection is not thread-safe, and a worker reuses its own across requests."""

    def __init__(self, ssl_context: ssl.SSLContext | None, connect_s: float):
        self._ssl = ssl_context
        self._connect = connect_s
        self._local = threading.local()

    def _connection(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        wanted = (scheme, host, port)
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "target", None) == wanted:
            return conn
        self.discard()
        if scheme == "https":
            context = self._ssl or ssl.create_default_context()
            conn = http.client.HTTPSConnection(host, port, timeout=self._connect, context=context)
        elif scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=self._connect)
        else:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        self._local.conn, self._local.target = conn, wanted
        self._opened(conn)
        return conn

    def _opened(self, conn: http.client.HTTPConnection) -> None:
        """A subclass's hook for each connection made."""

    def discard(self) -> None:
        """Close this thread's connection (after an error or a server's close)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()


class DirectGetter(ThreadConnections):
    """GETs a URL with http.client and reads the body into the caller's buffer (readinto: the
    socket writes into it, no chunk objects). One kept-alive connection per thread and host."""

    def __init__(self, ssl_context: ssl.SSLContext | None, timeout_s: float, connect_s: float):
        super().__init__(ssl_context, connect_s)
        self._timeout = timeout_s

    def get_into(
        self, grant: dict, size: int | None, bar: Progress, algorithm: str | None = "sha256"
    ) -> Filled | httpx.Response:
        """The body in a fresh buffer (status 200), or the error answer as an httpx.Response."""
        reading: list[http.client.HTTPConnection | None] = [None]
        # A cancel cuts the connection: a read blocked on a silent server ends with it.
        with _cancel.on_cancel(lambda: _cancel.cut_connection(reading[0])):
            got, response = self._get(urlsplit(grant["url"]), reading, grant, size, bar, algorithm)
            if got is None:
                return response
            rest = response.read()  # whatever the server sent beyond the recorded size
            _cancel.checkpoint()
        if response.will_close:
            self.discard()
        return _with_excess(got, rest, algorithm)

    def _get(
        self,
        parts: Any,
        reading: list[http.client.HTTPConnection | None],
        grant: dict,
        size: int | None,
        bar: Progress,
        algorithm: str | None,
    ) -> tuple[Filled | None, Any]:
        """(the body's first `size` bytes, the response) on 200; else (None, the answer)."""
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        conn = reading[0] = self._connection(parts.scheme, parts.hostname or "", parts.port)
        headers = {"Accept-Encoding": "identity"}
        method = grant.get("method", "GET")
        buffer = None
        try:
            conn.request(method, target, headers=headers)
            # (cancelled while it connected: its socket was not there to cut)
            _cancel.checkpoint()
            # The fresh buffer (zero-filled: page faults, ~1 GB/s) is made while S3 prepares
            # its answer, not after the first bytes came back.
            buffer = fresh_buffer(size) if size else None
            if conn.sock is not None:
                conn.sock.settimeout(self._timeout)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException):
            # A kept-alive connection the server closed meanwhile: one fresh try, then raise.
            self.discard()
            _cancel.checkpoint()
            conn = reading[0] = self._connection(parts.scheme, parts.hostname or "", parts.port)
            conn.request(method, target, headers=headers)
            _cancel.checkpoint()
            if conn.sock is not None:
                conn.sock.settimeout(self._timeout)
            response = conn.getresponse()
        if response.status != 200:
            body = response.read()
            return None, httpx.Response(
                response.status,
                headers=response.getheaders(),
                content=body,
                request=httpx.Request(grant.get("method", "GET"), grant["url"]),
            )
        declared = response.getheader("content-length")
        length = size if size is not None else int(declared or 0)
        try:
            return _fill(response.readinto, length, bar, buffer, algorithm), response
        except BaseException:
            # A cancel or an interrupt mid-body: the rest of it is still on this connection.
            self.discard()
            raise
