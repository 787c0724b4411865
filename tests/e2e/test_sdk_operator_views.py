"""The operator reads through the SDK against the local stack, sync and async: a queue's failed
count, its throughput per minute, and what a job carried (decoded with the codec)."""

from __future__ import annotations

import asyncio

import pytest

from payloadstore import AsyncClient, codec
from payloadstore.errors import JobFailed
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e


def test_given_a_failed_and_a_succeeded_job_then_sync_and_async_clients_read_the_same_views(
    local_gateway,
):
    # Given: one job that succeeded and one that failed on the same queue
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("sdk-views")

    def work(n):
        if n < 0:
            raise ValueError("negative")
        return [n] * 3

    with daemon_thread(daemon_client, queue, work):
        good = client.queue(queue).add(7)
        bad = client.queue(queue).add(-1)
        assert good.result(timeout=60) == [7, 7, 7]
        with pytest.raises(JobFailed):
            bad.result(timeout=60)

    # When: the sync client reads the views
    stats = client.queue(queue).stats()
    chart = client.queue(queue).throughput()
    every = client.throughput()
    good_payloads = client.job(good.job_id).payloads()
    bad_payloads = client.job(bad.job_id).payloads()

    # Then: one failed; the chart's minutes hold one success and one failure
    assert stats.failed == 1
    assert (sum(chart.succeeded), sum(chart.failed), len(chart.succeeded)) == (1, 1, 60)
    assert chart.queue == queue and every.queue is None and sum(every.failed) >= 1
    # And: the stored bytes decode to what was sent and returned
    assert codec.decode(good_payloads.result.inline) == [7, 7, 7]
    assert good_payloads.args.gone == "not_kept"
    assert codec.decode(bad_payloads.args.inline) == {"args": [-1], "kwargs": {}}
    assert bad_payloads.result is None

    # When: the async client reads the same
    async def read():
        async with AsyncClient(local_gateway.url, local_gateway.token("dev", "client"), "dev") as a:
            return (
                await a.queue(queue).stats(),
                await a.queue(queue).throughput(),
                await a.job(bad.job_id).payloads(),
            )

    astats, achart, apayloads = asyncio.run(read())
    # Then: the same answers
    assert astats.failed == 1
    assert (sum(achart.succeeded), sum(achart.failed)) == (1, 1)
    assert apayloads.args.inline == bad_payloads.args.inline
    client.close()
    daemon_client.close()
