"""The operator's views on real Redis and the S3 emulator: a queue's failed count, its
throughput per minute, and what a job carried (GET .../jobs/{job_id}/payloads)."""

from __future__ import annotations

import base64

import httpx
import msgpack
import pytest
import redis

from payloadstore_controlplane.store import keys
from tests.support.control_plane import upload

RESULT_TTL_S = 172_800


@pytest.fixture
def r(redis_target):
    """The Redis the control plane uses (a cluster with PAYLOADSTORE_REDIS=cluster)."""
    from redis.cluster import RedisCluster

    if redis_target.get("REDIS_CLUSTER") == "true":
        return RedisCluster.from_url(redis_target["REDIS_URL"])
    return redis.Redis.from_url(redis_target["REDIS_URL"])


def queue_stats(cp, queue=None):
    return cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/queues/{queue}",
        {"ns": cp.ns, "queue": queue or cp.queue},
    )


def throughput(cp, queue=None, role="client"):
    return cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/throughput",
        {"ns": cp.ns},
        query={"queue": queue} if queue else None,
        role=role,
    )


def payloads(cp, job_id, role="client"):
    return cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/jobs/{job_id}/payloads",
        {"ns": cp.ns, "job_id": job_id},
        role=role,
    )


def retry(cp, job_id):
    return cp.call(
        "jobs", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"ns": cp.ns, "job_id": job_id}
    )


def run_one(cp, *, fail: bool, result=None):
    """A daemon takes the next job and ends it: failed with an error, or with `result`."""
    got = cp.poll().json
    if fail:
        body = {"error": {"type": "ValueError", "message": "bad input"}}
    else:
        body = {"resultInline": base64.b64encode(msgpack.packb(result)).decode()}
    assert cp.post_result(got["job_id"], body).status == 204
    return got["job_id"]


def test_given_jobs_that_failed_when_the_queue_is_read_then_failed_counts_them_until_retried(cp):
    # Given three jobs: two fail, one succeeds
    for i in range(3):
        cp.enqueue(raw=msgpack.packb([i]))
    failed_one = run_one(cp, fail=True)
    run_one(cp, fail=True)
    run_one(cp, fail=False, result=1)

    # When the queue's figures are read (one queue, and the namespace's list)
    stats = queue_stats(cp).json
    listed = cp.call("jobs", "GET", "/v1/namespaces/{ns}/queues", {"ns": cp.ns}).json

    # Then two are failed, and the list says the same
    assert stats["failed"] == 2
    assert [q["failed"] for q in listed["queues"] if q["name"] == cp.queue] == [2]

    # When one of them is retried
    assert retry(cp, failed_one).status == 200
    # Then it no longer counts as failed
    assert queue_stats(cp).json["failed"] == 1
    # And when it fails again, it counts once, not twice
    run_one(cp, fail=True)
    assert queue_stats(cp).json["failed"] == 2


def test_given_failures_older_than_the_retention_when_counted_then_they_are_left_out(
    cp, monkeypatch
):
    from payloadstore_controlplane.runtime import clock

    # Given a job that failed
    cp.enqueue(raw=msgpack.packb(1))
    run_one(cp, fail=True)
    assert queue_stats(cp).json["failed"] == 1
    # When the clock moves past the retention (RESULT_TTL_S)
    later = clock.now() + RESULT_TTL_S + 5
    monkeypatch.setattr(clock, "now", lambda: later)
    # Then the failure is out of the window
    assert queue_stats(cp).json["failed"] == 0


def test_given_jobs_ended_this_minute_when_throughput_is_read_then_the_last_minute_counts_them(cp):
    # Given two jobs that succeeded and one that failed on this queue, one success on another
    for i in range(3):
        cp.enqueue(raw=msgpack.packb([i]))
    run_one(cp, fail=False, result=1)
    run_one(cp, fail=True)
    run_one(cp, fail=False, result=2)
    cp.enqueue(raw=msgpack.packb(9), queue="other")
    got = cp.poll(queues=["other"]).json
    body = {"resultInline": base64.b64encode(msgpack.packb(0)).decode()}
    assert cp.post_result(got["job_id"], body).status == 204

    # When the queue's throughput is read, and the namespace's
    one = throughput(cp, cp.queue)
    every = throughput(cp, role="daemon")

    # Then 60 minutes are answered, the current one last, holding the ends
    assert one.status == 200, one.raw_body
    assert len(one.json["succeeded"]) == len(one.json["failed"]) == 60
    assert one.json["bucket_s"] == 60 and one.json["queue"] == cp.queue
    assert (sum(one.json["succeeded"]), sum(one.json["failed"])) == (2, 1)
    assert (one.json["succeeded"][-1] + one.json["succeeded"][-2]) == 2
    assert (sum(every.json["succeeded"]), sum(every.json["failed"])) == (3, 1)
    assert every.json["queue"] is None


