"""Operating the queues on the real handlers, a real redis-server and the S3 emulator: list a
queue's jobs by state, retry a failed or cancelled job, redrive a queue, purge it."""

from __future__ import annotations

import base64
import time

import msgpack
import pytest

from tests.support.control_plane import cancel, upload


def direct_redis(redis_target):
    """A client of the Redis the handlers use (a cluster's, in cluster mode)."""
    import redis
    from redis.cluster import RedisCluster

    if redis_target.get("REDIS_CLUSTER") == "true":
        return RedisCluster.from_url(redis_target["REDIS_URL"])
    return redis.Redis.from_url(redis_target["REDIS_URL"])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def list_jobs(cp, state=None, limit=None, cursor=None, queue=None, namespace=""):
    query = {
        k: str(v)
        for k, v in {"state": state, "limit": limit, "cursor": cursor}.items()
        if v is not None
    }
    return cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/queues/{queue}/jobs",
        {"ns": namespace or cp.ns, "queue": queue or cp.queue},
        query=query or None,
        namespace="" if not namespace else cp.ns,
    )


def retry(cp, job_id, namespace=""):
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/retry",
        {"ns": namespace or cp.ns, "job_id": job_id},
    )


def redrive(cp, body=None, queue=None):
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/redrive",
        {"ns": cp.ns, "queue": queue or cp.queue},
        body=body,
    )


def purge(cp, queue=None):
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/purge",
        {"ns": cp.ns, "queue": queue or cp.queue},
    )


def fail(cp, job_id, kind="ValueError", message="bad input", traceback="Traceback: line 1"):
    """The daemon holding the job's delivery posts an error."""
    body = {"error": {"type": kind, "message": message, "traceback": traceback}}
    reply = cp.post_result(job_id, body)
    assert reply.status == 204, reply.raw_body


def succeed(cp, job_id, value=0):
    reply = cp.post_result(job_id, {"resultInline": b64(msgpack.packb(value))})
    assert reply.status == 204, reply.raw_body


def take(cp, job_id):
    """Poll once; the delivery must be `job_id`'s."""
    got = cp.poll()
    assert got.status == 200, got.raw_body
    assert got.json["job_id"] == job_id
    return got.json


def ids(reply) -> list[str]:
    assert reply.status == 200, reply.raw_body
    return [j["job_id"] for j in reply.json["jobs"]]


# -- listing -----------------------------------------------------------------------------------


def test_each_state_lists_its_jobs_newest_first(cp):
    # Given five jobs: one will succeed, one fail, one be cancelled, one run, one wait
    jobs = [cp.enqueue(raw=msgpack.packb(i)).json["job_id"] for i in range(5)]
    ok, bad, running, waiting, dropped = jobs
    take(cp, ok)
    succeed(cp, ok)
    take(cp, bad)
    fail(cp, bad)
    take(cp, running)
    assert cancel(cp, dropped).status == 200

    # When each state is listed
    # Then each job is where it is, with what an operator reads in a list
    assert ids(list_jobs(cp, "succeeded")) == [ok]
    failed = list_jobs(cp, "failed").json
    assert [j["job_id"] for j in failed["jobs"]] == [bad]
    [row] = failed["jobs"]
    assert row["state"] == "failed" and row["attempts"] == 1 and row["tier"] == "inline"
    assert row["error"] == {"type": "ValueError", "message": "bad input"}  # no traceback here
    assert row["args_size"] == len(msgpack.packb(1))
    assert row["created_at"] <= row["updated_at"]
    assert failed["next_cursor"] is None
    assert ids(list_jobs(cp, "running")) == [running]
    assert ids(list_jobs(cp, "queued")) == [waiting]
    assert ids(list_jobs(cp, "cancelled")) == [dropped]
    # and the job's own status has the traceback
    assert cp.status(bad).json["error"]["traceback"] == "Traceback: line 1"


