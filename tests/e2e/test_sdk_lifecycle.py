"""The job life cycle through the SDK and the Daemon over HTTP: heartbeats keep a long job with
one daemon, a job taken from a daemon is not posted by it, the delivery cap, cancel."""

from __future__ import annotations

import itertools
import threading
import time
import types

import pytest

import payloadstore
import payloadstore._daemon_lease
from payloadstore import Daemon, JobCancelled, JobFailed
from payloadstore.daemon import TAKEN, _Heartbeat
from payloadstore.errors import ConflictError
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e


def test_given_heartbeats_when_a_job_runs_3x_the_visibility_timeout_then_it_runs_exactly_once(
    start_local_gateway,
):
    # Given: a 1 s visibility timeout and two daemons on the queue
    gateway = start_local_gateway(VISIBILITY_TIMEOUT_S="1")
    client, daemon_client = clients(gateway)
    queue = unique_queue("long")
    runs: list[str] = []

    def long_job(tag):
        runs.append(tag)
        time.sleep(3.5)
        return f"done {tag}"

    with (
        daemon_thread(daemon_client, queue, long_job) as first,
        daemon_thread(daemon_client, queue, long_job) as second,
    ):
        # When: one job that runs 3.5 visibility timeouts
        job = client.queue(queue).add("x")
        # Then: one run, the right value, one delivery
        assert job.result(timeout=30) == "done x"
        time.sleep(1.5)
    assert runs == ["x"]
    assert job.status().attempts == 1
    assert sum(first.stats.values()) + sum(second.stats.values()) == 1


@pytest.mark.parametrize("skew", [-2, 2], ids=["behind", "ahead"])
def test_given_daemon_clocks_off_by_2x_the_visibility_timeout_when_a_long_job_runs_then_it_runs_once_beating_every_third_of_the_lease(
    start_local_gateway, monkeypatch, skew
):
    # Given: a 2 s visibility timeout and two daemons whose wall clocks (time.time) are both
    # 2 visibility timeouts behind, or ahead of, the control plane's
    vt = 2.0
    gateway = start_local_gateway(VISIBILITY_TIMEOUT_S="2")
    client, daemon_client = clients(gateway)
    queue = unique_queue("skew")
    real_time = time.time
    # The wall clock is read where the lease keeper schedules its renewals.
    monkeypatch.setattr(
        payloadstore._daemon_lease,
        "time",
        types.SimpleNamespace(
            time=lambda: real_time() + skew * vt, monotonic=time.monotonic, sleep=time.sleep
        ),
    )
    # Each renewal's departure (the leases long-poll's calls), on the monotonic clock.
    sent: list[float] = []
    wire = daemon_client.wire
    renew = wire.leases

    def recorded_renew(*args, **kwargs):
        sent.append(time.monotonic())
        return renew(*args, **kwargs)

    monkeypatch.setattr(wire, "leases", recorded_renew)
    runs: list[str] = []

    def long_job(tag):
        runs.append(tag)
        time.sleep(2.5 * vt)
        return f"done {tag}"

    with (
        daemon_thread(daemon_client, queue, long_job) as first,
        daemon_thread(daemon_client, queue, long_job) as second,
    ):
        # When: one job that runs 2.5 visibility timeouts
        job = client.queue(queue).add("x")
        assert job.result(timeout=30) == "done x"
    # Then: it ran once, in one delivery
    assert runs == ["x"]
    assert job.status().attempts == 1
    assert sum(first.stats.values()) + sum(second.stats.values()) == 1
    # And: its daemon renewed about every third of the lease (each long-poll waits that long:
    # not to the lease's very end, as a clock behind made heartbeats, nor every 0.2 s, as a
    # clock ahead made them)
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(gaps) >= 5, gaps
    assert all(0.6 * vt / 3 <= gap <= 1.5 * vt / 3 for gap in gaps), str(
        [round(g, 3) for g in gaps]
    )