def test_given_a_bad_queue_name_when_throughput_is_asked_then_422(cp):
    assert throughput(cp, "bad name!").status == 422


def test_a_throughput_hash_is_small_and_expires(cp, r):
    # Given a job that ended
    cp.enqueue(raw=msgpack.packb(1))
    run_one(cp, fail=False, result=1)
    # Then its minute's hash is one field, with an expiry of at most two hours
    found = list(r.scan_iter(match=f"ps:{{ns:{cp.ns}}}:tp:*"))
    assert len(found) == 1
    assert r.hlen(found[0]) == 1
    assert 0 < r.pttl(found[0]) <= 2 * keys.THROUGHPUT_SPAN_S * 1000


def test_given_a_queued_inline_job_when_its_payloads_are_read_then_the_bytes_come_back(cp):
    # Given an inline job no daemon took yet (it has no hash: the index answers for it)
    packed = msgpack.packb({"args": [1, "two"], "kwargs": {}})
    job = cp.enqueue(raw=packed).json["job_id"]
    # When its payloads are read
    reply = payloads(cp, job)
    # Then the arguments are the bytes enqueued, and there is no result yet
    assert reply.status == 200, reply.raw_body
    assert reply.json["state"] == "queued"
    assert reply.json["args"]["tier"] == "inline"
    assert base64.b64decode(reply.json["args"]["inline"]) == packed
    assert "result" not in reply.json


def test_given_a_failed_inline_job_when_read_then_its_kept_args_come_back(cp):
    packed = msgpack.packb([42])
    job = cp.enqueue(raw=packed).json["job_id"]
    run_one(cp, fail=True)
    reply = payloads(cp, job).json
    assert reply["state"] == "failed"
    assert base64.b64decode(reply["args"]["inline"]) == packed


def test_given_a_succeeded_inline_job_when_read_then_the_result_is_there_and_args_not_kept(cp):
    job = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    run_one(cp, fail=False, result={"answer": 42})
    reply = payloads(cp, job).json
    assert reply["args"]["gone"] == "not_kept" and "inline" not in reply["args"]
    assert msgpack.unpackb(base64.b64decode(reply["result"]["inline"])) == {"answer": 42}


def test_given_an_s3_job_when_read_then_the_reference_and_a_working_get_url_come_back(cp):
    # Given an S3-tier job whose arguments were uploaded
    data = msgpack.packb(b"x" * 5000)
    ref = upload(cp, data)
    job = cp.enqueue(ref=ref).json["job_id"]
    # When its payloads are read
    reply = payloads(cp, job).json
    # Then the reference is the one enqueued and its URL fetches the bytes from S3
    assert reply["args"]["tier"] == "s3"
    assert reply["args"]["ref"]["key"] == ref["key"]
    assert reply["args"]["size"] == len(data)
    assert httpx.get(reply["args"]["download"]["url"]).content == data


def test_a_daemon_token_or_another_namespace_cannot_read_a_jobs_payloads(cp, other_cp):
    job = cp.enqueue(raw=msgpack.packb(1)).json["job_id"]
    assert payloads(cp, job, role="daemon").status == 403
    assert payloads(other_cp, job).status == 404


def test_given_a_retry_between_a_jobs_end_and_its_settle_then_it_is_not_counted_failed(cp, r):
    from payloadstore_controlplane.handlers._deps import get_deps

    # Given: a job whose end (failed, retries 0) is settled after a retry (retries 1) recorded
    # its requeue (the record operate_requeue.lua writes)
    job = cp.enqueue(raw=msgpack.packb(1)).json["job_id"]
    deps = get_deps()
    r.set(keys.requeued(cp.ns, job), "1 =", px=60_000)
    # When: the end's settle runs
    deps.jobs.settle(
        cp.ns, cp.queue, job, "", state="failed", retries=0, now_ms=int(deps.clock() * 1000)
    )
    # Then: the job is not counted failed (the retry took it out), yet its end is charted
    assert queue_stats(cp).json["failed"] == 0
    assert sum(throughput(cp, cp.queue).json["failed"]) == 1