def test_queued_jobs_page_with_a_cursor_newest_first(cp):
    # Given seven queued jobs
    jobs = [cp.enqueue(raw=msgpack.packb(i)).json["job_id"] for i in range(7)]
    # When they are listed three at a time, following next_cursor
    seen, cursor, pages = [], None, 0
    while True:
        page = list_jobs(cp, "queued", limit=3, cursor=cursor)
        seen += ids(page)
        pages += 1
        cursor = page.json["next_cursor"]
        if cursor is None:
            break
    # Then every job comes once, newest first
    assert seen == jobs[::-1]
    assert pages >= 3


def test_failed_jobs_page_with_a_cursor(cp):
    # Given four failed jobs
    jobs = [cp.enqueue(raw=msgpack.packb(i)).json["job_id"] for i in range(4)]
    for job in jobs:
        take(cp, job)
        fail(cp, job)
    # When listed two at a time
    first = list_jobs(cp, "failed", limit=2)
    second = list_jobs(cp, "failed", limit=2, cursor=first.json["next_cursor"])
    # Then the pages hold them newest first, and the last one says there is no more
    assert ids(first) + ids(second) == jobs[::-1]
    rest = second.json["next_cursor"]
    assert rest is None or ids(list_jobs(cp, "failed", limit=2, cursor=rest)) == []


def test_failed_lists_every_failed_state(cp, settings_env):
    # Given a job that failed, one whose payload was corrupt, one past its delivery cap
    settings_env(MAX_DELIVERIES="1", VISIBILITY_TIMEOUT_S="1")
    failed = cp.enqueue(raw=b"\x01").json["job_id"]
    take(cp, failed)
    fail(cp, failed)
    corrupt = cp.enqueue(raw=b"\x02").json["job_id"]
    take(cp, corrupt)
    assert cp.report(corrupt, {"state": "payload_corrupt", "detail": "x"}).status == 204
    capped = cp.enqueue(raw=b"\x03").json["job_id"]
    take(cp, capped)
    time.sleep(1.2)
    assert cp.poll().status == 204  # the redelivery past the cap ends it failed
    # When the failed jobs are listed
    rows = list_jobs(cp, "failed").json["jobs"]
    # Then all three are there, with their states and error types
    by_id = {r["job_id"]: r for r in rows}
    assert set(by_id) == {failed, corrupt, capped}
    assert by_id[corrupt]["state"] == "payload_corrupt"
    assert by_id[capped]["error"]["type"] == "DeliveryLimitExceeded"


@pytest.mark.parametrize(
    "query",
    [{"limit": 101}, {"limit": 0}, {"state": "sleeping"}, {"cursor": "not-a-cursor"}],
)
def test_bad_listing_parameters_are_422(cp, query):
    # Given a queue with a job
    cp.enqueue(raw=b"\x01")
    # When it is listed with a bad parameter
    reply = list_jobs(cp, **query)
    # Then the answer is 422, naming the problem
    assert reply.status == 422, reply.raw_body
    assert reply.error["code"] == "invalid_request"


def test_a_queue_never_used_lists_nothing(cp):
    reply = list_jobs(cp, "failed", queue="never-used")
    assert reply.status == 200
    assert reply.json == {"jobs": [], "next_cursor": None}


# -- retry -------------------------------------------------------------------------------------


