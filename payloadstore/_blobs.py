"""Blobs: content uploaded once per namespace, referenced by any number of jobs and results.

`client.blob(source)` hashes the source (streaming), asks the control plane whether the namespace
has that content (`POST .../blobs`), uploads it only when it does not (one streamed PUT with the
size and sha256 signed in; above the control plane's MULTIPART_THRESHOLD, in parts, each part
hashed while the ones before it upload and its sha256 signed into its URL, with the payloads'
multipart code), and returns a `Blob`. The whole sha256 is computed first, streaming: it names
the blob. The codec writes a `Blob` as a 40-byte
reference (sha256 + size); the sender lists the blobs of each value in its enqueue or result
post. `payloadstore.blob(path)` makes a `Blob` of a local file without uploading it yet: the
client or the daemon that sends it uploads it first (a function may return one as its result).

Reading a received `Blob` (`.path`, `.open()`, `.read()`) goes through the host's blob cache
(`payloadstore._blob_cache`): downloaded once per host, verified by sha256 on arrival.
"""

from __future__ import annotations

import contextvars
import hashlib
import io
import logging
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

import httpx

from . import _cancel
from ._async_bridge import LoopThreadCall
from ._http import RetryPolicy
from ._transfer import s3_error
from .errors import (
    BlobSourceGone,
    ConfigError,
    ConflictError,
    PayloadStoreError,
    ServiceUnavailable,
    TransferError,
)

log = logging.getLogger("payloadstore.blobs")

# Reads of a source (hashing, uploading): bounded memory whatever the size.
CHUNK_BYTES = 8 * 1024 * 1024
# A blob is at most what one S3 PUT takes.
MAX_BLOB_BYTES = 5 * 1024**3
# A blob the control plane confirmed is trusted without asking again until the record's end it
# answered (`expires_at`), and at most this long: a long-lived process asks again now and then
# rather than keep a sha256 the namespace may have let go.
KNOWN_MAX_S = 3600.0

# The store a decoded `Blob` reads through, and the value's blob list (the sha256s its job or
# result carries, in order: the codec's references point into it): set around a decode by the
# daemon and by `Job.result`.
_current_store: contextvars.ContextVar[BlobStore | None] = contextvars.ContextVar(
    "payloadstore_blob_store", default=None
)
_current_list: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "payloadstore_blob_list", default=()
)


def current_blob_list() -> tuple[str, ...]:
    return _current_list.get()


def blob_list(downloads: Any) -> tuple[str, ...]:
    """The sha256s of a poll or result answer's `blobs`, in order."""
    return tuple(d["sha256"] for d in downloads or () if isinstance(d, dict) and d.get("sha256"))


class Blob:
    """A reference to content stored once per namespace: `sha256` (hex) and `size` (bytes).

    Put one anywhere in a job's arguments or a function's return value; it travels as a small
    reference. Received in a daemon's function (or a job's result): `path` is a verified file in
    the host's blob cache, `open()` a binary file of it, `read()` its bytes."""

    __slots__ = ("__weakref__", "_local", "_store", "sha256", "size")

    def __init__(
        self,
        sha256: str,
        size: int,
        *,
        local: Path | bytes | None = None,
        store: BlobStore | None = None,
    ):
        self.sha256 = sha256
        self.size = size
        self._local = local
        self._store = store if store is not None else _current_store.get()

    def __repr__(self) -> str:
        return f"Blob(sha256={self.sha256[:16]}..., size={self.size})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other.sha256 == self.sha256

    def __hash__(self) -> int:
        return hash(self.sha256)

    def __reduce__(self):
        return (Blob, (self.sha256, self.size))

    @property
    def path(self) -> Path:
        """A local file holding the blob's bytes (verified): the source file of a blob made here,
        else the host's cached copy (downloaded once, on first use)."""
        if isinstance(self._local, Path):
            return self._local
        if self._store is None:
            raise PayloadStoreError(
                f"blob {self.sha256} has no local copy and no client to download it with: read "
                "it inside a daemon's function or from a job's result"
            )
        return self._store.path(self)

    def open(self) -> IO[bytes]:
        if isinstance(self._local, bytes):
            return io.BytesIO(self._local)
        return open(self.path, "rb")

    def read(self) -> bytes:
        if isinstance(self._local, bytes):
            return self._local
        return self.path.read_bytes()


