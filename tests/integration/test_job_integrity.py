"""Job integrity (issue 21): the paths that lost, stranded or starved jobs, each on the real
handlers and a real redis-server (S3 over HTTP to the emulator where a payload crosses it).

Each test is written as a daemon or a client would meet the defect; every one failed on the code
before the fix (the closing note of the issue lists what each saw)."""

from __future__ import annotations

import base64
import threading
import time

import pytest
import redis
import requests

from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from tests.support.control_plane import (
    cancel,
    heartbeat,
    put_presigned,
    sha256_hex,
    upload,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ns_keys(r: redis.Redis, namespace: str) -> set[bytes]:
    return set(r.scan_iter(match=f"ps:{{ns:{namespace}}}*", count=1000))


@pytest.fixture
def r(redis_view) -> redis.Redis:
    return redis_view


# -- 1. a payload_lost requeue while another daemon is blocked polling --------------------------


def test_given_a_daemon_blocked_on_the_queue_when_another_reports_payload_lost_then_the_job_is_redelivered(
    cp, s3_client, monkeypatch
):
    # Given: an S3-tier job delivered to daemon A, whose args object is gone
    ref = upload(cp, b"\x05" * 2000)
    job = cp.enqueue(ref=ref).json["job_id"]
    lease_a = cp.poll(daemon_id="a").json["lease"]
    s3_client.delete_object(Bucket=ref["bucket"], Key=ref["key"])
    # And: daemon B blocked in a long poll of the same queue
    got: list = []
    poller = threading.Thread(target=lambda: got.append(cp._poll(None, 3, "b")))
    poller.start()
    time.sleep(0.5)
    # And: the requeue's append is slow to return (the window between the new entry and
    # whatever follows it is where B takes the new entry)
    append = RedisJobStore.append

    def slow_append(self, *args, **kwargs):
        out = append(self, *args, **kwargs)
        time.sleep(0.4)
        return out

    monkeypatch.setattr(RedisJobStore, "append", slow_append)
    # When: A reports payload_lost (the policy requeues once)
    reported = cp.report(job, {"state": "payload_lost", "detail": "GET 404", "lease": lease_a})
    poller.join(10)
    # Then: B's poll took the requeued job, as its second delivery
    assert reported.status == 204
    assert got and got[0].status == 200, got and got[0].raw_body
    assert (got[0].json["job_id"], got[0].json["attempt"]) == (job, 2)
    # And: B's report ends it payload_lost (it is not left queued with nothing to deliver)
    lease_b = got[0].json["lease"]
    assert cp.report(job, {"state": "payload_lost", "lease": lease_b}).status == 204
    assert cp.status(job).json["state"] == "payload_lost"


def test_given_a_requeued_job_when_no_daemon_is_waiting_then_the_next_poll_gets_it(cp, s3_client):
    # Given: a payload_lost requeue with nobody polling
    ref = upload(cp, b"\x06" * 2000)
    job = cp.enqueue(ref=ref).json["job_id"]
    lease = cp.poll(daemon_id="a").json["lease"]
    assert cp.report(job, {"state": "payload_lost", "lease": lease}).status == 204
    # Then: the job is visible as queued, and the next poll delivers it (attempt 2)
    assert cp.status(job).json["state"] == "queued"
    second = cp.poll(daemon_id="b").json
    assert (second["job_id"], second["attempt"]) == (job, 2)
    # And: nothing else is left in the queue
    assert cp.poll(daemon_id="c").status == 204


# -- 2. a redelivered job posts a result that differs from the first attempt's -----------------


def test_given_a_redelivery_when_it_presigns_a_different_result_then_that_result_is_taken(
    cp, settings_env
):
    # Given: attempt 1 presigned a result of its own, then its daemon died
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease_1 = cp.poll(daemon_id="a").json["lease"]
    first = b"first attempt's result" * 1000
    assert (
        cp.presign_put(len(first), role="daemon", job_id=job, sha256=sha256_hex(first)).status
        == 200
    )
    time.sleep(1.2)
    # When: attempt 2 computes a different result (another size and sha256) and stores it
    lease_2 = cp.poll(daemon_id="b").json["lease"]
    second = b"second attempt's other result" * 777
    ref = upload(cp, second, role="daemon", job_id=job)
    posted = cp.post_result(job, {"resultRef": ref, "lease": lease_2})
    # Then: it is accepted, and the client gets attempt 2's result
    assert posted.status == 204, posted.raw_body
    answer = cp.result(job).json
    assert answer["state"] == "succeeded"
    assert (answer["resultRef"]["size"], answer["resultRef"]["sha256"]) == (
        len(second),
        sha256_hex(second),
    )
    assert lease_1 != lease_2


def test_given_a_result_presign_with_a_stale_or_missing_lease_then_it_is_refused_and_nothing_is_pinned(
    cp, settings_env
):
    # Given: a job redelivered to daemon B
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease_a = cp.poll(daemon_id="a").json["lease"]
    time.sleep(1.2)
    lease_b = cp.poll(daemon_id="b").json["lease"]
    data = b"b's result" * 100
    sha = sha256_hex(data)
    # When: A (stale lease), and a caller without a lease, presign a result for it
    stale = cp.presign_put(300_000, role="daemon", job_id=job, lease=lease_a)
    without_body = cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/presign",
        {"ns": cp.ns},
        role="daemon",
        query={"op": "put", "size": "10"},
        body={"kind": "result", "job_id": job, "sha256": "0" * 64},
    )
    # Then: 409 lease_mismatch for the stale one, 422 for the one without a lease
    assert (stale.status, stale.error["code"]) == (409, "lease_mismatch")
    assert without_body.status == 422 and "lease" in without_body.error["message"]
    # And: B's own presign and post are untouched by them
    pre = cp.presign_put(len(data), role="daemon", job_id=job, sha256=sha, lease=lease_b)
    assert pre.status == 200
    assert put_presigned(pre.json, data).status_code == 200
    ref = {
        "kind": "s3",
        "bucket": pre.json["bucket"],
        "key": pre.json["key"],
        "size": len(data),
        "sha256": sha,
    }
    assert cp.post_result(job, {"resultRef": ref, "lease": lease_b}).status == 204


