"""The leases long-poll (POST /v1/daemon/leases) on the handlers and a real redis-server: one
call renews every lease a daemon holds and answers early when a client cancels one of its
jobs, so a cancel reaches a running job in well under a second instead of at the next
heartbeat (VISIBILITY_TIMEOUT_S/3 later)."""

from __future__ import annotations

import threading
import time

from tests.support.control_plane import cancel, leases


def _hold(cp, daemon_id: str, n: int) -> dict[str, str]:
    held = {}
    for i in range(n):
        job = cp.enqueue(raw=bytes([i + 1])).json["job_id"]
        delivery = cp.poll(daemon_id=daemon_id).json
        assert delivery["job_id"] == job
        held[job] = delivery["lease"]
    return held


def test_given_a_waiting_leases_poll_when_a_client_cancels_one_job_then_it_answers_at_once(cp):
    # Given: a daemon holding two running jobs, waiting in its leases long-poll for 10 s
    held = _hold(cp, "d1", 2)
    first, second = list(held)
    answers = []
    started = time.monotonic()
    waiter = threading.Thread(target=lambda: answers.append(leases(cp, "d1", held, wait_s=10)))
    waiter.start()
    time.sleep(0.5)
    # When: a client cancels the second job
    assert cancel(cp, second).status == 202
    waiter.join(timeout=15)
    took = time.monotonic() - started
    # Then: the long-poll answered well before its 10 s, naming the cancelled job only
    assert answers and answers[0].status == 200, answers
    body = answers[0].json
    assert took < 3.0, took
    assert body["cancel_requested"] == [second]
    assert body["lost"] == []
    assert body["lease_expires_in_s"] == 300.0
    # And: the next long-poll, with the job still held, says so at once too (the job hash is
    # the truth), while one without it waits its time out (the wake-up was answered)
    again = leases(cp, "d1", held, wait_s=5)
    assert again.json["cancel_requested"] == [second]
    t0 = time.monotonic()
    quiet = leases(cp, "d1", {first: held[first]}, wait_s=1)
    assert quiet.json["cancel_requested"] == [] and quiet.json["woken"] is False
    assert time.monotonic() - t0 >= 0.9


def test_given_a_cancel_of_a_job_the_request_does_not_name_then_it_answers_woken(cp):
    # Given: a daemon waiting with the lease of its first job; it takes a second one since
    held = _hold(cp, "d2", 1)
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(leases(cp, "d2", held, wait_s=10)))
    waiter.start()
    time.sleep(0.3)
    newer = _hold(cp, "d2", 1)
    # When: a client cancels the newer job
    assert cancel(cp, next(iter(newer))).status == 202
    waiter.join(timeout=15)
    # Then: the long-poll answers early, woken, so the daemon renews again with all its jobs
    assert answers[0].json["woken"] is True and answers[0].json["cancel_requested"] == []
    both = leases(cp, "d2", {**held, **newer}, wait_s=5)
    assert both.json["cancel_requested"] == list(newer)


def test_given_leases_renewed_when_the_visibility_timeout_passes_then_no_redelivery(
    cp, settings_env
):
    # Given: a 1 s visibility timeout and a daemon holding a job
    settings_env(VISIBILITY_TIMEOUT_S="1")
    held = _hold(cp, "d3", 1)
    # When: its leases long-poll renews it twice over 1.6 s
    for _ in range(4):
        r = leases(cp, "d3", held, wait_s=0)
        assert r.status == 200 and r.json["lost"] == []
        time.sleep(0.4)
    # Then: another daemon finds nothing to take
    assert cp.poll(daemon_id="other").status == 204


def test_given_a_lease_not_current_then_it_is_lost_and_answered_at_once(cp, settings_env):
    # Given: a job whose lease ran out and was delivered to another daemon
    settings_env(VISIBILITY_TIMEOUT_S="1")
    held = _hold(cp, "d4", 1)
    time.sleep(1.2)
    assert cp.poll(daemon_id="other").status == 200
    # When: the first daemon's long-poll renews the old lease
    t0 = time.monotonic()
    r = leases(cp, "d4", held, wait_s=5)
    # Then: the job is lost to it, at once
    assert r.status == 200 and r.json["lost"] == list(held)
    assert time.monotonic() - t0 < 2.0


def test_given_bad_leases_requests_then_403_and_422_and_nothing_renewed(cp, settings_env):
    held = _hold(cp, "d5", 1)
    other_ns = cp.call(
        "daemon",
        "POST",
        "/v1/daemon/leases",
        None,
        role="daemon",
        body={
            "namespace": "someone-else",
            "daemon_id": "d5",
            "leases": [{"job_id": j, "lease": lease} for j, lease in held.items()],
        },
    )
    assert other_ns.status == 403
    for body in (
        {"namespace": cp.ns, "daemon_id": "d5", "leases": []},
        {"namespace": cp.ns, "daemon_id": "bad id!", "leases": [{"job_id": "x", "lease": "l"}]},
        {"namespace": cp.ns, "daemon_id": "d5", "leases": [{"job_id": "x" * 26, "lease": "l"}]},
    ):
        r = cp.call("daemon", "POST", "/v1/daemon/leases", None, role="daemon", body=body)
        assert r.status == 422, (body, r.status, r.body)
    client = cp.call(
        "daemon",
        "POST",
        "/v1/daemon/leases",
        None,
        role="client",
        body={
            "namespace": cp.ns,
            "daemon_id": "d5",
            "leases": [{"job_id": next(iter(held)), "lease": "l"}],
        },
    )
    assert client.status == 403
