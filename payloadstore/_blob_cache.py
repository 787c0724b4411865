"""The host's blob cache: each blob downloaded once per host, verified by sha256 on arrival.

`PAYLOADSTORE_BLOB_CACHE` names the directory (default: `$XDG_CACHE_HOME/payloadstore/blobs`, else
`~/.cache/payloadstore/blobs`), `PAYLOADSTORE_BLOB_CACHE_MAX_BYTES` its size bound (default
20 GiB; the least recently used blobs go first). Several daemon processes on one host share it:

- a blob is downloaded into `tmp/` and renamed into place (atomic: a reader never sees half a
  file), under an exclusive `flock` of `locks/<sha256>` so two processes wanting the same blob
  download it once (the second waits, then finds it);
- beside each file, `<sha256>.ok` records its size, mtime and inode as they were when its sha256
  was verified: a file changed since (a corruption, an edit) no longer matches and is
  downloaded again;
- a blob larger than `PARALLEL_ABOVE_BYTES` (64 MiB) is downloaded in ranges of `RANGE_BYTES`
  (16 MiB), several at once (the payloads' multipart download), then hashed whole: the sha256
  names the blob and is checked for every blob, whatever its size or how it was uploaded (the
  control plane cannot check a blob uploaded in parts; docs/design.md "Blobs"). A blob whose
  sha256 differs is refused (PayloadCorrupt: the Daemon reports the job `payload_corrupt`) and
  never enters the cache;
- a use sets the file's access time (not its mtime), which orders the eviction; a blob whose lock
  another process holds (it is downloading it) is not evicted;
- a blob in use is pinned: its user holds a shared `flock` of `locks/<sha256>.pin` (the Daemon,
  from before it fetches a job's blobs until the job's result is posted); eviction takes that
  lock exclusive without waiting and skips a blob it cannot take, so it never removes a file a
  running function reads (in this process or another). Pinned blobs may hold the cache above
  its bound for as long as they are in use;
- eviction also removes the lock and pin files of the blobs it evicts (and of blobs no longer
  cached), taken exclusive first: every lock is taken on the file its path names at that moment
  (a holder whose file was removed meanwhile takes the new one), so a removed lock file never
  lets two holders in; and the `tmp/` files of downloads whose process is gone (killed mid-way),
  which count against the bound as the blobs do.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx

from . import _cancel
from ._transfer import s3_error
from .errors import PayloadCorrupt, PayloadLost, ServiceUnavailable, TransferError

log = logging.getLogger("payloadstore.blobs")

ENV_BLOB_CACHE = "PAYLOADSTORE_BLOB_CACHE"
ENV_BLOB_CACHE_MAX_BYTES = "PAYLOADSTORE_BLOB_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 20 * 1024**3
READ_BYTES = 4 * 1024 * 1024
ATTEMPTS = 3
# Blobs above this are downloaded in ranges of RANGE_BYTES, several at once.
PARALLEL_ABOVE_BYTES = 64 * 1024 * 1024
RANGE_BYTES = 16 * 1024 * 1024
# A `tmp/` file this old is an abandoned download whatever its pid says (pids are reused, and a
# cache shared across containers sees other pid namespaces).
STALE_TMP_S = 24 * 3600


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "payloadstore" / "blobs"


class BlobCache:
    def __init__(self, root: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root)
        self.max_bytes = max_bytes
        for sub in ("tmp", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        #: per process: uses answered from the cache, and downloads made
        self.hits = 0
        self.downloads = 0
        self.bytes_downloaded = 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> BlobCache:
        env = os.environ if environ is None else environ
        root = env.get(ENV_BLOB_CACHE) or default_cache_dir()
        limit = env.get(ENV_BLOB_CACHE_MAX_BYTES)
        return cls(root, int(limit) if limit else DEFAULT_MAX_BYTES)

    def file(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def _mark(self, sha: str) -> Path:
        return self.root / sha[:2] / f"{sha}.ok"

    def cached(self, sha: str) -> bool:
        """The file is there and unchanged since its sha256 was verified."""
        try:
            st = self.file(sha).stat()
            recorded = self._mark(sha).read_text().split()
        except OSError:
            return False
        return recorded == [str(st.st_size), str(st.st_mtime_ns), str(st.st_ino)]

    def get(self, sha: str, url: str | None, *, size: int | None, http: httpx.Client) -> Path:
        """The verified file of a blob: from the cache, else downloaded (once per host)."""
        path = self.file(sha)
        if self._hit(sha):
            return path
        with self._locked(sha):
            if self._hit(sha):
                return path
            if not url:
                raise PayloadLost(
                    f"blob {sha} is not in the cache and no download URL was handed out for it "
                    "(only blobs a job or its result references are)",
                    key=sha,
                )
            self._download(sha, url, size, http)
        self.evict(keep=sha)
        return path

    def _hit(self, sha: str) -> bool:
        if not self.cached(sha):
            return False
        path = self.file(sha)
        try:
            st = path.stat()
            # The access time orders eviction; the mtime stays as verified.
            os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
        except OSError:
            return False
        with self._lock:
            self.hits += 1
        return True

    def _locked(self, sha: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return _flock(self.root / "locks" / f"{sha}.lock", blocking=blocking)

    @contextmanager
    def pinned(self, shas: Iterable[str]) -> Iterator[None]:
        """Hold these blobs in the cache (no eviction, by any process) until the block ends.
        Pin before `get`: a blob evicted before its pin is downloaded again by `get`."""
        fds: list[int] = []
        try:
            for sha in dict.fromkeys(shas):
                # Waits only while an eviction holds it (the unlink of one file).
                fd = _lock_fd(self._pin_file(sha), fcntl.LOCK_SH)
                assert fd is not None  # a blocking lock is always taken
                fds.append(fd)
            yield
        finally:
            for fd in fds:
                os.close(fd)

    def _pin_file(self, sha: str) -> Path:
        return self.root / "locks" / f"{sha}.pin"

    def _download(self, sha: str, url: str, size: int | None, http: httpx.Client) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self._download_once(sha, url, size, http)
                return
            except (httpx.TransportError, OSError) as e:
                if attempt == ATTEMPTS - 1:
                    raise ServiceUnavailable(f"blob download failed: {e!r}") from e
                _cancel.cancellable_sleep(time.sleep)(0.5 * (attempt + 1))

    def _download_once(self, sha: str, url: str, size: int | None, http: httpx.Client) -> None:
        tmp = self.root / "tmp" / f"{sha}.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            whole = None
            if size is None or size <= PARALLEL_ABOVE_BYTES:
                whole = self._get_whole(sha, url, http, tmp)
            if isinstance(whole, tuple):
                got, actual = whole
            else:
                # Large (its size known, or told by the GET's Content-Length): in ranges.
                got, actual = self._get_ranges(sha, url, size or int(whole or 0), http, tmp)
            if actual != sha or (size is not None and got != size):
                log.warning("blob refused sha256=%s actual=%s bytes=%d", sha[:16], actual, got)
                raise PayloadCorrupt(
                    f"blob {sha} downloaded with sha256 {actual} ({got} bytes)",
                    key=sha,
                    expected_sha256=sha,
                    actual_sha256=actual,
                )
            final = self.file(sha)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
            st = final.stat()
            mark_tmp = tmp.with_suffix(".ok")
            mark_tmp.write_text(f"{st.st_size} {st.st_mtime_ns} {st.st_ino}\n")
            os.replace(mark_tmp, self._mark(sha))
        finally:
            tmp.unlink(missing_ok=True)
        with self._lock:
            self.downloads += 1
            self.bytes_downloaded += got
        log.info("blob downloaded sha256=%s bytes=%d", sha[:16], got)

    def _get_whole(
        self, sha: str, url: str, http: httpx.Client, tmp: Path
    ) -> tuple[int, str] | int:
        """One streamed GET into `tmp`, hashed on the way: (bytes, sha256 hex); or, for a blob
        above PARALLEL_ABOVE_BYTES (by the answer's Content-Length), its size, unread."""
        h = hashlib.sha256()
        got = 0
        with http.stream("GET", url) as response:
            if response.status_code != 200:
                response.read()
                raise _refused(sha, response)
            length = int(response.headers.get("content-length") or 0)
            if length > PARALLEL_ABOVE_BYTES:
                return length
            with open(tmp, "wb") as f:
                for chunk in response.iter_bytes(READ_BYTES):
                    # A cancelled read (its awaiting task went away) takes no further chunk.
                    _cancel.checkpoint()
                    h.update(chunk)
                    f.write(chunk)
                    got += len(chunk)
        return got, h.hexdigest()

    def _get_ranges(
        self, sha: str, url: str, size: int, http: httpx.Client, tmp: Path
    ) -> tuple[int, str]:
        """Ranges of RANGE_BYTES, several at once, into `tmp`; then the whole file hashed."""
        from ._http import RetryPolicy
        from ._multipart_download import download_parts

        def refused_again() -> dict:
            # The URL expired: the caller asks the control plane for a new one.
            raise TransferError(f"blob {sha} GET refused (403)", status=403, code="AccessDenied")

        download_parts(
            http,
            {"url": url},
            size=size,
            multipart={"part_bytes": RANGE_BYTES},
            presign_again=refused_again,
            retry=RetryPolicy(max_attempts=ATTEMPTS),
            key=sha,
            progress=False,
            desc="blob",
            into=tmp,
        )
        h = hashlib.sha256()
        got = 0
        with open(tmp, "rb") as f:
            while chunk := f.read(READ_BYTES):
                _cancel.checkpoint()
                h.update(chunk)
                got += len(chunk)
        return got, h.hexdigest()

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used blobs until the cache is within its bound: bytes freed
        (the abandoned downloads' files first, then blobs)."""
        files = []
        total, freed_tmp = self._sweep_tmp()
        for mark in self.root.glob("??/*.ok"):
            data = mark.with_suffix("")
            try:
                st = data.stat()
            except OSError:
                continue
            files.append((st.st_atime_ns, st.st_size, data.name))
            total += st.st_size
        freed = 0
        for _, nbytes, sha in sorted(files):
            if total - freed <= self.max_bytes:
                break
            if sha == keep:
                continue
            unpinned = _flock(self._pin_file(sha), blocking=False)
            with unpinned as free, self._locked(sha, blocking=False) as held:
                if not (free and held):
                    log.info("blob in use, not evicted sha256=%s", sha[:16])
                    continue
                self._mark(sha).unlink(missing_ok=True)
                self.file(sha).unlink(missing_ok=True)
                self._drop_locks(sha)
            freed += nbytes
            log.info("blob evicted sha256=%s bytes=%d", sha[:16], nbytes)
        self._sweep_locks(keep)
        return freed + freed_tmp

    def _drop_locks(self, sha: str) -> None:
        """Remove a blob's lock and pin files (both held exclusive by the caller)."""
        self._pin_file(sha).unlink(missing_ok=True)
        (self.root / "locks" / f"{sha}.lock").unlink(missing_ok=True)

    def _sweep_locks(self, keep: str | None) -> None:
        """The lock and pin files of blobs not cached, that nobody holds: removed."""
        shas = {p.name.split(".", 1)[0] for p in (self.root / "locks").iterdir()}
        for sha in shas - {keep}:
            if self.file(sha).exists():
                continue
            unpinned = _flock(self._pin_file(sha), blocking=False)
            with unpinned as free, self._locked(sha, blocking=False) as held:
                if free and held and not self.file(sha).exists():
                    self._drop_locks(sha)

    def _sweep_tmp(self) -> tuple[int, int]:
        """(bytes of downloads in progress, bytes removed): a `tmp/` file of a process that is
        gone (killed mid-download: its own clean-up never ran), or older than a day, goes."""
        kept = removed = 0
        now = time.time()
        for path in (self.root / "tmp").iterdir():
            try:
                st = path.stat()
            except OSError:
                continue
            if now - st.st_mtime > STALE_TMP_S or (
                now - st.st_mtime > 60 and not _alive(_pid_of(path.name))
            ):
                path.unlink(missing_ok=True)
                removed += st.st_size
                log.info("abandoned download removed file=%s bytes=%d", path.name, st.st_size)
            else:
                kept += st.st_size
        return kept, removed


@contextmanager
def _flock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive `flock` of `path`: True once held; False at once when another holds it and
    `blocking` is off."""
    fd = _lock_fd(path, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)


def _lock_fd(path: Path, mode: int) -> int | None:
    """An fd of `path` locked with `mode` (flock), or None when LOCK_NB found it held. The lock
    is taken on the file the path names once locked: eviction removes lock files it holds, so
    a file locked after its removal is let go and the path's current file locked instead."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _pid_of(name: str) -> int | None:
    """The pid in a `tmp/` file's name (`<sha256>.<pid>.<hex>[.ok]`), or None."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None


def _alive(pid: int | None) -> bool:
    """Whether a process of that pid runs on this host (unknown: assumed alive)."""
    if pid is None or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _refused(sha: str, response: httpx.Response) -> Exception:
    code, message = s3_error(response)
    if response.status_code == 404:
        return PayloadLost(f"blob {sha} is gone from S3 ({code})", key=sha)
    return TransferError(
        f"blob download refused: {response.status_code} {code} {message}",
        status=response.status_code,
        code=code,
    )
