"""Fewer calls per job (issue 34), end to end through the local gateway: a Daemon's result post
fetches its next job (one call per job at steady load), and `queue.call` / `queue.add(wait=)`
answer a short job's result in the enqueue's own call."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from payloadstore import AsyncClient, Client, Daemon, JobFailed, LeaseMismatch, ResultTimeout
from payloadstore._wire import BatchItem, NextJobs
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue


class Recording(httpx.HTTPTransport):
    """Records every control-plane request's method and path (thread-safe)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.calls.append((request.method, request.url.path))
        return super().handle_request(request)

    def job_calls(self) -> list[tuple[str, str]]:
        """Polls, result posts, failure reports, enqueues and result reads."""
        with self.lock:
            return [c for c in self.calls if "/jobs" in c[1] or c[1] == "/v1/daemon/poll"]


def recorded_client(gateway, role: str) -> tuple[Client, Recording]:
    recording = Recording()
    client = Client(
        gateway.url,
        gateway.token("dev", role),
        "dev",
        http=httpx.Client(transport=recording, timeout=60),
    )
    return client, recording


def test_a_busy_daemon_makes_one_call_per_job(local_gateway):
    # Given 20 queued jobs
    client, _ = clients(local_gateway)
    queue = unique_queue("next")
    jobs = [client.queue(queue).add(i) for i in range(20)]
    # When a daemon of one worker runs them
    daemon_client, recording = recorded_client(local_gateway, "daemon")
    daemon = Daemon(daemon_client, [queue], wait_s=1, install_signal_handlers=False)
    stats = daemon.run(lambda i: i * 2, stop_when_idle=True)
    # Then every job ran and its result is there, and the daemon made one call per job: a
    # result post that brought the next job (plus the first poll and the idle one at the end)
    assert stats == {"succeeded": 20}
    assert [job.result(timeout=10) for job in jobs] == [i * 2 for i in range(20)]
    calls = recording.job_calls()
    polls = [c for c in calls if c[1] == "/v1/daemon/poll"]
    posts = [c for c in calls if c[1].endswith("/result")]
    assert len(posts) == 20 and len(polls) == 2, (len(posts), len(polls))


def test_a_busy_daemon_pool_hands_the_next_jobs_to_its_workers(local_gateway):
    client, _ = clients(local_gateway)
    queue = unique_queue("next-pool")
    jobs = [client.queue(queue).add(i) for i in range(24)]
    daemon_client, recording = recorded_client(local_gateway, "daemon")
    daemon = Daemon(daemon_client, [queue], wait_s=1, concurrency=4, install_signal_handlers=False)
    stats = daemon.run(lambda i: i + 1, stop_when_idle=True)
    assert stats == {"succeeded": 24}
    assert [job.result(timeout=10) for job in jobs] == [i + 1 for i in range(24)]
    polls = [c for c in recording.job_calls() if c[1] == "/v1/daemon/poll"]
    # Most jobs came with a result post's answer, not with a poll
    assert len(polls) <= 8, len(polls)


def test_a_post_that_fails_leases_nothing_and_an_idle_next_answers_no_jobs(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("next-fail")
    first = client.queue(queue).add(1)
    (delivery,) = daemon_client.wire.poll([queue], wait_s=1, daemon_id="d1", max_jobs=1)
    waiting = client.queue(queue).add(2)
    nxt = NextJobs((queue,), max_jobs=2, wait_s=0, daemon_id="d1")
    # A post with another lease is refused, and takes no job with it
    with pytest.raises(LeaseMismatch):
        daemon_client.wire.post_result(first.job_id, inline=b"\x01", lease="other", next=nxt)
    assert waiting.status().state == "queued"
    # The holder's post takes the waiting job
    jobs = daemon_client.wire.post_result(
        first.job_id, inline=b"\x01", lease=delivery.lease, next=nxt
    )
    assert [j.job_id for j in jobs or []] == [waiting.job_id]
    # And with nothing queued, next answers no jobs (not 204)
    (held,) = jobs or []
    assert (
        daemon_client.wire.post_result(held.job_id, inline=b"\x02", lease=held.lease, next=nxt)
        == []
    )
    assert first.result(timeout=5) == 1 and waiting.result(timeout=5) == 2


def test_queue_call_answers_a_fast_jobs_value_in_one_call(local_gateway):
    _, daemon_client = clients(local_gateway)
    client, recording = recorded_client(local_gateway, "client")
    queue = unique_queue("call")
    with daemon_thread(daemon_client, queue, lambda a, b=0: a * 10 + b):
        assert client.queue(queue).call(4, b=2, timeout=20) == 42
        # The enqueue answered the result: no other call for this job
        assert [c[0] for c in recording.job_calls()] == ["POST"]
        job = client.queue(queue).add(5, wait=10)
        assert job.done and job.state == "succeeded"
        before = len(recording.calls)
        assert job.result() == 50
        assert len(recording.calls) == before


def test_queue_call_raises_as_job_result_does(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("call-fail")

    def fn(x):
        raise ValueError(f"bad {x}")

    with daemon_thread(daemon_client, queue, fn), pytest.raises(JobFailed) as info:
        client.queue(queue).call(7, timeout=20)
    assert info.value.type == "ValueError" and "bad 7" in str(info.value)
    # Nobody takes the job: ResultTimeout after the timeout
    started = time.monotonic()
    with pytest.raises(ResultTimeout):
        client.queue(unique_queue("nobody")).call(1, timeout=1)
    assert time.monotonic() - started < 5


def test_add_with_wait_gives_back_the_job_id_for_a_slow_job(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("slow")

    def slow(x):
        time.sleep(3)
        return x

    with daemon_thread(daemon_client, queue, slow):
        started = time.monotonic()
        job = client.queue(queue).add(9, wait=0.5)
        assert 0.4 <= time.monotonic() - started < 2.5
        assert not job.done and job.job_id
        assert job.result(timeout=20) == 9


def test_s3_tier_job_and_result_in_one_enqueue(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("call-s3")
    big = b"z" * (400 * 1024)  # above INLINE_THRESHOLD both ways
    with daemon_thread(daemon_client, queue, lambda data: data + b"!"):
        job = client.queue(queue).add(big, wait=15)
        assert job.tier == "s3" and job.done
        assert job.result() == big + b"!"


def test_batch_enqueue_with_wait_through_the_wire(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("batch-wait")
    from payloadstore import codec

    items = [
        BatchItem(inline=codec.encode({"args": [i], "kwargs": {}}).tobytes()) for i in range(3)
    ]
    with daemon_thread(daemon_client, queue, lambda i: i * 3):
        answers = client.wire.enqueue_batch(queue, items, wait_s=10)
    assert all(a.result is not None for a in answers)
    assert [codec.decode(a.result.result_inline) for a in answers] == [0, 3, 6]


def test_the_async_client_calls_and_adds_with_wait(local_gateway):
    _, daemon_client = clients(local_gateway)
    queue = unique_queue("async-call")

    async def go():
        async with AsyncClient(
            local_gateway.url, local_gateway.token("dev", "client"), "dev"
        ) as aclient:
            value = await aclient.queue(queue).call(3, timeout=20)
            job = await aclient.queue(queue).add(4, wait=10)
            return value, job.done, await job.result()

    with daemon_thread(daemon_client, queue, lambda x: x * x):
        assert asyncio.run(go()) == (9, True, 16)