def test_a_failed_inline_job_is_retried_with_its_arguments_and_then_succeeds(cp):
    # Given an inline job that failed
    args = msgpack.packb({"args": [41], "kwargs": {}})
    job = cp.enqueue(raw=args).json["job_id"]
    take(cp, job)
    fail(cp, job)
    # When it is retried
    reply = retry(cp, job)
    # Then it is queued again with the same id, its next delivery the second attempt
    assert reply.status == 200, reply.raw_body
    assert reply.json == {"job_id": job, "state": "queued", "attempt": 2, "retries": 1}
    assert cp.status(job).json["state"] == "queued"
    assert ids(list_jobs(cp, "failed")) == []
    assert ids(list_jobs(cp, "queued")) == [job]
    # and a daemon gets the same arguments, as attempt 2
    delivery = take(cp, job)
    assert base64.b64decode(delivery["payloadInline"]) == args
    assert delivery["attempt"] == 2
    # When it succeeds this time
    succeed(cp, job, 42)
    # Then its result is the new one, and it lists as succeeded (not failed)
    result = cp.result(job).json
    assert result["state"] == "succeeded"
    assert msgpack.unpackb(base64.b64decode(result["resultInline"])) == 42
    assert ids(list_jobs(cp, "succeeded")) == [job]
    assert ids(list_jobs(cp, "failed")) == []
    assert cp.status(job).json["retries"] == 1


def test_a_failed_s3_job_is_retried_and_then_succeeds(cp):
    # Given an S3-tier job that failed
    data = b"\x07" * 300_000
    ref = upload(cp, data)
    job = cp.enqueue(ref=ref).json["job_id"]
    take(cp, job)
    fail(cp, job)
    # When it is retried
    reply = retry(cp, job)
    assert reply.status == 200, reply.raw_body
    # Then a daemon gets its reference again, with a download URL
    delivery = take(cp, job)
    assert delivery["payloadRef"]["key"] == ref["key"]
    assert delivery["download"]["url"]
    # and when it succeeds, the job is succeeded
    succeed(cp, job)
    assert cp.result(job).json["state"] == "succeeded"


def test_a_job_cancelled_while_queued_is_retried(cp):
    # Given an inline job cancelled before any daemon saw it
    job = cp.enqueue(raw=b"\x05").json["job_id"]
    assert cancel(cp, job).status == 200
    # When it is retried
    assert retry(cp, job).status == 200
    # Then a daemon runs it, with its bytes, once
    delivery = take(cp, job)
    assert base64.b64decode(delivery["payloadInline"]) == b"\x05"
    succeed(cp, job)
    assert cp.poll().status == 204
    assert cp.result(job).json["state"] == "succeeded"


def test_a_retried_job_cancelled_while_queued_is_retried_again(cp):
    # Given an inline job that failed, was retried, and was cancelled before it ran again
    job = cp.enqueue(raw=b"\x08").json["job_id"]
    take(cp, job)
    fail(cp, job)
    assert retry(cp, job).status == 200
    assert cancel(cp, job).status == 200
    # When it is retried once more
    reply = retry(cp, job)
    # Then it runs, with its bytes, as its second attempt
    assert reply.status == 200, reply.raw_body
    assert reply.json["retries"] == 2
    delivery = take(cp, job)
    assert (base64.b64decode(delivery["payloadInline"]), delivery["attempt"]) == (b"\x08", 2)
    succeed(cp, job)
    assert cp.poll().status == 204


def test_a_purge_after_a_cancel_keeps_the_cancelled_jobs_arguments(cp):
    # Given an inline job cancelled before any delivery, its entry still in the queue
    job = cp.enqueue(raw=b"\x06").json["job_id"]
    assert cancel(cp, job).status == 200
    # When the queue is purged, the entry goes (nothing queued to cancel)
    assert purge(cp).json == {"cancelled": 0, "remaining": 0}
    # Then the job can still be retried, and runs with its bytes
    assert retry(cp, job).status == 200
    assert base64.b64decode(take(cp, job)["payloadInline"]) == b"\x06"


