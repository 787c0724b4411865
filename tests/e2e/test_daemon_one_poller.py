"""A Daemon with concurrency=8 over HTTP against the local gateway: one poll at a time (each asking
for the free workers' count with `max_jobs`), and still 8 jobs running in parallel."""

from __future__ import annotations

import json
import threading

import httpx

from payloadstore import Client, Daemon
from tests.e2e.sdk_helpers import clients, unique_queue


class CountingTransport(httpx.HTTPTransport):
    """Counts the daemon's poll requests in flight to the gateway (sent, not yet answered)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.bodies: list[dict] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/daemon/poll":
            return super().handle_request(request)
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.bodies.append(json.loads(request.read()))
        try:
            response = super().handle_request(request)
            response.read()
            return response
        finally:
            with self.lock:
                self.in_flight -= 1


def test_a_daemon_with_concurrency_8_makes_one_poll_at_a_time_and_runs_8_jobs_in_parallel(
    local_gateway,
):
    client, _ = clients(local_gateway)
    counting = CountingTransport()
    daemon_client = Client(
        local_gateway.url,
        local_gateway.token("dev", "daemon"),
        "dev",
        http=httpx.Client(transport=counting, timeout=60),
    )
    queue = unique_queue("one-poller")
    jobs = [client.queue(queue).add(i) for i in range(16)]
    # The first 8 jobs each wait until all 8 run at once: only 8 parallel workers get past it.
    eight_at_once = threading.Barrier(8, timeout=20)
    running, most_running, lock = [0], [0], threading.Lock()

    def fn(i: int) -> int:
        with lock:
            running[0] += 1
            most_running[0] = max(most_running[0], running[0])
        try:
            if i < 8:
                eight_at_once.wait()
            return i * 10
        finally:
            with lock:
                running[0] -= 1

    daemon = Daemon(daemon_client, [queue], concurrency=8, wait_s=1, install_signal_handlers=False)
    stats = daemon.run(fn, max_jobs=16)
    assert stats == {"succeeded": 16}
    assert [job.result(timeout=10) for job in jobs] == [i * 10 for i in range(16)]
    assert most_running[0] == 8
    assert counting.most_in_flight == 1, counting.most_in_flight
    assert counting.bodies and all(1 <= b.get("max_jobs", 1) <= 8 for b in counting.bodies)
    assert any(b.get("max_jobs", 1) > 1 for b in counting.bodies)
    # Far fewer polls than jobs: each answer carries several deliveries.
    assert len(counting.bodies) < 16, len(counting.bodies)
