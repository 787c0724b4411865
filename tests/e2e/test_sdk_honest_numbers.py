"""Numbers a user reads are the real ones (issue 44): a timeout message states the time really
waited, and a job's created_at is its enqueue time to the millisecond."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from payloadstore import AsyncClient, ResultTimeout, WaitTimeout
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e


def seconds_in(message: str) -> float:
    found = re.search(r"after (\d+(?:\.\d+)?)s", message)
    assert found, message
    return float(found.group(1))


def test_call_timeout_states_the_whole_wait(local_gateway):
    # Given a daemon whose function takes longer than the caller will wait
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("slowcall")
    with daemon_thread(daemon_client, queue, lambda x: time.sleep(x)):
        # When call(4, timeout=2) runs out of time
        started = time.monotonic()
        with pytest.raises(ResultTimeout) as timed_out:
            client.queue(queue).call(4, timeout=2)
        waited = time.monotonic() - started
        # Then the message says about 2 s (not "after 0s"), as long as it really waited
        stated = seconds_in(str(timed_out.value))
        assert 1.9 <= stated <= waited + 0.05, (stated, waited)
        assert timed_out.value.timeout == 2 and timed_out.value.state == "running"
        assert client.queue(queue).stats().in_flight == 1


def test_result_and_as_completed_and_async_call_state_the_real_wait(local_gateway):
    # Given a job nobody takes
    client, _ = clients(local_gateway)
    queue = unique_queue("nobody")
    job = client.queue(queue).add(1)
    # When result(timeout=1) and as_completed(timeout=1) run out
    with pytest.raises(ResultTimeout) as result_timeout:
        job.result(timeout=1)
    with pytest.raises(WaitTimeout) as wait_timeout:
        list(client.as_completed([job], timeout=1))
    # Then each says about 1 s
    assert 0.9 <= seconds_in(str(result_timeout.value)) < 3
    assert 0.9 <= seconds_in(str(wait_timeout.value)) < 3

    async def async_call():
        async with AsyncClient(local_gateway.url, local_gateway.token("dev", "client"), "dev") as a:
            await a.queue(queue).call(2, timeout=1.5)

    # And the async call of a job nobody takes says about 1.5 s
    with pytest.raises(ResultTimeout) as async_timeout:
        asyncio.run(async_call())
    assert 1.4 <= seconds_in(str(async_timeout.value)) < 4


def test_created_at_is_the_enqueue_time_to_the_ms_queued_listed_and_running(local_gateway):
    # Given a daemon-less queue and jobs enqueued by the SDK (inline: with an Idempotency-Key;
    # and one through S3)
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("created")
    q = client.queue(queue)
    time.sleep(1.2)  # not at the first instant of anything the id might round to
    before = time.time()
    job = q.add(1)
    big = q.submit([b"\x01" * (client.config.inline_limit + 1)])
    after = time.time()
    assert big.tier == "s3"
    time.sleep(1.5)
    # When its status and the queued listing are read
    listed = {info.job_id: info for page in q.jobs("queued") for info in page}
    # Then created_at is the enqueue's time (not its minute), however it is read
    for j in (job, big):
        created = j.status().created_at
        assert before - 0.05 <= created <= after + 0.05, (created - before, j.tier)
        assert listed[j.job_id].created_at == pytest.approx(created, abs=0.002)
    # And it stays so once a daemon has taken the job
    started = threading.Event()

    def hold(x):
        started.set()
        time.sleep(1)
        return x

    with daemon_thread(daemon_client, queue, hold):
        assert started.wait(30)
        running = job.status()
        assert before - 0.05 <= running.created_at <= after + 0.05
        assert job.result(timeout=30) == 1
    assert before - 0.05 <= job.status().created_at <= after + 0.05
