"""A daemon whose job runs across a restart of the stack (same endpoint, same Redis): its leases
long-poll, cut by the restart, comes back, so a cancel asked after the restart still reaches
the job within 5 s."""

from __future__ import annotations

import threading
import time

import pytest

from payloadstore import JobCancelled
from tests.e2e.conftest import _start
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

DOWN_S = 8.0


def test_given_a_job_running_across_a_restart_when_it_is_cancelled_after_then_it_ends_cancelled_within_5s(
    _gateway_services,
):
    # Given: a daemon running a job whose function never looks at cancel_requested
    old, info = _start(_gateway_services, "restart-old", {})
    new = None
    started = threading.Event()

    def fn(n):
        started.set()
        time.sleep(n)
        return n

    try:
        client, daemon_client = clients(info)
        queue = unique_queue("restart")
        with daemon_thread(daemon_client, queue, fn):
            job = client.queue(queue).add(90)
            assert started.wait(30)
            time.sleep(2.0)  # its leases long-poll is in flight
            # When: the stack is down for a while and comes back on the same endpoint
            old.stop()
            time.sleep(DOWN_S)
            new, _ = _start(_gateway_services, "restart-new", {}, port=old.port)
            # And: a client cancels the job
            answer = job.cancel()
            asked = time.monotonic()
            assert (answer.state, answer.cancel_requested) == ("running", True)
            # Then: it ends cancelled within 5 s
            with pytest.raises(JobCancelled):
                job.result(timeout=60)
            took = time.monotonic() - asked
            assert job.status().state == "cancelled"
            assert took <= 5.0, f"cancelled {took:.1f} s after the cancel"
    finally:
        old.stop()
        if new is not None:
            new.stop()