def test_given_a_re_presign_with_other_facts_then_the_409_does_not_echo_the_issued_sha256(cp):
    # Given: a delivery that presigned its result
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    sha = sha256_hex(b"x" * 100)
    assert cp.presign_put(100, role="daemon", job_id=job, sha256=sha, lease=lease).status == 200
    # When: the same delivery asks again with another size
    again = cp.presign_put(101, role="daemon", job_id=job, sha256="1" * 64, lease=lease)
    # Then: 409 names what differs, never the issued checksum
    assert again.status == 409
    assert sha not in again.raw_body and "size" in again.error["message"]


# -- 3. a dead daemon's job behind >= 10 live deliveries ----------------------------------------


def test_given_a_dead_daemons_job_behind_eleven_live_ones_then_an_idle_poller_gets_it(
    cp, settings_env
):
    # Given: 12 jobs; 11 delivered to daemons that heartbeat, the 12th to one that dies
    settings_env(VISIBILITY_TIMEOUT_S="1")
    jobs = [cp.enqueue(raw=bytes([i])).json["job_id"] for i in range(12)]
    live = {}
    for i in range(11):
        d = cp.poll(daemon_id=f"live{i}").json
        live[d["job_id"]] = d["lease"]
    dead = cp.poll(daemon_id="dead").json["job_id"]
    assert set(live) | {dead} == set(jobs)
    # When: the live ones keep heartbeating and an idle daemon polls
    deadline = time.monotonic() + 6
    got = None
    while time.monotonic() < deadline and got is None:
        for job_id, lease in live.items():
            assert heartbeat(cp, job_id, {"lease": lease}).status == 200
        answer = cp.poll(daemon_id="idle")
        if answer.status == 200:
            got = answer.json
        else:
            time.sleep(0.3)
    # Then: it gets the dead daemon's job, redelivered, within a few visibility timeouts
    assert got is not None, "the dead daemon's job was never redelivered"
    assert (got["job_id"], got["attempt"]) == (dead, 2)


