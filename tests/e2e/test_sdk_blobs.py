"""Blobs through the SDK over the local gateway (issue 25): uploaded once per namespace whatever
the number of calls, clients or jobs; read by daemons through the host's cache; returned as
results; with the async client too."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import payloadstore as ps
from payloadstore import AsyncClient, Client
from payloadstore._blob_cache import ENV_BLOB_CACHE
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

MiB = 1 << 20


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "blob-cache"
    monkeypatch.setenv(ENV_BLOB_CACHE, str(path))
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_blob_is_uploaded_once_across_calls_and_clients_of_a_namespace(local_gateway):
    # Given 3 MiB of content, and two clients of one namespace
    data = os.urandom(3 * MiB)
    first, _ = clients(local_gateway)
    second, _ = clients(local_gateway)
    # When the first stores it twice (bytes, then a file object) and the second once (a path)
    b1 = first.blob(data)
    b2 = first.blob(data)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"blob-{os.getpid()}.bin"
    path.write_bytes(data)
    try:
        with open(path, "rb") as f:
            b3 = second.blob(f)
        b4 = second.blob(path)
    finally:
        path.unlink()
    # Then every call names the same content, and its bytes went to S3 once
    assert {b.sha256 for b in (b1, b2, b3, b4)} == {sha(data)}
    assert b1.size == len(data)
    assert first.blobs.uploads == 1 and first.blobs.bytes_uploaded == len(data)
    assert second.blobs.uploads == 0


def test_jobs_sharing_a_blob_download_it_once_and_read_it_every_way(local_gateway, cache_dir):
    # Given a blob and a daemon whose function reads it by path, file and bytes
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blobs")
    data = os.urandom(2 * MiB)
    model = client.blob(data)

    def use(model, n):
        with model.open() as f:
            head = f.read(16)
        return [n, sha(model.path.read_bytes()), head == model.read()[:16], str(model.path)]

    with daemon_thread(daemon_client, queue, use) as daemon:
        jobs = client.queue(queue).starmap([(model, n) for n in range(5)], progress=False)
        results = [job.result(timeout=60) for job in jobs]
    # Then each job saw the content, from one verified file of the cache
    assert [r[0] for r in results] == list(range(5))
    assert {r[1] for r in results} == {model.sha256}
    assert all(r[2] for r in results)
    assert {r[3] for r in results} == {str(cache_dir / model.sha256[:2] / model.sha256)}
    # And it was downloaded once, the other jobs starting from the cache
    cache = daemon.client.blobs.cache
    assert cache.downloads == 1 and cache.hits >= 4


def test_a_corrupted_cached_blob_is_downloaded_again(local_gateway, cache_dir):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blobs")
    data = os.urandom(MiB)
    b = client.blob(data)
    with daemon_thread(daemon_client, queue, lambda b: sha(b.read())) as daemon:
        assert client.queue(queue).add(b).result(timeout=60) == b.sha256
        # When the cached file is changed behind the cache's back
        cached = cache_dir / b.sha256[:2] / b.sha256
        with open(cached, "r+b") as f:
            f.write(b"corrupt!")
        # Then the next job gets the true content, downloaded again
        assert client.queue(queue).add(b).result(timeout=60) == b.sha256
        assert daemon.client.blobs.cache.downloads == 2
    assert cached.read_bytes() == data


def test_a_function_returns_a_blob_of_a_file_and_the_client_reads_it(
    local_gateway, cache_dir, tmp_path
):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blobs")
    out = tmp_path / "made.bin"

    def make(n):
        out.write_bytes(bytes(range(256)) * 4096 * n)
        return {"file": ps.blob(out), "n": n}

    with daemon_thread(daemon_client, queue, make):
        value = client.queue(queue).add(3).result(timeout=60)
    result = value["file"]
    assert isinstance(result, ps.Blob) and value["n"] == 3
    assert result.size == 3 * MiB
    assert result.read() == bytes(range(256)) * 4096 * 3
    assert result.path.is_file()


def test_a_job_naming_a_blob_of_another_namespace_is_refused(local_gateway):
    client, _ = clients(local_gateway)
    stranger = ps.Blob("ab" * 32, 10)
    with pytest.raises(ps.ConflictError) as e:
        client.queue(unique_queue("blobs")).add(stranger)
    assert e.value.code == "unknown_blob"


def test_the_async_client_stores_and_sends_blobs(local_gateway, cache_dir):
    _, daemon_client = clients(local_gateway)
    queue = unique_queue("blobs")
    data = os.urandom(MiB)

    async def go():
        async with AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev"
        ) as aclient:
            b = await aclient.blob(data)
            again = await aclient.blob(data)
            job = await aclient.queue(queue).add(b)
            digest, back = await job.result(timeout=60)
            mapped = await aclient.queue(queue).map([b, b], progress=False)
            assert [(await j.result(timeout=60))[0] for j in mapped] == [b.sha256] * 2
            returned = await asyncio.to_thread(back.read)
            return b, again, digest, returned, aclient.blob_store().uploads

    with daemon_thread(daemon_client, queue, lambda b: [sha(b.read()), ps.blob(b.read()[:10])]):
        b, again, digest, returned, uploads = asyncio.run(go())
    # Then the content went up once, the daemon read it, and its returned blob reads back
    assert b.sha256 == again.sha256 == sha(data) == digest
    assert uploads == 1
    assert returned == data[:10]


def test_client_blob_takes_a_path_like(local_gateway, tmp_path):
    client = Client(local_gateway.url, local_gateway.token("dev", "client"), "dev")
    path = tmp_path / "x.bin"
    path.write_bytes(b"payloadstore blob")
    b = client.blob(path)
    assert (b.sha256, b.size) == (sha(b"payloadstore blob"), 17)
    assert b.path == path


# -- blobs above MULTIPART_THRESHOLD (small_parts_gateway: parts of 5 MiB above 6 MiB) ----------


@pytest.fixture
def ranged_cache(monkeypatch):
    """The cache downloads blobs above 6 MiB in 4 MiB ranges; counts the ranged downloads."""
    from payloadstore import _blob_cache

    monkeypatch.setattr(_blob_cache, "PARALLEL_ABOVE_BYTES", 6 * MiB)
    monkeypatch.setattr(_blob_cache, "RANGE_BYTES", 4 * MiB)
    ranged: list[str] = []
    original = _blob_cache.BlobCache._get_ranges

    def counting(self, sha, *args, **kwargs):
        ranged.append(sha)
        return original(self, sha, *args, **kwargs)

    monkeypatch.setattr(_blob_cache.BlobCache, "_get_ranges", counting)
    return ranged


def test_a_blob_in_parts_is_used_by_two_jobs_and_downloaded_once_in_ranges(
    small_parts_gateway, cache_dir, ranged_cache, tmp_path, s3_client, payload_bucket
):
    # Given a 13 MiB file (3 parts of 5, 5 and 3 MiB on this stack) and a daemon reading it
    client, daemon_client = clients(small_parts_gateway)
    queue = unique_queue("blob-parts")
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(13 * MiB))
    # When the client stores it
    model = client.blob(path)
    # Then its sha256 names the whole file, and it went up once, as a multipart upload
    assert model.sha256 == sha(path.read_bytes()) and model.size == 13 * MiB
    assert client.blobs.uploads == 1 and client.blobs.bytes_uploaded == 13 * MiB
    head = s3_client.head_object(
        Bucket=payload_bucket, Key=f"blobs/dev/{model.sha256}", ChecksumMode="ENABLED"
    )
    # (a CRC64NVME upload in parts: S3 checked the whole content's CRC at completion)
    assert head["ChecksumType"] == "FULL_OBJECT" and head["ChecksumCRC64NVME"]
    # And storing it again uploads nothing
    assert client.blob(path) == model and client.blobs.uploads == 1
    # When two jobs reference it
    with daemon_thread(daemon_client, queue, lambda m, n: [n, sha(m.read())]) as daemon:
        jobs = client.queue(queue).starmap([(model, 1), (model, 2)], progress=False)
        results = [job.result(timeout=120) for job in jobs]
    # Then both read the whole content, downloaded once (in ranges), the second from the cache
    assert results == [[1, model.sha256], [2, model.sha256]]
    cache = daemon.client.blobs.cache
    assert cache.downloads == 1 and cache.hits >= 1
    assert ranged_cache == [model.sha256]


def test_the_async_client_uploads_a_large_blob_in_parts(
    small_parts_gateway, s3_client, payload_bucket
):
    data = os.urandom(7 * MiB)

    async def go():
        async with AsyncClient(
            small_parts_gateway.url, small_parts_gateway.token("dev", "client"), "dev"
        ) as aclient:
            b = await aclient.blob(data)
            return b, aclient.blob_store().uploads

    b, uploads = asyncio.run(go())
    assert b.sha256 == sha(data) and uploads == 1
    head = s3_client.head_object(
        Bucket=payload_bucket, Key=f"blobs/dev/{b.sha256}", ChecksumMode="ENABLED"
    )
    assert head["ChecksumSHA256"].endswith("-2")


def test_a_multipart_blob_with_other_bytes_is_refused_by_the_cache_and_the_job_is_corrupt(
    small_parts_gateway, cache_dir, ranged_cache, s3_client, payload_bucket
):
    # Given a blob stored in parts whose object then holds other bytes of the same size (what an
    # uploader of the namespace that hashed other bytes than it named would leave)
    client, daemon_client = clients(small_parts_gateway)
    queue = unique_queue("blob-parts-corrupt")
    data = os.urandom(12 * MiB)
    b = client.blob(data)
    key = f"blobs/dev/{b.sha256}"
    damaged = data[: 6 * MiB] + bytes(x ^ 0xFF for x in data[6 * MiB : 6 * MiB + 8])
    s3_client.put_object(Bucket=payload_bucket, Key=key, Body=damaged + data[6 * MiB + 8 :])
    # When a job referencing it is run
    with daemon_thread(daemon_client, queue, lambda b: sha(b.read())) as daemon:
        job = client.queue(queue).add(b)
        # Then the daemon refuses the blob: the job ends payload_corrupt, result() says so
        with pytest.raises(ps.PayloadCorrupt):
            job.result(timeout=120)
    assert job.status().state == "payload_corrupt"
    # And the file never entered the cache (nor stays half-written in it)
    cache = daemon.client.blobs.cache
    assert not cache.cached(b.sha256) and not cache.file(b.sha256).exists()
    assert cache.downloads == 0 and list((cache_dir / "tmp").iterdir()) == []
    assert ranged_cache == [b.sha256]


def test_an_upload_a_crashed_uploader_left_open_is_taken_over(small_parts_gateway):
    # Given an uploader that opened a blob's multipart upload, presigned its first part and died
    data = os.urandom(11 * MiB)
    digest = sha(data)
    crashed, _ = clients(small_parts_gateway)
    opened = crashed.wire.blob(digest, len(data))["multipart"]
    first = data[: opened["part_bytes"]]
    crashed.wire.blob_parts(digest, [{"number": 1, "size": len(first), "sha256": sha(first)}])
    # When another client stores the same content
    client, _ = clients(small_parts_gateway)
    b = client.blob(data)
    # Then it uploads the parts of that upload itself and the blob exists
    assert b.sha256 == digest and client.blobs.uploads == 1
    assert client.wire.blob(digest, len(data))["exists"] is True


def test_a_function_returns_a_large_blob_uploaded_in_parts_and_the_client_reads_it_in_ranges(
    small_parts_gateway, cache_dir, ranged_cache, tmp_path
):
    # Given a function that returns a 9 MiB file as a blob (2 parts on this stack)
    client, daemon_client = clients(small_parts_gateway)
    queue = unique_queue("blob-parts-result")
    out = tmp_path / "made.bin"
    content = os.urandom(9 * MiB)

    def make():
        out.write_bytes(content)
        return ps.blob(out)

    with daemon_thread(daemon_client, queue, make) as daemon:
        result = client.queue(queue).add().result(timeout=120)
    # Then the daemon uploaded it in parts, and the client reads it, downloaded in ranges and
    # verified into its cache
    assert daemon.client.blobs.uploads == 1
    assert isinstance(result, ps.Blob) and result.size == 9 * MiB
    assert result.read() == content
    assert ranged_cache == [result.sha256]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_result_blob_read_after_its_get_expired_is_asked_for_again(
    start_local_gateway, cache_dir, flavour
):
    # Given GETs valid for 2 s and a function that returns a blob
    gateway = start_local_gateway(PRESIGN_TTL_S="2")
    client, daemon_client = clients(gateway)
    queue = unique_queue("blob-expired-get")
    content = os.urandom(64 * 1024)

    async def read_async() -> bytes:
        async with AsyncClient(gateway.url, gateway.token("dev", "client"), "dev") as aclient:
            job = await aclient.queue(queue).add()
            result = await job.result(timeout=60)
            await asyncio.sleep(3)  # its GET expired meanwhile
            return await asyncio.to_thread(result.read)

    def read_sync() -> bytes:
        result = client.queue(queue).add().result(timeout=60)
        time.sleep(3)
        return result.read()

    with daemon_thread(daemon_client, queue, lambda: ps.blob(content)):
        # When the client reads the result's blob after its GET expired
        got = asyncio.run(read_async()) if flavour == "async" else read_sync()
    # Then it was asked for again (one new result read) and read, sync and async alike
    assert got == content


def test_a_blob_a_running_function_uses_is_not_evicted_by_another_process(local_gateway, cache_dir):
    # Given a function holding its blob's cached path while another daemon process on the host
    # evicts past the cache's bound (0 bytes: everything it may)
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blob-pinned")
    data = os.urandom(MiB)
    b = client.blob(data)
    evict = (
        "import sys; from payloadstore._blob_cache import BlobCache; "
        "print(BlobCache(sys.argv[1], max_bytes=0).evict())"
    )

    def use(b):
        path = b.path
        other = subprocess.run(
            [sys.executable, "-c", evict, str(cache_dir)],
            capture_output=True,
            text=True,
            check=True,
        )
        return [int(other.stdout), sha(path.read_bytes())]

    with daemon_thread(daemon_client, queue, use):
        # When the job runs
        freed, digest = client.queue(queue).add(b).result(timeout=60)
    # Then the other process evicted nothing and the function read its whole file
    assert (freed, digest) == (0, b.sha256)
    # And once the job is done the blob is no longer pinned
    from payloadstore._blob_cache import BlobCache

    assert BlobCache(cache_dir, max_bytes=0).evict() == MiB
