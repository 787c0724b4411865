"""Operating the queues through the SDK over the local gateway: list a queue's failed jobs with
their errors, retry one, redrive the rest, purge a queue (sync and asyncio)."""

from __future__ import annotations

import asyncio
import os

import pytest

from payloadstore import AsyncClient, JobFailed, NotRetryable
from payloadstore._blob_cache import ENV_BLOB_CACHE
from payloadstore_controlplane.store import keys
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e


class Flaky:
    """A daemon's function with a bug that can be fixed while the daemon runs."""

    def __init__(self):
        self.broken = True

    def __call__(self, value):
        if self.broken:
            raise ValueError(f"cannot handle {len(value) if isinstance(value, bytes) else value}")
        return value if not isinstance(value, bytes) else len(value)


def test_failed_inline_and_s3_jobs_are_found_retried_and_then_succeed(local_gateway):
    # Given a daemon whose function fails, an inline job and an S3-tier job that failed on it
    client, daemon_client = clients(local_gateway)
    queue = client.queue(unique_queue("ops-retry"))
    fn = Flaky()
    with daemon_thread(daemon_client, queue.name, fn):
        small = queue.add(7)
        large = queue.add(b"\x01" * 400_000)
        assert large.tier == "s3"
        for job in (small, large):
            with pytest.raises(JobFailed):
                job.result(timeout=30)
        # When the operator lists the queue's failed jobs
        pages = list(queue.jobs(state="failed", limit=1))
        # Then both are there, newest first, one per page, with their error type and message
        failed = [info for page in pages for info in page]
        assert [f.job_id for f in failed] == [large.job_id, small.job_id]
        assert {f.error["type"] for f in failed} == {"ValueError"}
        assert failed[1].error["message"] == "cannot handle 7"
        assert failed[0].tier == "s3" and failed[1].tier == "inline"
        # and the job's own status carries the remote traceback
        assert "ValueError" in small.status().error["traceback"]
        # When the bug is fixed and each is retried
        fn.broken = False
        answers = [small.retry(), large.retry()]
        # Then they keep their ids and succeed, as second attempts
        assert [(a.job_id, a.state, a.attempt) for a in answers] == [
            (small.job_id, "queued", 2),
            (large.job_id, "queued", 2),
        ]
        assert small.result(timeout=30) == 7
        assert large.result(timeout=30) == 400_000
    assert small.status().retries == 1
    assert [i.job_id for p in queue.jobs(state="failed") for i in p] == []
    assert {i.job_id for p in queue.jobs(state="succeeded") for i in p} == {
        small.job_id,
        large.job_id,
    }


def test_a_succeeded_job_is_not_retried_and_the_reason_says_why(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = client.queue(unique_queue("ops-refused"))
    with daemon_thread(daemon_client, queue.name, lambda v: v):
        job = queue.add(1)
        assert job.result(timeout=30) == 1
    with pytest.raises(NotRetryable) as refused:
        job.retry()
    assert refused.value.reason == "succeeded"
    assert refused.value.status == 409


def test_redrive_then_purge(local_gateway):
    # Given three jobs that failed
    client, daemon_client = clients(local_gateway)
    queue = client.queue(unique_queue("ops-redrive"))
    fn = Flaky()
    with daemon_thread(daemon_client, queue.name, fn):
        jobs = [queue.add(i) for i in range(3)]
        for job in jobs:
            with pytest.raises(JobFailed):
                job.result(timeout=30)
        # When the fix is out and the queue is redriven
        fn.broken = False
        answer = queue.redrive()
        # Then all three are retried and succeed
        assert (answer.retried, answer.skipped) == (3, 0)
        assert [job.result(timeout=30) for job in jobs] == [0, 1, 2]
    # Given four jobs waiting with no daemon
    waiting = [queue.add(i) for i in range(4)]
    # When the queue is purged
    purged = queue.purge()
    # Then all four are cancelled and nothing waits
    assert (purged.cancelled, purged.remaining) == (4, 0)
    assert queue.stats().queued == 0
    assert {i.job_id for p in queue.jobs(state="cancelled") for i in p} == {
        j.job_id for j in waiting
    }


def test_the_async_client_lists_retries_redrives_and_purges(local_gateway):
    _, daemon_client = clients(local_gateway)
    name = unique_queue("ops-async")
    fn = Flaky()

    async def scenario():
        async with AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev"
        ) as aclient:
            queue = aclient.queue(name)
            job = await queue.add(5)
            with pytest.raises(JobFailed):
                await job.result(timeout=30)
            pages = [page async for page in queue.jobs(state="failed")]
            assert [i.job_id for p in pages for i in p] == [job.job_id]
            fn.broken = False
            assert (await job.retry()).attempt == 2
            assert await job.result(timeout=30) == 5
            assert (await queue.redrive()).retried == 0
            return queue

    with daemon_thread(daemon_client, name, fn):
        asyncio.run(scenario())

    async def purge_one():
        async with AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev"
        ) as aclient:
            queue = aclient.queue(name)
            await queue.add(1)
            return await queue.purge()

    purged = asyncio.run(purge_one())
    assert (purged.cancelled, purged.remaining) == (1, 0)


def test_a_job_whose_blob_expired_is_not_retried_and_one_whose_blob_is_intact_is(
    local_gateway, tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV_BLOB_CACHE, str(tmp_path / "blob-cache"))
    # Given two jobs that failed, each referencing its own blob
    client, daemon_client = clients(local_gateway)
    queue = client.queue(unique_queue("ops-blob-retry"))
    gone, kept = client.blob(os.urandom(50_000)), client.blob(os.urandom(50_000))
    broken = {"on": True}

    def fn(b):
        if broken["on"]:
            raise ValueError("not yet")
        return b.sha256 if b.read() else None

    with daemon_thread(daemon_client, queue.name, fn):
        lost, intact = queue.add(gone), queue.add(kept)
        for job in (lost, intact):
            with pytest.raises(JobFailed):
                job.result(timeout=30)
        # and the first job's blob then expired from the namespace
        local_gateway.redis_client().delete(keys.blob("dev", gone.sha256))
        broken["on"] = False
        # When each is retried (sync and async)
        with pytest.raises(NotRetryable) as refused:
            lost.retry()

        async def retry_async():
            async with AsyncClient(
                local_gateway.url, local_gateway.token("dev", "client"), "dev"
            ) as aclient:
                await aclient.job(lost.job_id).retry()

        with pytest.raises(NotRetryable) as refused_async:
            asyncio.run(retry_async())
        answer = intact.retry()
        # Then the one whose blob expired is refused up front, naming the blob, and stays failed
        for e in (refused.value, refused_async.value):
            assert (e.status, e.reason, e.state) == (409, "blob_expired", "failed")
            assert e.details["blobs"] == [gone.sha256]
        assert lost.status().state == "failed"
        # and the other runs again and reads its blob
        assert answer.state == "queued"
        assert intact.result(timeout=30) == kept.sha256
