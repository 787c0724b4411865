"""Many jobs at once through the local stack: queue.map/starmap over the batch route, wait and
as_completed over jobs:status, and the same with AsyncClient."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import payloadstore
from payloadstore import AsyncClient, BatchError, PayloadTooLarge, WaitTimeout
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

KiB = 1024


class CountingTransport(httpx.HTTPTransport):
    """Counts control-plane requests by path, to show how many calls a workflow costs."""

    def __init__(self):
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request):
        self.paths.append(request.url.path)
        return super().handle_request(request)


def square(x):
    return x * x


def add(a, b):
    return a + b


def big(data):
    return len(data)


def test_map_enqueues_in_batches_and_returns_the_jobs_in_order(local_gateway):
    # Given a client that counts its control-plane calls, and a daemon squaring numbers
    transport = CountingTransport()
    client, daemon_client = clients(local_gateway, http=httpx.Client(transport=transport))
    queue = unique_queue("map")
    # When 250 numbers are mapped over the queue
    jobs = client.queue(queue).map(range(250))
    # Then 3 batch calls (100 + 100 + 50) enqueued them, not 250
    batch_calls = [p for p in transport.paths if p.endswith("/jobs:batch")]
    assert len(batch_calls) == 3
    assert not [p for p in transport.paths if p.endswith(f"/queues/{queue}/jobs")]
    assert [j.tier for j in jobs] == ["inline"] * 250
    with daemon_thread(daemon_client, queue, square, concurrency=4):
        # And as_completed watches all 250 with few status calls, each job once
        before = len(transport.paths)
        finished = list(payloadstore.as_completed(jobs, timeout=120))
        status_calls = [p for p in transport.paths[before:] if p.endswith("/jobs:status")]
    assert sorted(j.job_id for j in finished) == sorted(j.job_id for j in jobs)
    assert len(status_calls) < 100
    # And each result is the square of its input, in input order
    assert [j.result(timeout=10) for j in jobs] == [i * i for i in range(250)]
    client.close()
    daemon_client.close()


def test_map_mixes_inline_and_s3_items_and_starmap_spreads_tuples(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("map-mixed")
    items = [b"a" * KiB, b"b" * (300 * KiB), b"c" * KiB, b"d" * (2 * 1024 * KiB)]
    jobs = client.queue(queue).map(items, concurrency=2)
    assert [j.tier for j in jobs] == ["inline", "s3", "inline", "s3"]
    star_queue = unique_queue("starmap")
    pairs = client.queue(star_queue).starmap([(1, 2), (3, 4), (5, 6)])
    with daemon_thread(daemon_client, queue, big), daemon_thread(daemon_client, star_queue, add):
        done, not_done = payloadstore.wait(jobs + pairs, timeout=60)
        assert not not_done and len(done) == 7
        assert [j.result(timeout=10) for j in jobs] == [len(i) for i in items]
        assert [j.result(timeout=10) for j in pairs] == [3, 7, 11]
    client.close()
    daemon_client.close()


def test_a_refused_item_fails_alone_and_the_others_are_enqueued(local_gateway):
    client, _ = clients(local_gateway)
    queue = unique_queue("map-refused")
    too_big = b"x" * (client.config.max_payload_bytes + 1)
    with pytest.raises(BatchError) as caught:
        client.queue(queue).map([1, too_big, 3])
    error = caught.value
    assert [j is None for j in error.jobs] == [False, True, False]
    assert isinstance(error.errors[1], PayloadTooLarge)
    assert client.queue(queue).stats().queued == 2
    client.close()


def test_wait_first_completed_then_all_and_a_timeout(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("wait")
    jobs = client.queue(queue).map([0.0, 2.0])  # seconds each job sleeps
    # With no daemon, nothing finishes: the wait times out and says so without raising
    done, not_done = payloadstore.wait(jobs, timeout=1)
    assert not done and not_done == set(jobs)
    with pytest.raises(WaitTimeout):
        list(payloadstore.as_completed(jobs, timeout=1))
    with daemon_thread(daemon_client, queue, time.sleep):
        # FIRST_COMPLETED answers when the quick job is done, the slow one still running
        done, not_done = payloadstore.wait(
            jobs, timeout=30, return_when=payloadstore.FIRST_COMPLETED
        )
        assert done == {jobs[0]} and not_done == {jobs[1]}
        # ALL_COMPLETED answers once both are done
        done, not_done = payloadstore.wait(jobs, timeout=30)
        assert done == set(jobs) and not not_done
    client.close()
    daemon_client.close()


def test_async_client_add_map_wait_and_as_completed(local_gateway):
    queue = unique_queue("async")
    _, daemon_client = clients(local_gateway)
    token = local_gateway.token("dev", "client")

    async def enqueue_all():
        async with AsyncClient(local_gateway.url, token, "dev") as c:
            q = c.queue(queue)
            small = await q.add(7)
            large = await q.add(b"z" * (400 * KiB))
            assert (small.tier, large.tier) == ("inline", "s3")
            mapped = await q.map(range(120), concurrency=8)
            # 100 concurrent coroutines, each adding one job
            singles = await asyncio.gather(*(q.add(1000 + i) for i in range(100)))
            return [j.job_id for j in (small, large, *mapped, *singles)]

    async def collect(ids):
        async with AsyncClient(local_gateway.url, token, "dev") as c:
            every = [c.job(i) for i in ids]
            seen = [job async for job in payloadstore.as_completed(every, timeout=120)]
            assert sorted(j.job_id for j in seen) == sorted(ids)
            done, not_done = await payloadstore.wait(every, timeout=10)
            assert not not_done and len(done) == len(ids)
            return [await j.result() for j in every]

    def fn(x):
        return len(x) if isinstance(x, (bytes, bytearray, memoryview)) else x * x

    ids = asyncio.run(enqueue_all())
    with daemon_thread(daemon_client, queue, fn, concurrency=4):
        results = asyncio.run(collect(ids))
    assert results[:2] == [49, 400 * KiB]
    assert results[2:122] == [i * i for i in range(120)]
    assert results[122:] == [(1000 + i) ** 2 for i in range(100)]
    daemon_client.close()


def test_cancelling_a_coroutine_waiting_for_a_result_cancels_at_once(local_gateway):
    queue = unique_queue("async-cancel")

    async def scenario():
        async with AsyncClient(local_gateway.url, local_gateway.token("dev", "client"), "dev") as c:
            job = await c.queue(queue).add(1)  # no daemon: it stays queued
            waiter = asyncio.create_task(job.result())
            await asyncio.sleep(0.5)
            started = time.monotonic()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert time.monotonic() - started < 1
            # And the client goes on working after the cancellation
            assert (await job.status()).state == "queued"
            watcher = asyncio.create_task(c.wait([job], timeout=30))
            await asyncio.sleep(0.3)
            watcher.cancel()
            with pytest.raises(asyncio.CancelledError):
                await watcher

    asyncio.run(scenario())


def test_async_client_retries_a_503_with_the_same_policy(local_gateway):
    # Given a control plane whose first answer to every enqueue is 503 with Retry-After
    failed: set[str] = set()

    async def handler(request: httpx.Request) -> httpx.Response:
        async with httpx.AsyncClient() as real:
            if request.url.path.endswith("/jobs") and request.url.path not in failed:
                failed.add(request.url.path)
                return httpx.Response(
                    503,
                    headers={"Retry-After": "0"},
                    json={"error": {"code": "service_unavailable", "message": "busy"}},
                )
            return await real.send(
                httpx.Request(
                    request.method, request.url, headers=request.headers, content=request.content
                )
            )

    queue = unique_queue("async-retry")

    async def scenario():
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client = AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev", http=http
        )
        async with client:
            job = await client.queue(queue).add(5)
            assert (await job.status()).state == "queued"
        await http.aclose()

    asyncio.run(scenario())
    assert failed, "the 503 was never served"
