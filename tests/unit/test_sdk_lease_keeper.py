"""The Daemon's lease keeper (one leases long-poll per busy daemon) against an in-memory control
plane (tests/unit/sdk_fakes.py) that has no leases route: the keeper falls back to per-job
heartbeats, and no job it was handed meanwhile is left without one."""

from __future__ import annotations

import threading
import time

import httpx

from payloadstore import Daemon
from payloadstore._wire import polled_job
from tests.unit.sdk_fakes import FakeWorld, make_client

LEASE_S = 0.9  # heartbeats every 0.3 s


def _job(job_id: str):
    return polled_job(
        {
            "job_id": job_id,
            "namespace": "ns",
            "queue": "q",
            "attempt": 1,
            "lease": f"L-{job_id}",
            "lease_expires_at": time.time() + LEASE_S,
            "lease_expires_in_s": LEASE_S,
        }
    )


class _Gate:
    """The keeper's Condition, entered by the thread named `late` only once `open` is set: that
    thread is held between whatever it read before taking the lock and taking it."""

    def __init__(self, cond: threading.Condition, at_gate: threading.Event, open_: threading.Event):
        self._cond, self._at_gate, self._open = cond, at_gate, open_

    def __enter__(self):
        if threading.current_thread().name == "late":
            self._at_gate.set()
            assert self._open.wait(5)
        return self._cond.__enter__()

    def __exit__(self, *exc):
        return self._cond.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._cond, name)


def test_given_a_control_plane_without_the_route_when_a_job_is_kept_as_the_keeper_falls_back_then_it_is_heartbeated():
    # Given: a control plane without the leases route (404), whose answer to the keeper's first
    # call comes only once a second worker is about to hand its job to the keeper
    world = FakeWorld()
    at_gate, fell_back = threading.Event(), threading.Event()

    def no_route(request):
        assert at_gate.wait(5)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no route"}})

    world.fail("POST", "/v1/daemon/leases", no_route)
    world.fail(
        "POST",
        "/heartbeat",
        *[
            lambda r: httpx.Response(
                200,
                json={
                    "lease_expires_at": time.time() + LEASE_S,
                    "lease_expires_in_s": LEASE_S,
                    "cancel_requested": False,
                },
            )
            for _ in range(100)
        ],
    )
    daemon = Daemon(make_client(world), ["q"], wait_s=0, install_signal_handlers=False)
    keeper = daemon._leases
    keeper.cond = _Gate(keeper.cond, at_gate, fell_back)
    fall_back = keeper._fall_back

    def recording_fall_back():
        fall_back()
        fell_back.set()

    keeper._fall_back = recording_fall_back
    first, second = _job("JOB0001"), _job("JOB0002")
    stops = [keeper.keep(first, _current(first))]
    # When: the second job is handed over while the keeper learns the route is missing
    late = threading.Thread(
        target=lambda: stops.append(keeper.keep(second, _current(second))), name="late"
    )
    late.start()
    late.join(10)
    try:
        time.sleep(4 * LEASE_S)
        # Then: both jobs are heartbeated (their leases kept), and the route was asked once
        beats = [str(r.url) for r in world.calls("POST", "/heartbeat")]
        assert any("JOB0001" in u for u in beats), beats
        assert any("JOB0002" in u for u in beats), beats
        assert len(world.calls("POST", "/v1/daemon/leases")) == 1
    finally:
        for stop in stops:
            stop()


def _current(job):
    from payloadstore.daemon import CurrentJob

    return CurrentJob(job.job_id, job.queue, job.attempt, job.lease)


def test_given_a_job_delivered_again_to_the_same_daemon_when_the_old_delivery_ends_then_the_new_ones_lease_is_still_kept():
    import json

    # Given: a control plane with the leases route (each call answered after 0.1 s), and a
    # daemon of two workers holding job J's first delivery (lease L1)
    world = FakeWorld()
    bodies: list[dict] = []

    def renewed(request):
        bodies.append(json.loads(request.read()))
        time.sleep(0.1)
        return httpx.Response(
            200,
            json={
                "lease_expires_at": time.time() + 300,
                "lease_expires_in_s": 300.0,
                "cancel_requested": [],
                "lost": [],
                "woken": False,
            },
        )

    world.fail("POST", "/v1/daemon/leases", *[renewed for _ in range(1000)])
    daemon = Daemon(make_client(world), ["q"], wait_s=0, install_signal_handlers=False)
    keeper = daemon._leases
    first = _job("JOBJ")
    first_current = _current(first)
    stop_first = keeper.keep(first, first_current)
    # When: its lease ran out (the daemon was paused longer than the visibility timeout) and
    # the other worker takes the job's next delivery (lease L2); then the first ends
    again = polled_job({**first.raw, "lease": "L2", "attempt": 2})
    stop_again = keeper.keep(again, _current(again))
    stop_first()
    try:
        seen = len(bodies)
        time.sleep(2.0)
        # Then: the daemon keeps renewing the delivery it still runs (L2)
        later = [lease for body in bodies[seen:] for lease in body["leases"]]
        assert {"job_id": "JOBJ", "lease": "L2"} in later, later
        # And: the first delivery was told its lease is gone (as a heartbeat's lease_mismatch
        # told it before), so its worker stops waiting for it
        assert first_current.lease_lost
    finally:
        stop_again()
