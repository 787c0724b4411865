"""Daemon side: poll, redelivery after the visibility timeout, result post, failure reports."""

from __future__ import annotations

import base64
import time

import msgpack

from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.records import ResultIssuedBefore
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from tests.support.control_plane import upload


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_poll_returns_204_when_idle_and_the_job_when_queued(cp):
    assert cp.poll().status == 204
    job = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    got = cp.poll()
    assert got.status == 200
    assert got.json["job_id"] == job and got.json["attempt"] == 1
    assert got.json["queue"] == cp.queue and got.json["namespace"] == cp.ns
    assert cp.status(job).json["state"] == "running"
    assert cp.poll().status == 204  # one delivery per job


def test_poll_blocks_up_to_wait_s(cp):
    started = time.monotonic()
    assert cp.poll(wait_s=1).status == 204
    assert 0.9 <= time.monotonic() - started < 3


def test_poll_reads_several_queues_of_the_namespace(cp):
    job = cp.enqueue(raw=b"\x01", queue="second").json["job_id"]
    got = cp.poll(queues=[cp.queue, "second"])
    assert got.json["job_id"] == job and got.json["queue"] == "second"


def test_poll_other_namespace_is_403_and_bad_body_422(cp):
    r = cp.call(
        "daemon",
        "POST",
        "/v1/daemon/poll",
        role="daemon",
        body={"namespace": "someone-else", "queues": ["q"], "wait_s": 0, "daemon_id": "d"},
    )
    assert r.status == 403
    r = cp.call(
        "daemon",
        "POST",
        "/v1/daemon/poll",
        role="daemon",
        body={"namespace": cp.ns, "queues": [], "wait_s": 0, "daemon_id": "d"},
    )
    assert r.status == 422
    assert (
        cp.call(
            "daemon",
            "POST",
            "/v1/daemon/poll",
            role="client",
            body={"namespace": cp.ns, "queues": ["q"], "wait_s": 0, "daemon_id": "d"},
        ).status
        == 403
    )


def poll_many(cp, max_jobs, wait_s=0, daemon_id="d1"):
    body = {"namespace": cp.ns, "queues": [cp.queue], "wait_s": wait_s, "daemon_id": daemon_id}
    if max_jobs is not None:
        body["max_jobs"] = max_jobs
    return cp.call("daemon", "POST", "/v1/daemon/poll", role="daemon", body=body)


def test_poll_with_max_jobs_answers_up_to_that_many_each_with_its_own_lease(cp):
    assert poll_many(cp, 4).status == 204
    jobs = [cp.enqueue(raw=msgpack.packb([i])).json["job_id"] for i in range(6)]
    got = poll_many(cp, 4)
    assert got.status == 200 and set(got.json) == {"jobs"}
    first = got.json["jobs"]
    assert [d["job_id"] for d in first] == jobs[:4]
    assert len({d["lease"] for d in first}) == 4
    assert all(d["attempt"] == 1 and d["queue"] == cp.queue for d in first)
    assert all(d["payloadInline"] and d["lease_expires_in_s"] > 0 for d in first)
    rest = poll_many(cp, 16).json["jobs"]
    assert [d["job_id"] for d in rest] == jobs[4:]
    assert poll_many(cp, 16).status == 204
    # Each lease is its own: a result with one job's lease is accepted, with another's refused.
    for d in first + rest:
        assert cp.status(d["job_id"]).json["state"] == "running"
    posted = cp.post_result(
        first[0]["job_id"], {"resultInline": b64(b"ok"), "lease": first[0]["lease"]}
    )
    assert posted.status == 204
    wrong = cp.post_result(
        first[1]["job_id"], {"resultInline": b64(b"x"), "lease": first[2]["lease"]}
    )
    assert wrong.status == 409


def test_poll_with_max_jobs_blocks_only_while_nothing_is_found(cp):
    cp.enqueue(raw=b"\x01")
    started = time.monotonic()
    got = poll_many(cp, 8, wait_s=5)
    assert time.monotonic() - started < 2
    assert len(got.json["jobs"]) == 1


