"""The job life cycle on the handlers and a real redis-server: leases, heartbeats, the delivery
cap, cancel, and the pruning of stale consumers."""

from __future__ import annotations

import base64
import time

import msgpack
import pytest

from payloadstore_controlplane.runtime import clock
from payloadstore_controlplane.store import keys
from tests.support.control_plane import cancel, heartbeat

UNKNOWN_JOB = "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def post(cp, job_id, body):
    """A result post exactly as given (no lease added by the fixture)."""
    return cp.call(
        "daemon",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/result",
        {"ns": cp.ns, "job_id": job_id},
        role="daemon",
        body=body,
    )


def report(cp, job_id, body):
    return cp.call(
        "daemon",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/failure",
        {"ns": cp.ns, "job_id": job_id},
        role="daemon",
        body=body,
    )


# -- leases --------------------------------------------------------------------------------


def test_given_a_redelivery_when_polled_then_each_delivery_has_a_fresh_lease(cp, settings_env):
    # Given: a 1 s visibility timeout and a job delivered once
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    before = time.time()
    first = cp.poll(daemon_id="a").json
    # Then: the poll answer carries an opaque lease and when it runs out
    assert isinstance(first["lease"], str) and first["lease"]
    assert before + 0.5 < first["lease_expires_at"] < time.time() + 1.5
    # and its remaining seconds as the control plane counts them (no clock of the daemon's)
    assert first["lease_expires_in_s"] == 1.0
    # When: the lease runs out and another daemon polls
    time.sleep(1.2)
    second = cp.poll(daemon_id="b").json
    # Then: the same job, attempt 2, with another lease
    assert (second["job_id"], second["attempt"]) == (job, 2)
    assert second["lease"] != first["lease"]