def blob(source: Any) -> Blob:
    """A `Blob` of a local file (`str` or `os.PathLike`), bytes, or a binary file object, not
    uploaded yet: the client or daemon that sends it (in a job's arguments, or as a function's
    result) uploads it first, once per namespace. Hashing streams the source."""
    sha, size, local = digest(source)
    return _owning(Blob(sha, size, local=local))


def digest(source: Any) -> tuple[str, int, Path | bytes]:
    """(sha256 hex, size, what to upload from) of a source, reading it in CHUNK_BYTES pieces. A
    file object that cannot seek is spooled to a temporary file on the way."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return hashlib.sha256(data).hexdigest(), len(data), data
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        with open(path, "rb") as f:
            sha, size = _hash_stream(f, None)
        return sha, size, path
    if hasattr(source, "read"):
        if getattr(source, "seekable", lambda: False)() and getattr(source, "name", None):
            name = source.name
            if isinstance(name, (str, os.PathLike)) and Path(name).is_file():
                start = source.tell()
                if start == 0:
                    return digest(Path(name))
        spool = tempfile.NamedTemporaryFile(prefix=SPOOL_PREFIX, delete=False)  # noqa: SIM115 - kept: the upload reads it
        try:
            with spool:
                sha, size = _hash_stream(source, spool)
        except BaseException:
            # A stream that fails (or an interrupt) leaves no spool file behind.
            Path(spool.name).unlink(missing_ok=True)
            raise
        return sha, size, Path(spool.name)
    raise TypeError(
        f"a blob's source is bytes, a path or a binary file object, not {type(source).__name__}"
    )


SPOOL_PREFIX = "payloadstore-blob-"


def _is_spool(local: Any) -> bool:
    return isinstance(local, Path) and local.name.startswith(SPOOL_PREFIX)


def _drop_spool(local: Any) -> None:
    if _is_spool(local):
        local.unlink(missing_ok=True)


def _owning(b: Blob) -> Blob:
    """A blob read from a stream was spooled to a temporary file: it goes with the Blob."""
    if _is_spool(b._local):
        weakref.finalize(b, _drop_spool, b._local)
    return b


def _hash_stream(f: Any, copy_to: Any) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    while chunk := f.read(CHUNK_BYTES):
        _cancel.checkpoint()
        h.update(chunk)
        size += len(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
    return h.hexdigest(), size


def _chunks(local: Path | bytes) -> Iterator[bytes]:
    if isinstance(local, bytes):
        view = memoryview(local)
        for start in range(0, len(view), CHUNK_BYTES):
            _cancel.checkpoint()
            yield bytes(view[start : start + CHUNK_BYTES])
        return
    with open(local, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            _cancel.checkpoint()
            yield chunk


def _epoch(iso: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except (TypeError, ValueError):
        return None


class BlobStore:
    """One client's (or daemon's) blobs: uploads (once per namespace and process: the shas the
    control plane confirmed are remembered until the record's end it answered, at most
    KNOWN_MAX_S), the presigned GETs it was handed, and the cache. A `409 unknown_blob` (the
    record expired under a long-lived process) makes it forget those blobs, check or upload
    them again from their sources, and send the call once more (`resend_on_unknown`)."""

    def __init__(
        self,
        wire: Any,
        s3_http: httpx.Client,
        *,
        retry: RetryPolicy,
        cache: Any = None,
        sleep: Any = time.sleep,
        config: Any = None,
    ):
        self.wire = wire
        self.s3_http = s3_http
        self.retry = retry
        # () -> the server's config (or None: not known yet): CRC64NVME uploads in parts where
        # the server takes them (`checksum_algorithms`), else SHA256 as before.
        self._config = config
        self._cache = cache
        self._sleep = sleep
        # sha256 -> wall-clock time until which the namespace is known to have it
        self._known: dict[str, float] = {}
        self._clock = time.time
        self._urls: dict[str, str] = {}
        # sha256 -> how to ask for fresh GETs (a result read long after its answer: the URLs
        # live PRESIGN_TTL_S)
        self._renew: dict[str, Any] = {}
        self._lock = threading.Lock()
        #: bytes this store sent to S3 (uploads), and control-plane calls it made for blobs
        self.bytes_uploaded = 0
        self.uploads = 0

    @property
    def cache(self):
        if self._cache is None:
            from ._blob_cache import BlobCache

            self._cache = BlobCache.from_env()
        return self._cache

    # -- sending ------------------------------------------------------------------------------

    def put(self, source: Any) -> Blob:
        """Hash, ask, upload if the namespace lacks it: a `Blob` the namespace has."""
        sha, size, local = digest(source)
        try:
            self.ensure(sha, size, local)
        except BaseException:
            _drop_spool(local)
            raise
        return _owning(Blob(sha, size, local=local, store=self))

    def send(self, blobs: Any) -> tuple[str, ...]:
        """The sha256 of each blob a value references, uploading the local ones the namespace
        does not have yet (in order, each once)."""
        shas: dict[str, None] = {}
        for b in blobs or ():
            if b._local is not None:
                self.ensure(b.sha256, b.size, b._local)
            shas[b.sha256] = None
        return tuple(shas)

    def known(self, sha: str) -> bool:
        until = self._known.get(sha)
        return until is not None and self._clock() < until

    def forget(self, shas: Any) -> None:
        """Stop trusting that the namespace has these blobs: the next send asks again."""
        with self._lock:
            for sha in shas:
                self._known.pop(sha, None)

    def restore(self, blobs: Any, missing: Any = ()) -> None:
        """After a `409 unknown_blob`: forget the blobs it names (all of `blobs` when it names
        none of them) and check or upload each again from its source: the bytes or file it was
        made from (checked to still hash to its sha256), else the host's cached copy.
        BlobSourceGone when none is left."""
        by_sha = {b.sha256: b for b in blobs or ()}
        names = [s for s in missing or () if s in by_sha] or list(by_sha)
        self.forget(names)
        for sha in names:
            b = by_sha[sha]
            log.info("blob unknown to the namespace, sending it again sha256=%s", sha[:16])
            self.ensure(sha, b.size, self._source_of(b))

    def _source_of(self, b: Blob) -> Path | bytes:
        local = b._local
        if isinstance(local, bytes):
            return local
        if isinstance(local, Path):
            try:
                with open(local, "rb") as f:
                    sha, size = _hash_stream(f, None)
            except OSError as e:
                raise BlobSourceGone(
                    f"blob {b.sha256} expired from the namespace and its file {local} is gone "
                    f"({e.strerror}): make it again with client.blob(...)",
                    status=409,
                    code="unknown_blob",
                ) from e
            if (sha, size) != (b.sha256, b.size):
                raise BlobSourceGone(
                    f"blob {b.sha256} expired from the namespace and its file {local} has "
                    "changed since: make it again with client.blob(...)",
                    status=409,
                    code="unknown_blob",
                )
            return local
        if self._cache is not None or b._store is self:
            try:
                if self.cache.cached(b.sha256):
                    return self.cache.file(b.sha256)
            except OSError:
                pass
        raise BlobSourceGone(
            f"blob {b.sha256} expired from the namespace and this process has no copy of it "
            "(received, not made here, and not in the host's blob cache): make it again with "
            "client.blob(...) from its content",
            status=409,
            code="unknown_blob",
        )

    def resend_on_unknown(self, blobs: Any, call: Any) -> Any:
        """`call()`; on `409 unknown_blob` the blobs are restored (`restore`) and `call()` is
        sent once more (nothing was written by the refused call)."""
        try:
            return call()
        except ConflictError as e:
            if e.code != "unknown_blob" or not blobs or isinstance(e, BlobSourceGone):
                raise
            self.restore(blobs, e.details.get("blobs") or ())
        return call()

    def ensure(self, sha: str, size: int, local: Path | bytes) -> None:
        if self.known(sha):
            return
        if size < 1 or size > MAX_BLOB_BYTES:
            raise ConfigError(f"a blob is 1 byte to 5 GiB; this one is {size} bytes")
        algorithm = "CRC64NVME" if self._crc64nvme() else None
        answer = self._ask(sha, size, algorithm)
        for _ in range(self.retry.max_attempts):
            if answer.get("exists"):
                break
            crc = None
            if answer.get("multipart"):
                crc = self._upload_parts(answer["multipart"], local, size, sha)
            else:
                self._upload(answer["upload"], local, size, sha)
            # (after parts: the control plane completes the upload and verifies it; a
            # CRC64NVME upload with the whole blob's CRC, which S3 checks)
            answer = self.wire.blob(sha, size, crc64nvme=crc) if crc else self.wire.blob(sha, size)
        if not answer.get("exists"):
            raise ServiceUnavailable(f"blob {sha} was uploaded but not verified; retry")
        now = self._clock()
        until = min(_epoch(answer.get("expires_at")) or now, now + KNOWN_MAX_S)
        with self._lock:
            self._known[sha] = until

    def _crc64nvme(self) -> bool:
        config = self._config() if self._config is not None else None
        return bool(config is not None and getattr(config, "crc64nvme", False))

    def _ask(self, sha: str, size: int, algorithm: str | None = None) -> dict:
        """The first POST .../blobs. Another uploader's multipart upload of the same content may
        be open and missing parts (in progress, or its uploader crashed): the 409 parts_mismatch
        names the upload, and this one uploads every part itself (same content, same parts)."""
        try:
            if algorithm:
                return self.wire.blob(sha, size, checksum_algorithm=algorithm)
            return self.wire.blob(sha, size)
        except ConflictError as e:
            multipart = e.details.get("multipart")
            if e.details.get("reason") != "parts_mismatch" or not isinstance(multipart, dict):
                raise
            log.info("blob upload open elsewhere, uploading its parts sha256=%s", sha[:16])
            return {"exists": False, "multipart": multipart}

    def _upload_parts(
        self, multipart: dict, local: Path | bytes, size: int, sha: str
    ) -> str | None:
        """Every part of the blob's multipart upload, several at once (the payloads' code); a
        file is read by part, so memory stays a few parts whatever its size. A CRC64NVME upload
        (FULL_OBJECT: its first part URLs came with the answer) answers the whole blob's CRC."""
        from ._multipart_upload import FileParts, upload_parts

        def ask(parts: list[dict]) -> dict:
            return self.wire.blob_parts(sha, parts)

        crc = multipart.get("checksum_type") == "FULL_OBJECT"
        common: dict[str, Any] = {
            "ask_parts": ask,
            "retry": self.retry,
            "progress": False,
            "sleep": self._sleep,
            "desc": "blob",
            "algorithm": "CRC64NVME" if crc else "SHA256",
        }
        if isinstance(local, bytes):
            checksum = upload_parts(self.s3_http, multipart, [local], size, **common)
        else:
            parts = FileParts(local)
            try:
                checksum = upload_parts(
                    self.s3_http, multipart, (), size, read_part=parts.read, **common
                )
            finally:
                parts.close()
        with self._lock:
            self.bytes_uploaded += size
            self.uploads += 1
        log.info(
            "blob uploaded in parts sha256=%s bytes=%d parts=%s",
            sha[:16],
            size,
            multipart.get("part_count"),
        )
        return checksum if crc else None

    def _upload(self, grant: dict, local: Path | bytes, size: int, sha: str) -> None:
        """One streamed PUT with exactly the signed headers; a failed attempt is sent again
        from the start (a 403, an expired URL, goes back to ask for a new one)."""
        sleep = _cancel.cancellable_sleep(self._sleep)
        for attempt in range(self.retry.max_attempts):
            last = attempt == self.retry.max_attempts - 1
            try:
                response = self.s3_http.request(
                    grant.get("method", "PUT"),
                    grant["url"],
                    content=_chunks(local),
                    headers=grant["headers"],
                )
            except (httpx.TransportError, OSError) as e:
                if last:
                    raise ServiceUnavailable(f"blob upload failed: {e!r}") from e
                sleep(self.retry.backoff(attempt))
                continue
            if response.status_code == 200:
                with self._lock:
                    self.bytes_uploaded += size
                    self.uploads += 1
                log.info("blob uploaded sha256=%s bytes=%d", sha[:16], size)
                return
            code, message = s3_error(response)
            if response.status_code == 403:
                return  # the caller asks again: a fresh URL, or `exists` if another uploaded it
            if response.status_code < 500 or last:
                raise TransferError(
                    f"blob upload refused: {response.status_code} {code} {message}",
                    status=response.status_code,
                    code=code,
                )
            sleep(self.retry.backoff(attempt))

    # -- receiving ----------------------------------------------------------------------------

    def grant(self, downloads: Any) -> None:
        """Remember the presigned GETs a poll or a result answer handed out (`blobs`)."""
        for d in downloads or ():
            if isinstance(d, dict) and d.get("sha256") and d.get("url"):
                with self._lock:
                    self._urls[d["sha256"]] = d["url"]

    def fetch(self, sha: str, size: int | None = None) -> Path:
        """The cached, verified file of a blob this store holds a GET for; a GET that S3
        refuses (403: expired) is asked for again once, where the answer can be re-read."""
        try:
            return self.cache.get(sha, self._urls.get(sha), size=size, http=self.s3_http)
        except TransferError as e:
            renew = self._renew.get(sha)
            if e.status != 403 or renew is None:
                raise
            log.info("blob GET refused, asking for new URLs sha256=%s", sha[:16])
            try:
                fresh = renew()
            except LoopThreadCall as refused:
                # An AsyncClient's result read in a coroutine: the new URLs come from the
                # control plane through the event loop this thread is running.
                raise LoopThreadCall(
                    f"blob {sha}: its download URL was refused (expired), and asking for a new "
                    "one cannot wait on the event loop's own thread (it would deadlock): read a "
                    "result's blob from a worker thread, e.g. "
                    "`path = await asyncio.to_thread(lambda: blob.path)`"
                ) from refused
            self.grant(fresh)
            return self.cache.get(sha, self._urls.get(sha), size=size, http=self.s3_http)

    def renewable(self, downloads: Any, renew: Any) -> None:
        """Remember how to get fresh GETs of these blobs (`renew()` answers a new `blobs`)."""
        for sha in blob_list(downloads):
            with self._lock:
                self._renew[sha] = renew

    def pinned(self, downloads: Any) -> AbstractContextManager[None]:
        """The blobs of a poll answer's `blobs` held in the host's cache (no process evicts
        them) until the block ends; nothing to hold without blobs."""
        shas = blob_list(downloads)
        return self.cache.pinned(shas) if shas else nullcontext()

    def path(self, b: Blob) -> Path:
        return self.fetch(b.sha256, b.size)

    def reading(self, downloads: Any = ()) -> tuple[contextvars.Token, contextvars.Token]:
        """Remember an answer's `blobs` GETs and make this store, and their list, what a decode
        resolves blob references with (undo with `done_reading`)."""
        self.grant(downloads)
        return _current_store.set(self), _current_list.set(blob_list(downloads))

    @staticmethod
    def done_reading(tokens: tuple[contextvars.Token, contextvars.Token]) -> None:
        _current_store.reset(tokens[0])
        _current_list.reset(tokens[1])