def test_poll_without_max_jobs_answers_one_delivery_as_before(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.enqueue(raw=b"\x02")
    got = poll_many(cp, None)
    assert got.status == 200 and "jobs" not in got.json
    assert got.json["job_id"] == job and got.json["lease"]


def test_poll_max_jobs_out_of_1_to_16_is_422(cp):
    for bad in (0, 17, -1, "many"):
        assert poll_many(cp, bad).status == 422, bad
    assert poll_many(cp, 1).status == 204
    assert poll_many(cp, 16).status == 204


def test_job_not_acknowledged_is_redelivered_after_visibility_timeout(cp, settings_env):
    # Given a 1 s visibility timeout and a job taken by daemon A that then goes silent
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    assert cp.poll(daemon_id="a").json["attempt"] == 1
    # When daemon B polls before and after the timeout
    assert cp.poll(daemon_id="b").status == 204
    time.sleep(1.2)
    again = cp.poll(daemon_id="b")
    # Then B gets the same job with attempt 2, and the status shows it
    assert again.status == 200
    assert again.json["job_id"] == job and again.json["attempt"] == 2
    assert cp.status(job).json["attempts"] == 2
    # And once B posts the result, nobody gets it again
    assert cp.post_result(job, {"resultInline": b64(b"\x02")}).status == 204
    time.sleep(1.2)
    assert cp.poll(daemon_id="c").status == 204


def test_result_inline_completes_job_acks_and_frees_the_entry(cp, redis_view):
    job = cp.enqueue(raw=b"\x01" * 1000).json["job_id"]
    cp.poll()
    r = cp.post_result(job, {"resultInline": b64(msgpack.packb("done"))})
    assert r.status == 204 and r.raw_body == ""
    result = cp.result(job)
    assert result.status == 200 and result.json["state"] == "succeeded"
    assert msgpack.unpackb(base64.b64decode(result.json["resultInline"])) == "done"
    # The queue entry (and its inline bytes) is gone from Redis and from the pending list
    client = redis_view
    assert client.xlen(keys.queue(cp.ns, cp.queue)) == 0
    assert client.xpending(keys.queue(cp.ns, cp.queue), keys.CONSUMER_GROUP)["pending"] == 0


def test_same_result_twice_is_noop_and_different_is_409(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    body = {"resultInline": b64(b"\x05")}
    assert cp.post_result(job, body).status == 204
    assert cp.post_result(job, body).status == 204
    assert cp.post_result(job, {"resultInline": b64(b"\x06")}).status == 409
    assert cp.post_result(job, {"error": {"type": "ValueError", "message": "late"}}).status == 409


def test_result_for_queued_job_is_409_and_unknown_is_404(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    body = {"resultInline": b64(b"\x05"), "lease": "never-delivered"}
    assert cp.post_result(job, body).status == 409
    assert cp.post_result("01KB7Z6Q3N4V8W2X5Y9Z0A1B2C", body).status == 404


def test_result_for_a_job_of_another_namespace_is_404_even_with_its_lease(cp, other_cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    for body in ({"resultInline": b64(b"\x05")}, {"error": {"type": "E", "message": "m"}}):
        assert other_cp.post_result(job, {**body, "lease": lease}).status == 404
    assert cp.status(job).json["state"] == "running"
    assert cp.post_result(job, {"resultInline": b64(b"\x05")}).status == 204


def test_result_needs_exactly_one_form(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    assert cp.post_result(job, {}).status == 422
    both = {"resultInline": b64(b"1"), "error": {"type": "E", "message": "m"}}
    assert cp.post_result(job, both).status == 422
    assert cp.status(job).json["state"] == "running"


def test_result_ref_is_verified_and_stored(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    big = b"\x07" * 400_000
    ref = upload(cp, big, role="daemon", job_id=job)
    assert ref["key"].endswith(f"/{job}/result")
    assert cp.post_result(job, {"resultRef": ref}).status == 204
    got = cp.result(job).json
    assert got["state"] == "succeeded" and got["resultRef"]["key"] == ref["key"]
    assert cp.status(job).json["resultRef"]["size"] == 400_000


def test_result_ref_refusals(cp, other_cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    # not uploaded yet
    r = cp.presign_put(10, role="daemon", job_id=job)
    ref = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": 10}
    out = cp.post_result(job, {"resultRef": ref})
    assert out.status == 409 and out.error["reason"] == "not_uploaded"
    # another job's args key is not this job's result key
    other_ref = upload(cp, b"args of another job")
    assert cp.post_result(job, {"resultRef": other_ref}).status == 409
    assert cp.status(job).json["state"] == "running"


def test_daemon_presign_result_only_for_running_job(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    # still queued (any lease: none was handed out yet)
    assert cp.presign_put(10, role="daemon", job_id=job, lease="not-delivered").status == 409
    assert cp.presign_put(10, role="daemon").status == 422  # no job id (nor lease)
    cp.poll()
    assert cp.presign_put(10, role="daemon", job_id=job).status == 200


def test_presign_result_of_a_job_gone_after_a_raced_first_presign_is_404(cp, monkeypatch):
    # Given a running job
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    # When this delivery's result key was recorded already, and the job's hash went before the
    # re-presign read it back
    reads = []

    def gone_on_second_read(self, job_id, **kwargs):
        reads.append(job_id)

    monkeypatch.setattr(RedisJobStore, "create_result_issue", lambda *a, **kw: ResultIssuedBefore())
    monkeypatch.setattr(RedisJobStore, "get_job", gone_on_second_read)
    r = cp.presign_put(10, role="daemon", job_id=job)
    # Then the job is not found, as when the script itself finds no job
    assert len(reads) == 1
    assert r.status == 404 and r.error["message"] == f"job {job} not found"


def test_error_result_fails_the_job_with_remote_traceback(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    err = {
        "type": "ZeroDivisionError",
        "message": "division by zero",
        "traceback": "Traceback ...\n",
    }
    assert cp.post_result(job, {"error": err}).status == 204
    got = cp.result(job)
    assert got.status == 200
    assert got.json["state"] == "failed"
    assert got.json["error"]["type"] == "ZeroDivisionError"
    assert got.json["error"]["traceback"].startswith("Traceback")


def test_payload_lost_requeues_once_then_fails(cp, s3_client):
    # Given an S3-tier job whose object has disappeared
    ref = upload(cp, b"soon gone")
    job = cp.enqueue(ref=ref).json["job_id"]
    s3_client.delete_object(Bucket=ref["bucket"], Key=ref["key"])
    assert cp.poll().json["attempt"] == 1
    # When the daemon reports payload_lost the first time
    assert cp.report(job, {"state": "payload_lost", "detail": "GET 404"}).status == 204
    # Then the job is requeued and delivered again with attempt 2
    assert cp.status(job).json["state"] == "queued"
    second = cp.poll()
    assert second.json["job_id"] == job and second.json["attempt"] == 2
    assert second.json["payloadRef"]["key"] == ref["key"]
    # And the second report fails it for good
    assert cp.report(job, {"state": "payload_lost", "detail": "GET 404 again"}).status == 204
    final = cp.result(job).json
    assert final["state"] == "payload_lost" and final["error"]["type"] == "PayloadLost"
    assert cp.poll().status == 204


def test_payload_lost_policy_fail_fails_at_once(cp, settings_env):
    settings_env(PAYLOAD_LOST_POLICY="fail")
    job = cp.enqueue(ref=upload(cp, b"x")).json["job_id"]
    cp.poll()
    assert cp.report(job, {"state": "payload_lost"}).status == 204
    assert cp.status(job).json["state"] == "payload_lost"


def test_payload_corrupt_is_terminal_keeps_both_digests_and_is_never_redelivered(
    cp, settings_env, capsys
):
    settings_env(VISIBILITY_TIMEOUT_S="1")
    ref = upload(cp, b"original")
    job = cp.enqueue(ref=ref).json["job_id"]
    cp.poll()
    actual = "0" * 64
    r = cp.report(
        job, {"state": "payload_corrupt", "detail": "sha256 mismatch", "actual_sha256": actual}
    )
    assert r.status == 204
    status = cp.status(job).json
    assert status["state"] == "payload_corrupt"
    assert status["error"]["expected_sha256"] == ref["sha256"]
    assert status["error"]["actual_sha256"] == actual
    # the metric the alarm watches was emitted as EMF
    assert '"PayloadCorrupt"' in capsys.readouterr().out
    time.sleep(1.2)
    assert cp.poll().status == 204
    assert cp.result(job).json["state"] == "payload_corrupt"


def test_failure_report_validation(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    assert cp.report(job, {"state": "on_fire"}).status == 422
    assert cp.report(job, {"state": "payload_corrupt", "actual_sha256": "zz"}).status == 422
    unknown = {"state": "payload_lost", "lease": "x"}
    assert cp.report("01KB7Z6Q3N4V8W2X5Y9Z0A1B2C", unknown).status == 404