def test_given_a_result_without_a_lease_then_422_and_the_job_keeps_running(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    r = post(cp, job, {"resultInline": b64(b"\x02")})
    assert r.status == 422 and "lease" in r.error["message"]
    r = report(cp, job, {"state": "payload_lost"})
    assert r.status == 422 and "lease" in r.error["message"]
    assert cp.status(job).json["state"] == "running"


def test_given_a_job_taken_over_when_the_first_holder_posts_then_409_lease_mismatch_and_nothing_changes(
    cp, settings_env
):
    # Given: daemon A's delivery ran out and daemon B holds the job now
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease_a = cp.poll(daemon_id="a").json["lease"]
    time.sleep(1.2)
    lease_b = cp.poll(daemon_id="b").json["lease"]
    # When: A posts a result, a failure report and an error with its stale lease
    answers = [
        post(cp, job, {"lease": lease_a, "resultInline": b64(b"A")}),
        post(cp, job, {"lease": lease_a, "error": {"type": "E", "message": "from A"}}),
        report(cp, job, {"lease": lease_a, "state": "payload_corrupt", "detail": "from A"}),
        report(cp, job, {"lease": lease_a, "state": "payload_lost"}),
        post(cp, job, {"lease": "not-a-lease-at-all", "resultInline": b64(b"X")}),
    ]
    # Then: every one is 409 lease_mismatch, and the job is still B's, running
    assert [(a.status, a.error.get("code")) for a in answers] == [(409, "lease_mismatch")] * 5
    status = cp.status(job).json
    assert (status["state"], status["attempts"]) == ("running", 2)
    # And: B's result is taken, and B's repeat of it stays an idempotent 204
    assert post(cp, job, {"lease": lease_b, "resultInline": b64(b"B")}).status == 204
    assert post(cp, job, {"lease": lease_b, "resultInline": b64(b"B")}).status == 204
    # And: A's late result still cannot replace it
    late = post(cp, job, {"lease": lease_a, "resultInline": b64(b"A")})
    assert (late.status, late.error["code"]) == (409, "lease_mismatch")
    assert base64.b64decode(cp.result(job).json["resultInline"]) == b"B"


def test_given_the_holder_when_it_posts_a_different_result_after_its_first_then_409(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    assert post(cp, job, {"lease": lease, "resultInline": b64(b"1")}).status == 204
    r = post(cp, job, {"lease": lease, "resultInline": b64(b"2")})
    assert r.status == 409 and r.error["code"] == "conflict"


# -- heartbeats ----------------------------------------------------------------------------


def test_given_heartbeats_when_the_job_runs_past_the_visibility_timeout_then_it_is_not_redelivered(
    cp, settings_env
):
    # Given: a 1 s visibility timeout and a job held by daemon A
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll(daemon_id="a").json["lease"]
    # When: A heartbeats every 0.3 s for 3 visibility timeouts while B keeps polling
    stolen = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        beat = heartbeat(cp, job, {"lease": lease})
        assert beat.status == 200, beat.raw_body
        assert beat.json["cancel_requested"] is False
        assert time.time() + 0.5 < beat.json["lease_expires_at"] < time.time() + 1.5
        assert beat.json["lease_expires_in_s"] == 1.0
        got = cp.poll(daemon_id="b")
        if got.status == 200:
            stolen.append(got.json)
        time.sleep(0.3)
    # Then: B never got it, and A's result after 3 s is taken
    assert stolen == []
    assert post(cp, job, {"lease": lease, "resultInline": b64(b"ok")}).status == 204
    assert cp.status(job).json["attempts"] == 1


def test_given_heartbeats_stop_then_the_job_is_redelivered_and_the_old_lease_is_refused(
    cp, settings_env
):
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll(daemon_id="a").json["lease"]
    assert heartbeat(cp, job, {"lease": lease}).status == 200
    time.sleep(1.3)
    again = cp.poll(daemon_id="b")
    assert again.status == 200 and again.json["attempt"] == 2
    stale = heartbeat(cp, job, {"lease": lease})
    assert (stale.status, stale.error["code"]) == (409, "lease_mismatch")
    assert heartbeat(cp, job, {"lease": again.json["lease"]}).status == 200


def test_given_bad_heartbeats_then_422_404_403_and_409_for_a_finished_job(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    assert heartbeat(cp, job, {}).status == 422
    assert heartbeat(cp, job, {"lease": lease, "extra": 1}).status == 422
    assert heartbeat(cp, UNKNOWN_JOB, {"lease": lease}).status == 404
    forbidden = cp.call(
        "daemon",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/heartbeat",
        {"ns": cp.ns, "job_id": job},
        role="client",
        body={"lease": lease},
    )
    assert forbidden.status == 403
    assert post(cp, job, {"lease": lease, "resultInline": b64(b"x")}).status == 204
    done = heartbeat(cp, job, {"lease": lease})
    assert (done.status, done.error["code"]) == (409, "lease_mismatch")


# -- delivery cap --------------------------------------------------------------------------


def test_given_max_deliveries_when_a_job_keeps_timing_out_then_it_ends_failed_delivery_limit_exceeded(
    cp, settings_env
):
    # Given: at most 2 deliveries, 1 s visibility timeout, and a job whose daemons vanish
    settings_env(VISIBILITY_TIMEOUT_S="1", MAX_DELIVERIES="2")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    assert cp.poll(daemon_id="a").json["attempt"] == 1
    time.sleep(1.2)
    assert cp.poll(daemon_id="b").json["attempt"] == 2
    time.sleep(1.2)
    # When: a third delivery would be due
    third = cp.poll(daemon_id="c")
    # Then: nobody gets it; it is failed with DeliveryLimitExceeded, for status and result
    assert third.status == 204
    status = cp.status(job).json
    assert (status["state"], status["attempts"]) == ("failed", 2)
    assert status["error"]["type"] == "DeliveryLimitExceeded"
    result = cp.result(job)
    assert result.status == 200 and result.json["state"] == "failed"
    assert result.json["error"]["type"] == "DeliveryLimitExceeded"
    assert "2" in result.json["error"]["message"]
    # And: it is never delivered again
    time.sleep(1.2)
    assert cp.poll(daemon_id="d").status == 204


# -- cancel --------------------------------------------------------------------------------


def test_given_a_queued_job_when_cancelled_then_200_cancelled_and_never_delivered(cp, redis_view):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    r = cancel(cp, job)
    assert r.status == 200
    assert (r.json["state"], r.json["job_id"]) == ("cancelled", job)
    assert cp.poll().status == 204
    assert cp.status(job).json["state"] == "cancelled"
    result = cp.result(job, wait=1)
    assert result.status == 200 and result.json["state"] == "cancelled"
    assert result.json["error"]["type"] == "Cancelled"
    # The queue entry (and its inline bytes) is gone
    client = redis_view
    assert client.xlen(keys.queue(cp.ns, cp.queue)) == 0
    # A cancel again (a client's retry after a lost 200) says in data that it is cancelled
    again = cancel(cp, job)
    assert again.status == 409
    assert (again.error["code"], again.error["state"]) == ("conflict", "cancelled")


def test_given_keyed_inline_jobs_when_one_is_cancelled_queued_then_its_entry_goes_at_once_and_a_retry_runs_it(
    cp, redis_view
):
    # Given three queued inline jobs with Idempotency-Keys (as the SDK enqueues; no hash yet)
    ids = [
        cp.enqueue(raw=bytes([i]), headers={"Idempotency-Key": f"c-{i}"}).json["job_id"]
        for i in range(3)
    ]
    stream = keys.queue(cp.ns, cp.queue)
    # When the middle one is cancelled
    assert cancel(cp, ids[1]).json["state"] == "cancelled"
    # Then its entry is gone at once: the queue counts two, and polls deliver the other two
    assert redis_view.xlen(stream) == 2
    assert (
        cp.call(
            "jobs", "GET", "/v1/namespaces/{ns}/queues/{queue}", {"ns": cp.ns, "queue": cp.queue}
        ).json["queued"]
        == 2
    )
    assert [cp.poll(daemon_id="a").json["job_id"] for _ in range(2)] == [ids[0], ids[2]]
    assert cp.status(ids[1]).json["cancel_requested"] is True  # the hash says so; lists hide it
    # And its arguments were kept: a retry runs it with them
    retried = cp.call(
        "jobs", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"ns": cp.ns, "job_id": ids[1]}
    )
    assert retried.status == 200, retried.raw_body
    again = cp.poll(daemon_id="b")
    assert again.json["job_id"] == ids[1]
    assert base64.b64decode(again.json["payloadInline"]) == b"\x01"


@pytest.mark.parametrize("clock_ahead_s", [0.0, 0.5])
def test_given_a_busy_queue_when_a_job_enqueued_after_250_others_within_its_second_is_cancelled_then_it_leaves_the_queued_count_at_once(
    cp, redis_view, monkeypatch, clock_ahead_s
):
    # Given a queue that took 250 jobs in the second before one more (a map of a few hundred
    # calls enqueues that fast), all queued inline with no hash; the last one's id minted by a
    # control plane whose clock is Redis's or half a second ahead of it
    for _ in range(3):
        items = [{"payloadInline": b64(b"\x05")} for _ in range(84)]
        made = cp.call(
            "jobs",
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
            {"ns": cp.ns, "queue": cp.queue},
            body={"jobs": items},
        )
        assert made.status == 200, made.raw_body
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + clock_ahead_s)
    job = cp.enqueue(raw=b"\x06").json["job_id"]
    monkeypatch.undo()
    stream = keys.queue(cp.ns, cp.queue)
    assert redis_view.xlen(stream) == 253
    # When that last job is cancelled
    assert cancel(cp, job).json["state"] == "cancelled"
    # Then it leaves the queue at once (its entry was found past the 250 before it)
    assert redis_view.xlen(stream) == 252
    assert (
        cp.call(
            "jobs", "GET", "/v1/namespaces/{ns}/queues/{queue}", {"ns": cp.ns, "queue": cp.queue}
        ).json["queued"]
        == 252
    )


def test_given_a_running_job_when_cancelled_then_202_the_heartbeat_says_so_and_cancelled_posts_end_it(
    cp,
):
    # Given: a job held by a daemon
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    # When: a client cancels it
    r = cancel(cp, job)
    # Then: 202, still running, cancel requested; the next heartbeat tells the daemon
    assert r.status == 202
    assert (r.json["state"], r.json["cancel_requested"]) == ("running", True)
    assert cp.status(job).json["cancel_requested"] is True
    beat = heartbeat(cp, job, {"lease": lease})
    assert beat.status == 200 and beat.json["cancel_requested"] is True
    # And: a second cancel is still 202
    assert cancel(cp, job).status == 202
    # When: the daemon posts the error type Cancelled
    done = post(cp, job, {"lease": lease, "error": {"type": "Cancelled", "message": "stopped"}})
    # Then: the job ends cancelled; its result answers 200 cancelled
    assert done.status == 204
    result = cp.result(job)
    assert result.status == 200 and result.json["state"] == "cancelled"
    assert result.json["error"]["type"] == "Cancelled"
    assert cancel(cp, job).status == 409


def test_given_a_cancel_requested_job_whose_daemon_died_then_it_ends_cancelled_not_redelivered(
    cp, settings_env
):
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll(daemon_id="a")
    assert cancel(cp, job).status == 202
    time.sleep(1.2)
    assert cp.poll(daemon_id="b").status == 204
    assert cp.status(job).json["state"] == "cancelled"
    assert cp.result(job).json["state"] == "cancelled"


def test_given_a_finished_job_when_cancelled_then_409_and_other_callers_are_refused(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    assert post(cp, job, {"lease": lease, "resultInline": b64(b"x")}).status == 204
    r = cancel(cp, job)
    assert r.status == 409 and "succeeded" in r.error["message"]
    assert (r.error["code"], r.error["state"]) == ("conflict", "succeeded")
    assert cp.status(job).json["state"] == "succeeded"
    assert cancel(cp, UNKNOWN_JOB).status == 404
    assert cancel(cp, job, role="daemon").status == 403


def test_given_an_s3_tier_queued_job_when_cancelled_then_cancelled(cp, payload_bucket):
    from tests.support.control_plane import upload

    ref = upload(cp, msgpack.packb(b"\x00" * 300_000))
    job = cp.enqueue(ref=ref).json["job_id"]
    r = cancel(cp, job)
    assert (r.status, r.json["state"]) == (200, "cancelled")
    assert cp.poll().status == 204
    assert cp.result(job).json["state"] == "cancelled"


# -- consumers -----------------------------------------------------------------------------


def test_given_idle_consumers_with_nothing_pending_when_polled_then_they_are_removed(
    cp, settings_env, redis_view
):
    # Given: consumers a (finished its job: nothing pending) and b (holding a job)
    settings_env(STALE_CONSUMER_IDLE_S="1")
    client = redis_view
    stream = keys.queue(cp.ns, cp.queue)
    first = cp.enqueue(raw=b"\x01").json["job_id"]
    assert cp.poll(daemon_id="a").status == 200
    assert cp.post_result(first, {"resultInline": b64(b"\x02")}).status == 204
    cp.enqueue(raw=b"\x01")
    assert cp.poll(daemon_id="b").status == 200
    names = {c["name"].decode() for c in client.xinfo_consumers(stream, keys.CONSUMER_GROUP)}
    assert {"a", "b"} <= names
    # When: they stay idle past STALE_CONSUMER_IDLE_S and daemon c polls
    time.sleep(1.3)
    assert cp.poll(daemon_id="c").status == 204
    # Then: a is gone; b (one pending entry) stays
    names = {c["name"].decode() for c in client.xinfo_consumers(stream, keys.CONSUMER_GROUP)}
    assert "a" not in names and "b" in names