def test_given_a_poll_of_two_queues_then_only_the_entry_answered_leaves_its_queue(cp, r):
    # Given: a job on each of two queues
    q1, q2 = cp.queue, cp.queue + "b"
    job1 = cp.enqueue(raw=b"\x01", queue=q1).json["job_id"]
    job2 = cp.enqueue(raw=b"\x02", queue=q2).json["job_id"]
    # When: daemon A polls both queues once
    first = cp.poll(queues=[q1, q2], daemon_id="a").json
    # Then: one job is A's, and the other is still queued, not parked in A's pending list
    other_queue = q2 if first["job_id"] == job1 else q1
    pending = r.xpending(keys.queue(cp.ns, other_queue), keys.CONSUMER_GROUP)["pending"]
    assert pending == 0
    # And: a daemon of only that queue gets it at once, as a first delivery
    second = cp.poll(queues=[other_queue], daemon_id="b").json
    assert second["job_id"] in {job1, job2} - {first["job_id"]} and second["attempt"] == 1


# -- 4. a job still running when its hash TTL runs out ----------------------------------------


def test_given_a_running_job_whose_ttl_is_running_out_when_it_heartbeats_then_it_stays_and_finishes(
    cp, settings_env, r
):
    # Given: a job delivered, whose hash is one second from expiring (it waited long in its
    # queue: an S3 job's hash counts from its args presign)
    settings_env(VISIBILITY_TIMEOUT_S="2")
    ref = upload(cp, b"\x07" * 1000)
    job = cp.enqueue(ref=ref).json["job_id"]
    lease = cp.poll().json["lease"]
    # Then: the delivery kept the hash at least RESULT_TTL_S past the lease's expiry
    assert r.ttl(keys.job(job)) > 172_800
    # When: its TTL runs short anyway and the daemon heartbeats for longer than that
    r.pexpire(keys.job(job), 1000)
    for _ in range(4):
        assert heartbeat(cp, job, {"lease": lease}).status == 200
        time.sleep(0.5)
    # Then: the job is still there, running; its result is taken and the client reads it
    assert cp.status(job).json["state"] == "running"
    assert cp.post_result(job, {"resultInline": b64(b"done"), "lease": lease}).status == 204
    assert base64.b64decode(cp.result(job).json["resultInline"]) == b"done"


def test_given_an_inline_job_delivered_then_its_hash_outlives_the_lease_by_the_result_ttl(cp, r):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    assert r.ttl(keys.job(job)) > 172_800


# -- 5. polling queue names nobody uses ---------------------------------------------------------


def test_given_polls_of_unknown_queue_names_then_redis_holds_nothing_for_them(cp, r):
    # Given: a namespace with no queues
    before = ns_keys(r, cp.ns)
    # When: daemons poll 320 names nobody enqueues to, 16 per poll
    names = [f"typo{i}" for i in range(320)]
    for i in range(0, len(names), 16):
        assert cp.poll(queues=names[i : i + 16], daemon_id="d").status == 204
    # Then: not one key was created
    assert ns_keys(r, cp.ns) == before
    # And: a daemon waiting on a queue that does not exist yet gets its first job
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(cp._poll(["later"], 3, "w")))
    waiter.start()
    time.sleep(0.5)
    job = cp.enqueue(raw=b"\x09", queue="later").json["job_id"]
    waiter.join(10)
    assert got and got[0].status == 200 and got[0].json["job_id"] == job