def test_the_delivery_cap_counts_again_after_a_retry(cp, settings_env):
    # Given a job that ended failed at MAX_DELIVERIES=1 (its daemon died)
    settings_env(MAX_DELIVERIES="1", VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x09").json["job_id"]
    take(cp, job)
    time.sleep(1.2)
    assert cp.poll().status == 204
    assert cp.status(job).json["error"]["type"] == "DeliveryLimitExceeded"
    # When it is retried
    assert retry(cp, job).status == 200
    # Then it is delivered once more (attempt 2), and succeeds
    assert take(cp, job)["attempt"] == 2
    succeed(cp, job)
    assert cp.status(job).json["state"] == "succeeded"


def test_a_retry_is_refused_with_its_reason(cp, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given a succeeded, a running, a queued job, and a failed S3 job past the retention
    old = cp.enqueue(ref=upload(cp, b"\x04" * 300_000)).json["job_id"]
    take(cp, old)
    fail(cp, old)
    done = cp.enqueue(raw=b"\x01").json["job_id"]
    take(cp, done)
    succeed(cp, done)
    running = cp.enqueue(raw=b"\x02").json["job_id"]
    take(cp, running)
    queued = cp.enqueue(raw=b"\x03").json["job_id"]
    # When each is retried
    # Then each is 409 not_retryable, with the reason, and nothing changes
    for job, reason in ((done, "succeeded"), (running, "running"), (queued, "queued")):
        reply = retry(cp, job)
        assert reply.status == 409, reply.raw_body
        assert (reply.error["code"], reply.error["reason"]) == ("not_retryable", reason)
        assert cp.status(job).json["state"] == reason
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 172_800 + 60)
    reply = retry(cp, old)
    assert reply.status == 409
    assert (reply.error["code"], reply.error["reason"]) == ("not_retryable", "arguments_expired")
    monkeypatch.setattr(clock, "now", lambda: real_now)
    assert cp.status(old).json["state"] == "failed"


def test_an_inline_job_whose_kept_arguments_expired_is_not_retried(cp, redis_target):
    from payloadstore_controlplane.store import keys

    # Given a failed inline job whose kept arguments are gone (their TTL ran out)
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    take(cp, job)
    fail(cp, job)
    client = direct_redis(redis_target)
    assert client.delete(keys.kept_args(cp.ns, job)) == 1
    # When it is retried
    reply = retry(cp, job)
    # Then it is refused: its arguments are past the retention
    assert reply.status == 409 and reply.error["reason"] == "arguments_expired"


def test_another_namespaces_job_is_not_found_and_its_path_forbidden(cp, other_cp):
    # Given a failed job of another namespace
    job = other_cp.enqueue(raw=b"\x01").json["job_id"]
    take(other_cp, job)
    fail(other_cp, job)
    # When this namespace retries it by id
    # Then it does not exist here
    assert retry(cp, job).status == 404
    # and this namespace's token on the other namespace's path is forbidden
    assert retry(cp, job, namespace=other_cp.ns).status == 403
    assert list_jobs(cp, "failed", namespace=other_cp.ns).status == 403
    # and the job stays failed
    assert other_cp.status(job).json["state"] == "failed"


def test_the_routes_are_for_client_tokens_and_take_only_valid_queue_names(cp):
    # A daemon token is refused on every route of this kind
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    for method, resource, params in (
        ("GET", "/v1/namespaces/{ns}/queues/{queue}/jobs", {"queue": cp.queue}),
        ("POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"job_id": job}),
        ("POST", "/v1/namespaces/{ns}/queues/{queue}/redrive", {"queue": cp.queue}),
        ("POST", "/v1/namespaces/{ns}/queues/{queue}/purge", {"queue": cp.queue}),
    ):
        reply = cp.call("jobs", method, resource, {"ns": cp.ns, **params}, role="daemon")
        assert reply.status == 403, (resource, reply.raw_body)
    # and a queue name the API does not take is 422, with nothing purged
    assert purge(cp, queue="bad name!").status == 422
    assert list_jobs(cp, queue="x" * 64).status == 422
    assert cp.status(job).json["state"] == "queued"


def test_an_unknown_job_is_404(cp):
    assert retry(cp, "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C").status == 404


# -- redrive and purge -------------------------------------------------------------------------


def test_redrive_retries_up_to_the_limit_of_failed_jobs(cp):
    # Given three failed jobs and one succeeded
    jobs = [cp.enqueue(raw=msgpack.packb(i)).json["job_id"] for i in range(4)]
    for job in jobs[:3]:
        take(cp, job)
        fail(cp, job)
    take(cp, jobs[3])
    succeed(cp, jobs[3])
    # When the queue is redriven with a limit of two
    first = redrive(cp, {"limit": 2})
    # Then two are retried (the newest), one is left failed
    assert first.status == 200, first.raw_body
    assert first.json == {"retried": 2, "skipped": 0}
    assert ids(list_jobs(cp, "failed")) == [jobs[0]]
    assert set(ids(list_jobs(cp, "queued"))) == {jobs[1], jobs[2]}
    # When redriven again without a body
    assert redrive(cp).json == {"retried": 1, "skipped": 0}
    # Then nothing failed is left, and the succeeded job stayed succeeded
    assert ids(list_jobs(cp, "failed")) == []
    assert cp.status(jobs[3]).json["state"] == "succeeded"


def test_redrive_by_state_leaves_the_other_states(cp):
    # Given a failed job and a cancelled one
    failed = cp.enqueue(raw=b"\x01").json["job_id"]
    take(cp, failed)
    fail(cp, failed)
    cancelled = cp.enqueue(raw=b"\x02").json["job_id"]
    cancel(cp, cancelled)
    # When only cancelled jobs are redriven
    reply = redrive(cp, {"states": ["cancelled"]})
    # Then only the cancelled one is queued again
    assert reply.json == {"retried": 1, "skipped": 0}
    assert cp.status(cancelled).json["state"] == "queued"
    assert cp.status(failed).json["state"] == "failed"


@pytest.mark.parametrize(
    "body", [{"states": ["succeeded"]}, {"limit": 0}, {"limit": 1001}, {"states": []}]
)
def test_a_bad_redrive_body_is_422(cp, body):
    assert redrive(cp, body).status == 422


def test_purge_cancels_every_queued_job_and_leaves_the_running_one(cp):
    # Given three queued jobs (inline and S3) and one running
    running = cp.enqueue(raw=b"\x00").json["job_id"]
    take(cp, running)
    queued = [cp.enqueue(raw=msgpack.packb(i)).json["job_id"] for i in range(2)]
    queued.append(cp.enqueue(ref=upload(cp, b"\x01" * 300_000)).json["job_id"])
    # When the queue is purged
    reply = purge(cp)
    # Then the three are cancelled, none is left queued, the running one runs on
    assert reply.status == 200, reply.raw_body
    assert reply.json == {"cancelled": 3, "remaining": 0}
    for job in queued:
        assert cp.result(job).json["state"] == "cancelled"
    assert set(ids(list_jobs(cp, "cancelled"))) == set(queued)
    assert ids(list_jobs(cp, "queued")) == []
    assert cp.status(running).json["state"] == "running"
    assert cp.poll().status == 204
    # When purged again, nothing is left to cancel
    assert purge(cp).json == {"cancelled": 0, "remaining": 0}
    # and a purged job can still be retried
    assert retry(cp, queued[0]).status == 200
    assert take(cp, queued[0])["attempt"] == 1


# -- memory ------------------------------------------------------------------------------------


def test_the_index_of_ended_jobs_costs_under_64_bytes_a_job_and_expires(cp, redis_target):
    from payloadstore_controlplane.store import keys

    # Given 200 jobs that failed
    for i in range(200):
        job = cp.enqueue(raw=msgpack.packb(i)).json["job_id"]
        take(cp, job)
        fail(cp, job)
    # Then the queue's failed-jobs index holds one entry each, in under 64 B a job
    client = direct_redis(redis_target)
    key = keys.ended(cp.ns, cp.queue, "failed")
    assert client.xlen(key) == 200
    assert client.memory_usage(key, samples=0) / 200 <= 64
    # and it expires with the jobs (RESULT_TTL_S)
    assert 0 < client.ttl(key) <= 172_800
