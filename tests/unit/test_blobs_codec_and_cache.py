"""Blob references in the codec, and the host's blob cache (issue 25)."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time

import httpx
import pytest

import payloadstore as ps
from payloadstore import codec
from payloadstore._blob_cache import BlobCache
from payloadstore._blobs import BlobStore, blob_list, digest
from payloadstore._http import RetryPolicy
from payloadstore.errors import PayloadCorrupt, PayloadLost


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_blob_in_a_value_is_an_18_byte_reference_into_its_blob_list():
    a, b = ps.blob(b"a" * 1000), ps.blob(b"b" * 5000)
    encoded = codec.encode({"args": [a, b, a], "kwargs": {}})
    # Each reference is a fixext 16; the blobs are listed once each, in the order met
    assert len(codec.encode(a).tobytes()) == 18
    assert [x.sha256 for x in encoded.blobs] == [a.sha256, b.sha256]
    store = BlobStore(None, httpx.Client(), retry=RetryPolicy())
    tokens = store.reading([{"sha256": a.sha256, "url": "u1"}, {"sha256": b.sha256, "url": "u2"}])
    try:
        value = codec.decode(encoded.tobytes())
    finally:
        store.done_reading(tokens)
    assert value["args"] == [a, b, a]
    assert [x.size for x in value["args"]] == [1000, 5000, 1000]


def test_a_blob_reference_does_not_decode_without_its_blob_list():
    encoded = codec.encode([ps.blob(b"x")])
    with pytest.raises(codec.CodecError, match="blob list"):
        codec.decode(encoded.tobytes())


def test_a_blob_reference_must_match_its_list_entry():
    encoded = codec.encode([ps.blob(b"x")])
    store = BlobStore(None, httpx.Client(), retry=RetryPolicy())
    tokens = store.reading([{"sha256": sha(b"y"), "url": "u"}])
    try:
        with pytest.raises(codec.CodecError):
            codec.decode(encoded.tobytes())
    finally:
        store.done_reading(tokens)
    assert blob_list([{"sha256": "s1"}, {"url": "x"}]) == ("s1",)


def test_digest_streams_paths_and_file_objects(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 5)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert digest(path)[:2] == digest(str(path))[:2] == (sha(data), len(data))
    with open(path, "rb") as f:
        assert digest(f)[:2] == (sha(data), len(data))
    pipe_like = type("R", (), {"read": lambda self, n=-1, _b=[data]: _b.pop() if _b else b""})()
    # A stream that cannot seek is spooled to a temporary file, which goes with its Blob
    b = ps.blob(pipe_like)
    spool = b.path
    assert (b.sha256, b.size, spool.read_bytes()) == (sha(data), len(data), data)
    del b
    import gc

    gc.collect()
    assert not spool.exists()


def test_a_stream_that_fails_while_spooled_leaves_no_file_behind(tmp_path, monkeypatch):
    # Given a stream that cannot seek and fails after 3 MiB, twice
    import tempfile

    from payloadstore._blobs import SPOOL_PREFIX

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    class Failing:
        def __init__(self):
            self.sent = 0

        def read(self, n=-1):
            if self.sent >= 3 * 1024 * 1024:
                raise OSError("connection reset by peer")
            self.sent += 1024 * 1024
            return b"x" * (1024 * 1024)

    client = ps.Client("http://cp.invalid", "t", "ns")
    for _ in range(2):
        # When client.blob reads it
        with pytest.raises(OSError, match="reset"):
            client.blob(Failing())
    # Then no spool file is left (issue 46: 2 files, 6 MiB, per failed attempt)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(SPOOL_PREFIX)] == []


def serve(blobs: dict[str, bytes], counter: list[int]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        counter.append(1)
        data = blobs.get(request.url.path.strip("/"))
        return httpx.Response(200, content=data) if data is not None else httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_the_cache_downloads_once_verifies_and_serves_hits(tmp_path):
    data = os.urandom(10_000)
    gets: list[int] = []
    http = serve({"k": data}, gets)
    cache = BlobCache(tmp_path)
    path = cache.get(sha(data), "http://s3/k", size=len(data), http=http)
    again = cache.get(sha(data), "http://s3/k", size=len(data), http=http)
    assert path == again and path.read_bytes() == data
    assert (cache.downloads, cache.hits, len(gets)) == (1, 1, 1)


def test_eviction_removes_lock_files_and_abandoned_downloads_and_counts_them(tmp_path):
    import subprocess
    import sys

    # Given a cache bounded at 15,000 bytes holding one 10,000-byte blob (pinned once, so its
    # lock and pin files exist), and a 20,000-byte download left in tmp/ by a process killed
    # mid-way a while ago
    old, new = os.urandom(10_000), os.urandom(10_000)
    gets: list[int] = []
    http = serve({"old": old, "new": new}, gets)
    cache = BlobCache(tmp_path, max_bytes=15_000)
    with cache.pinned([sha(old)]):
        cache.get(sha(old), "http://s3/old", size=len(old), http=http)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    abandoned = tmp_path / "tmp" / f"{sha(new)}.{int(dead.stdout)}.abcd1234"
    abandoned.write_bytes(b"x" * 20_000)
    os.utime(abandoned, (time.time() - 120, time.time() - 120))
    # When another blob is downloaded (which evicts down to the bound)
    cache.get(sha(new), "http://s3/new", size=len(new), http=http)
    # Then the abandoned download is gone and counted, the older blob was evicted with its lock
    # and pin files, and only the newest blob's own files remain
    assert not abandoned.exists()
    assert not cache.cached(sha(old)) and cache.cached(sha(new))
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == [f"{sha(new)}.lock"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_lock_file_removed_while_waited_on_is_taken_afresh(tmp_path):
    # Given a blob's lock held, and its file then removed by eviction while another waits
    cache = BlobCache(tmp_path)
    lock = tmp_path / "locks" / "ab.lock"
    taken: list[int] = []
    with cache._locked("ab"):
        import threading

        waiter = threading.Thread(
            target=lambda: cache._locked("ab").__enter__() and taken.append(lock.stat().st_ino)
        )
        waiter.start()
        time.sleep(0.1)
        first = lock.stat().st_ino
        lock.unlink()
    waiter.join(5)
    # Then the waiter holds the file the path names now (made afresh), not the removed one
    assert taken == [lock.stat().st_ino]
    assert first is not None


def test_bytes_that_do_not_hash_to_the_sha256_are_refused_and_not_cached(tmp_path):
    cache = BlobCache(tmp_path)
    with pytest.raises(PayloadCorrupt):
        cache.get(sha(b"right"), "http://s3/k", size=None, http=serve({"k": b"wrong"}, []))
    assert not cache.cached(sha(b"right"))
    assert not list((tmp_path / "tmp").iterdir())


def test_a_missing_object_is_payload_lost(tmp_path):
    with pytest.raises(PayloadLost):
        BlobCache(tmp_path).get(sha(b"x"), "http://s3/none", size=1, http=serve({}, []))


def test_the_least_recently_used_blobs_go_past_the_bound(tmp_path):
    blobs = {f"k{i}": os.urandom(4000) for i in range(3)}
    http = serve(blobs, [])
    cache = BlobCache(tmp_path, max_bytes=9000)
    for i in range(2):
        cache.get(sha(blobs[f"k{i}"]), f"http://s3/k{i}", size=4000, http=http)
        time.sleep(0.01)
    cache.get(sha(blobs["k0"]), "http://s3/k0", size=4000, http=http)  # k0 used last
    time.sleep(0.01)
    cache.get(sha(blobs["k2"]), "http://s3/k2", size=4000, http=http)
    assert cache.cached(sha(blobs["k0"])) and cache.cached(sha(blobs["k2"]))
    assert not cache.cached(sha(blobs["k1"]))


def _fetch_in_process(root, data, url_port_queue):
    import http.server

    cache = BlobCache(root)
    with httpx.Client() as http:
        cache.get(sha(data), url_port_queue, size=len(data), http=http)
    return cache.downloads


def test_several_processes_share_one_download(tmp_path):
    # Given a slow server counting its GETs, and four processes wanting one blob at once
    import http.server
    import threading

    data = os.urandom(200_000)
    served = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            served.append(1)
            time.sleep(0.3)
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/blob"
    try:
        with multiprocessing.get_context("fork").Pool(4) as pool:
            downloads = pool.starmap(_fetch_in_process, [(tmp_path, data, url)] * 4)
    finally:
        server.shutdown()
    # Then the blob was downloaded once, by one of them, and is whole
    assert sorted(downloads) == [0, 0, 0, 1] and len(served) == 1
    assert BlobCache(tmp_path).file(sha(data)).read_bytes() == data


def test_an_expired_get_is_asked_for_again_where_the_answer_can_be_re_read(tmp_path):
    # Given a result's blob whose handed-out GET has expired (S3 answers 403)
    data = os.urandom(1000)
    gets: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        gets.append(request.url.path)
        if request.url.path == "/old":
            return httpx.Response(403, content=b"<Error><Code>AccessDenied</Code></Error>")
        return httpx.Response(200, content=data)

    store = BlobStore(
        None,
        httpx.Client(transport=httpx.MockTransport(handler)),
        retry=RetryPolicy(),
        cache=BlobCache(tmp_path),
    )
    old = [{"sha256": sha(data), "url": "http://s3/old"}]
    store.renewable(old, lambda: [{"sha256": sha(data), "url": "http://s3/new"}])
    store.grant(old)
    # When it is read, then the store asks for fresh URLs once and downloads
    assert store.fetch(sha(data), len(data)).read_bytes() == data
    assert gets == ["/old", "/new"]


def _pin_in_process(root, shas, pinned, release):
    cache = BlobCache(root)
    with cache.pinned(shas):
        pinned.set()
        release.wait(30)


def test_a_blob_pinned_by_another_process_is_not_evicted_until_it_is_released(tmp_path):
    # Given two cached blobs and another process (a daemon running a job) pinning the older one
    blobs = {f"k{i}": os.urandom(4000) for i in range(2)}
    http = serve(blobs, [])
    cache = BlobCache(tmp_path)
    for i in range(2):
        cache.get(sha(blobs[f"k{i}"]), f"http://s3/k{i}", size=4000, http=http)
        time.sleep(0.01)
    in_use, other = sha(blobs["k0"]), sha(blobs["k1"])
    ctx = multiprocessing.get_context("fork")
    pinned, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_pin_in_process, args=(tmp_path, [in_use], pinned, release))
    holder.start()
    try:
        assert pinned.wait(10)
        # When this process's cache (another instance, a bound of 0) evicts
        freed = BlobCache(tmp_path, max_bytes=0).evict()
        # Then the pinned file is still whole and the other one is gone
        assert cache.cached(in_use) and cache.file(in_use).read_bytes() == blobs["k0"]
        assert not cache.cached(other) and freed == 4000
    finally:
        release.set()
        holder.join(10)
    # And once released, it can be evicted
    assert BlobCache(tmp_path, max_bytes=0).evict() == 4000
    assert not cache.cached(in_use)


def test_a_pin_in_this_process_also_holds_against_its_own_eviction(tmp_path):
    data = os.urandom(4000)
    cache = BlobCache(tmp_path, max_bytes=0)
    with cache.pinned([sha(data)]):
        path = cache.get(sha(data), "http://s3/k", size=4000, http=serve({"k": data}, []))
        assert cache.evict() == 0 and path.read_bytes() == data
    assert cache.evict() == 4000