def test_given_an_empty_queue_idle_past_the_stale_interval_then_a_poll_removes_it_and_its_name(
    cp, settings_env, r
):
    # Given: a queue whose only job is done, idle past STALE_CONSUMER_IDLE_S
    settings_env(STALE_CONSUMER_IDLE_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    assert cp.post_result(job, {"resultInline": b64(b"ok"), "lease": lease}).status == 204
    assert r.exists(keys.queue(cp.ns, cp.queue))
    time.sleep(1.2)
    # When: a daemon polls it and finds nothing
    assert cp.poll().status == 204
    # Then: the stream and its name are gone
    assert not r.exists(keys.queue(cp.ns, cp.queue))
    assert not r.sismember(keys.queue_names(cp.ns), cp.queue)
    # And: the next enqueue creates the queue again, and it delivers
    job2 = cp.enqueue(raw=b"\x02").json["job_id"]
    assert cp.poll().json["job_id"] == job2


def test_given_a_queue_with_a_job_in_flight_then_it_is_never_collected(cp, settings_env, r):
    settings_env(STALE_CONSUMER_IDLE_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    assert cp.poll(daemon_id="a").json["job_id"] == job
    time.sleep(1.2)
    assert cp.poll(daemon_id="b").status == 204
    assert r.exists(keys.queue(cp.ns, cp.queue))


# -- a script re-sent after a lost reply answers as the first did -----------------------------


def resent(method: str, monkeypatch) -> list:
    """Make every call of RedisJobStore.<method> run its script twice with the same arguments
    and answer the second run: what a client does when the first reply is lost to its reply
    timeout and it sends the command again (the first run happened, its answer never came)."""
    real = getattr(RedisJobStore, method)
    answers: list = []

    def twice(self, *args, **kwargs):
        answers.append(real(self, *args, **kwargs))
        answers.append(real(self, *args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(RedisJobStore, method, twice)
    return answers


def test_given_a_lost_reply_to_the_delivery_script_then_the_poll_still_hands_out_the_job(
    cp, r, monkeypatch
):
    # Given: a job, and a delivery whose first reply is lost to the reply timeout
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    answers = resent("start_delivery", monkeypatch)
    # When: a daemon polls
    got = cp.poll(daemon_id="a")
    # Then: it gets the job, attempt 1, and its lease is the one the job holds
    assert got.status == 200, got.raw_body
    assert (got.json["job_id"], got.json["attempt"]) == (job, 1)
    assert answers[0] == answers[1]
    assert (
        cp.post_result(job, {"resultInline": b64(b"r"), "lease": got.json["lease"]}).status == 204
    )


def test_given_a_lost_reply_to_a_cancel_then_the_cancel_is_answered_as_done(cp, r, monkeypatch):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    resent("cancel", monkeypatch)
    answer = cancel(cp, job)
    assert answer.status == 200, answer.raw_body
    assert answer.json["state"] == "cancelled"
    assert cp.poll().status == 204


def test_given_a_lost_reply_to_a_payload_lost_report_then_the_job_is_still_requeued(
    cp, r, s3_client, monkeypatch
):
    ref = upload(cp, b"\x08" * 1000)
    job = cp.enqueue(ref=ref).json["job_id"]
    lease = cp.poll(daemon_id="a").json["lease"]
    resent("payload_lost", monkeypatch)
    assert cp.report(job, {"state": "payload_lost", "lease": lease}).status == 204
    again = cp.poll(daemon_id="b")
    assert again.status == 200 and (again.json["job_id"], again.json["attempt"]) == (job, 2)


def test_given_a_lost_reply_to_a_result_post_then_its_entry_is_still_dropped(cp, r, monkeypatch):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    resent("complete", monkeypatch)
    assert cp.post_result(job, {"resultInline": b64(b"r"), "lease": lease}).status == 204
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 0


def test_the_single_node_client_retries_as_configured(redis_server):
    from payloadstore_controlplane.store.redis_client import FAST_RETRIES, make_redis

    client = make_redis(redis_server.url)
    connection = client.connection_pool.get_connection()
    try:
        assert connection.retry.get_retries() == FAST_RETRIES
    finally:
        client.connection_pool.release(connection)


def test_given_a_redelivery_with_its_own_result_then_the_lapsed_delivery_cannot_overwrite_it(
    cp, settings_env
):
    # Given: attempt 1 presigned a result, its lease lapsed, and attempt 2 stored another one
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll(daemon_id="a")
    stale_bytes = b"attempt 1" * 500
    stale = cp.presign_put(
        len(stale_bytes), role="daemon", job_id=job, sha256=sha256_hex(stale_bytes)
    ).json
    time.sleep(1.2)
    cp.poll(daemon_id="b")
    good = b"attempt 2" * 300
    ref = upload(cp, good, role="daemon", job_id=job)
    assert cp.post_result(job, {"resultRef": ref}).status == 204
    # When: attempt 1's daemon, still alive, PUTs with the URL it was given
    assert put_presigned(stale, stale_bytes).status_code == 200
    # Then: the accepted result is a key of attempt 2's own, untouched by that PUT
    assert ref["key"] != stale["key"] and ref["key"].endswith("/result-2")
    answer = cp.result(job).json
    fetched = requests.get(answer["download"]["url"], timeout=30)
    assert fetched.content == good
    # And: attempt 1's key is refused for a presigned GET (it is not the job's)
    assert cp.presign_get(stale["key"], role="client").status == 404