def test_given_a_lapsed_lease_when_another_daemon_took_the_job_then_the_first_posts_nothing(
    start_local_gateway, monkeypatch
):
    # Given: a 1 s visibility timeout and a daemon whose first heartbeat comes too late (1.5 s)
    gateway = start_local_gateway(VISIBILITY_TIMEOUT_S="1")
    client, daemon_client = clients(gateway)
    queue = unique_queue("taken")
    monkeypatch.setattr(_Heartbeat, "interval", staticmethod(lambda expires_at, now=None: 1.5))
    release = threading.Event()
    job = client.queue(queue).add(1)
    slow = Daemon(daemon_client, [queue], wait_s=1, install_signal_handlers=False)
    outcome: list[str] = []
    delivery = slow._poll()
    worker = threading.Thread(
        target=lambda: outcome.append(slow.process(delivery, lambda v: release.wait(10) or "A"))
    )
    worker.start()
    # When: the lease lapses and another daemon takes the job and finishes it
    time.sleep(1.2)
    other = daemon_client.wire.poll([queue], wait_s=2, daemon_id="other")
    assert other is not None and other.attempt == 2 and other.lease != delivery.lease
    daemon_client.wire.post_result(
        job.job_id, error={"type": "E", "message": "B"}, lease=other.lease
    )
    worker.join(10)
    release.set()
    # Then: the first daemon learned from its heartbeat that the job was taken, posted nothing
    assert outcome == [TAKEN]
    with pytest.raises(JobFailed) as info:
        job.result(timeout=5)
    assert info.value.message == "B"
    # And: a post with its stale lease is refused as lease_mismatch
    with pytest.raises(ConflictError) as refused:
        daemon_client.wire.post_result(job.job_id, inline=b"\x01", lease=delivery.lease)
    assert refused.value.code == "lease_mismatch"


def test_given_max_deliveries_when_every_daemon_dies_with_the_job_then_job_failed_delivery_limit(
    start_local_gateway,
):
    gateway = start_local_gateway(VISIBILITY_TIMEOUT_S="1", MAX_DELIVERIES="2")
    client, daemon_client = clients(gateway)
    queue = unique_queue("cap")
    job = client.queue(queue).add(1)
    # Given: two deliveries whose daemons vanish (never post, never heartbeat)
    for attempt in (1, 2):
        got = daemon_client.wire.poll([queue], wait_s=3, daemon_id=f"dies-{attempt}")
        assert got is not None and got.attempt == attempt
        time.sleep(1.2)
    # When: a third delivery would be due
    assert daemon_client.wire.poll([queue], wait_s=1, daemon_id="third") is None
    # Then: the client sees JobFailed, type DeliveryLimitExceeded
    with pytest.raises(JobFailed) as info:
        job.result(timeout=5)
    assert info.value.type == "DeliveryLimitExceeded"
    assert job.status().state == "failed"


def test_given_a_queued_job_when_cancelled_then_it_never_runs_and_result_raises_job_cancelled(
    local_gateway,
):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("cancel-queued")
    job = client.queue(queue).add(1)
    answer = job.cancel()
    assert (answer.state, answer.cancel_requested) == ("cancelled", False)
    ran: list = []
    stats = Daemon(daemon_client, [queue], wait_s=1, install_signal_handlers=False).run(
        ran.append, stop_when_idle=True
    )
    assert ran == [] and dict(stats) == {}
    with pytest.raises(JobCancelled) as info:
        job.result(timeout=5)
    assert info.value.job_id == job.job_id
    with pytest.raises(ConflictError):
        job.cancel()


def test_given_a_running_job_when_cancelled_then_the_function_sees_it_and_the_job_ends_cancelled(
    start_local_gateway,
):
    # Given: a 3 s visibility timeout (heartbeat about every second) and a job that runs until
    # its cancel is requested
    gateway = start_local_gateway(VISIBILITY_TIMEOUT_S="3")
    client, daemon_client = clients(gateway)
    queue = unique_queue("cancel-running")
    started, saw_cancel = threading.Event(), threading.Event()

    def until_cancelled(_):
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if payloadstore.current_job().cancel_requested:
                saw_cancel.set()
                return "stopped"
            time.sleep(0.05)
        return "never cancelled"

    with daemon_thread(daemon_client, queue, until_cancelled) as daemon:
        job = client.queue(queue).add(1)
        assert started.wait(20)
        # When: the client cancels it
        answer = job.cancel()
        assert (answer.state, answer.cancel_requested) == ("running", True)
        # Then: the result raises JobCancelled, the function saw the request
        with pytest.raises(JobCancelled):
            job.result(timeout=20)
        assert saw_cancel.wait(5)
    assert job.status().state == "cancelled"
    assert daemon.stats["cancelled"] == 1
    assert payloadstore.current_job() is None
