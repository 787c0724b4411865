"""A long-lived client or daemon whose blob expired from the namespace (issue 33, defect 3): the
SDK forgets the blob on `409 unknown_blob`, checks or uploads it again from its source, and sends
the enqueue (or the result) once more, without a restart. The record's expiry is forced by
deleting it in the gateway's Redis (and, where said, the object in the emulator)."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

import payloadstore as ps
from payloadstore import AsyncClient
from payloadstore._blob_cache import ENV_BLOB_CACHE
from payloadstore_controlplane.store import keys
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

MiB = 1 << 20


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_BLOB_CACHE, str(tmp_path / "blob-cache"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expire(gateway, s3_client, sha256: str, *, object_too: bool, namespace: str = "dev") -> None:
    """The namespace forgets the blob: its record is gone (and its object, with object_too)."""
    gateway.redis_client().delete(keys.blob(namespace, sha256))
    if object_too:
        s3_client.delete_object(Bucket=gateway.bucket, Key=f"blobs/{namespace}/{sha256}")


@pytest.mark.parametrize("object_too", [False, True], ids=["object-kept", "object-gone"])
def test_a_long_lived_client_enqueues_again_after_its_blob_expired(
    local_gateway, s3_client, tmp_path, object_too
):
    # Given a client that made a blob of a file and enqueued a job with it
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blob-expiry")
    path = tmp_path / "model.bin"
    data = os.urandom(MiB)
    path.write_bytes(data)
    model = client.blob(path)
    client.queue(queue).add(model)
    assert client.blobs.uploads == 1
    # When the namespace lets the blob go (its record expired) while the client lives on
    expire(local_gateway, s3_client, model.sha256, object_too=object_too)
    job = client.queue(queue).add(model)
    # Then the enqueue succeeds without a restart: the blob is checked again (uploaded again
    # from its file when its object is gone too), and the job reads the blob's content
    assert client.blobs.uploads == (2 if object_too else 1)
    with daemon_thread(daemon_client, queue, lambda b: sha(b.read())):
        assert job.result(timeout=60) == sha(data)


def test_a_blob_whose_source_file_is_gone_is_a_clear_error(local_gateway, s3_client, tmp_path):
    client, _ = clients(local_gateway)
    queue = unique_queue("blob-expiry")
    path = tmp_path / "gone.bin"
    path.write_bytes(os.urandom(1000))
    b = client.blob(path)
    client.queue(queue).add(b)
    expire(local_gateway, s3_client, b.sha256, object_too=True)
    path.unlink()
    with pytest.raises(ps.BlobSourceGone) as e:
        client.queue(queue).add(b)
    # (a ConflictError with the code the control plane answered, naming the blob and the file)
    assert isinstance(e.value, ps.ConflictError) and e.value.code == "unknown_blob"
    assert b.sha256 in str(e.value) and str(path) in str(e.value)


def test_a_blob_whose_source_file_changed_is_not_uploaded_under_its_old_sha256(
    local_gateway, s3_client, tmp_path
):
    client, _ = clients(local_gateway)
    path = tmp_path / "changed.bin"
    path.write_bytes(b"first content")
    b = client.blob(path)
    client.queue(unique_queue("blob-expiry")).add(b)
    expire(local_gateway, s3_client, b.sha256, object_too=True)
    path.write_bytes(b"other content")
    with pytest.raises(ps.BlobSourceGone, match="changed"):
        client.queue(unique_queue("blob-expiry")).add(b)


def test_map_resends_the_items_refused_for_an_expired_blob(local_gateway, s3_client):
    client, _ = clients(local_gateway)
    queue = unique_queue("blob-expiry")
    data = os.urandom(1000)
    b = client.blob(data)
    expire(local_gateway, s3_client, b.sha256, object_too=True)
    jobs = client.queue(queue).map([b, b, b], progress=False)
    assert len(jobs) == 3 and client.blobs.uploads == 2


def test_a_daemon_posts_its_result_again_after_the_blob_it_returns_expired(
    local_gateway, s3_client, tmp_path
):
    # Given a daemon whose function returns the same file as a blob every time
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("blob-expiry")
    out = tmp_path / "made.bin"
    out.write_bytes(os.urandom(2000))
    made = sha(out.read_bytes())
    with daemon_thread(daemon_client, queue, lambda n: ps.blob(out)):
        first = client.queue(queue).add(1).result(timeout=60)
        # When the namespace lets that blob go between two jobs
        expire(local_gateway, s3_client, made, object_too=True)
        second = client.queue(queue).add(2).result(timeout=60)
    # Then the second result was posted after the blob was uploaded again, and reads back
    assert first.sha256 == second.sha256 == made
    assert second.read() == out.read_bytes()


def test_the_async_client_enqueues_again_after_its_blob_expired(local_gateway, s3_client):
    data = os.urandom(MiB)

    async def go():
        async with AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev"
        ) as aclient:
            queue = aclient.queue(unique_queue("blob-expiry"))
            b = await aclient.blob(data)
            await queue.add(b)
            expire(local_gateway, s3_client, b.sha256, object_too=True)
            job = await queue.add(b)
            mapped = await queue.map([b, b], progress=False)
            return job, mapped, aclient.blob_store().uploads

    job, mapped, uploads = asyncio.run(go())
    assert job.job_id and len(mapped) == 2
    assert uploads == 2
