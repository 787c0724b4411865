"""A cancelled job on a daemon of two workers whose function never looks: the daemon ends it
`cancelled` at once and goes on, its worker takes the next job while the function's thread runs
on, and what that thread returns later is dropped (the job stays `cancelled`)."""

from __future__ import annotations

import threading
import time

import pytest

from payloadstore import JobCancelled
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

SLOW_S = 8.0


def test_given_a_pool_when_a_job_whose_function_never_looks_is_cancelled_then_its_slot_runs_the_next_and_its_late_return_is_dropped(
    local_gateway,
):
    # Given: a daemon of two workers, both busy with slow jobs that never look at cancels
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("pool-cancel")
    running = threading.Semaphore(0)
    returned = threading.Event()

    def fn(seconds):
        if seconds:
            running.release()
            time.sleep(seconds)
            returned.set()
        return seconds

    with daemon_thread(daemon_client, queue, fn, concurrency=2) as daemon:
        q = client.queue(queue)
        slow = [q.add(SLOW_S) for _ in range(2)]
        assert running.acquire(timeout=30) and running.acquire(timeout=30)
        time.sleep(1.5)
        # When: a client cancels the first
        slow[0].cancel()
        with pytest.raises(JobCancelled):
            slow[0].result(timeout=10)
        # Then: a quick job runs at once on the freed worker (the other is still busy)
        t0 = time.monotonic()
        assert q.call(0, timeout=10) == 0
        assert time.monotonic() - t0 < 3.0
        assert not returned.is_set()
        # And: once the cancelled function returns, nothing is posted for it: the job stays
        # cancelled, and the other slow job succeeds
        assert slow[1].result(timeout=30) == SLOW_S
        assert returned.wait(10)
        time.sleep(1.0)
        assert slow[0].status().state == "cancelled"
        assert daemon.stats["cancelled"] == 1
