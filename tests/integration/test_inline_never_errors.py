"""`inline: never` covers error text and tracebacks (issue 43, defect 8): a failed job's error
message and traceback, and a failure report's detail, are kept in S3 under the namespace's
policy (its KMS key, its retention tag), not in Redis; every answer that carries the error shows
it as before. Real handlers, the session's redis-server, the S3 emulator over HTTP."""

from __future__ import annotations

import secrets
import uuid

import pytest

from payloadstore_controlplane.models.policy import RETENTION_TAG, NamespacePolicy
from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
from tests.support.control_plane import ControlPlane, upload


@pytest.fixture
def never_ns(settings_env) -> ControlPlane:
    """A namespace with `7d` + the stack's KMS key + inline `never`."""
    settings_env(KMS_KEY_ARN=LOCAL_KMS_KEY_ARN)
    return ControlPlane("n" + uuid.uuid4().hex[:10], NamespacePolicy("7d", "stack", "never"))


def _running_job(cp: ControlPlane) -> str:
    job_id = cp.enqueue(ref=upload(cp, b"A" * 300)).json["job_id"]
    assert cp.poll().status == 200
    return job_id


def _in_redis(r, marker: bytes) -> list[str]:
    """Every key of the Redis whose value holds `marker` (strings, lists, hashes, streams,
    sorted sets)."""
    found = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        if kind == "string":
            values = [r.get(key) or b""]
        elif kind == "list":
            values = r.lrange(key, 0, -1)
        elif kind == "hash":
            values = [*r.hgetall(key).values()]
        elif kind == "stream":
            values = [v for _, fields in r.xrange(key) for v in fields.values()]
        elif kind == "zset":
            values = r.zrange(key, 0, -1)
        else:
            values = []
        if any(marker in v for v in values):
            found.append(key.decode())
    return found


def _kept_error_objects(s3_client, bucket: str, job_id: str) -> list[str]:
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix="payloads/")
    return [o["Key"] for o in listed.get("Contents", []) if f"/{job_id}/error-" in o["Key"]]


def test_an_error_posted_in_an_inline_never_namespace_is_kept_in_s3_not_redis(
    never_ns, redis_view, s3_client, payload_bucket
):
    # Given a running job of an inline `never` namespace
    job_id = _running_job(never_ns)
    # When its daemon posts an error whose message carries an argument, and a traceback
    secret = secrets.token_hex(16)
    message = f"bad {secret!r}" + "m" * 16_000
    traceback = f"Traceback (most recent call last):\n  x = {secret!r}\n" + "t" * 60_000
    error = {"type": "ValueError", "message": message, "traceback": traceback}
    posted = never_ns.post_result(job_id, {"error": error})
    assert posted.status == 204, posted.raw_body
    # Then no byte of the message or the traceback is in Redis
    assert _in_redis(redis_view, secret.encode()) == []
    # And the status and the result answer show the error exactly as posted
    status = never_ns.status(job_id).json
    assert status["state"] == "failed"
    assert status["error"] == error
    result = never_ns.result(job_id).json
    assert result["state"] == "failed" and result["error"] == error
    # And the error is one object in S3, under the namespace's KMS key and retention tag
    (key,) = _kept_error_objects(s3_client, payload_bucket, job_id)
    head = s3_client.head_object(Bucket=payload_bucket, Key=key)
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"].endswith(LOCAL_KMS_KEY_ARN.rsplit("/", 1)[-1])
    tags = s3_client.get_object_tagging(Bucket=payload_bucket, Key=key)["TagSet"]
    assert {t["Key"]: t["Value"] for t in tags} == {RETENTION_TAG: "7d"}
    # And a re-sent post is the same post: 204, the same single object, the same error
    assert never_ns.post_result(job_id, {"error": error}).status == 204
    assert _kept_error_objects(s3_client, payload_bucket, job_id) == [key]
    assert never_ns.status(job_id).json["error"] == error
    # And another error for the ended job is refused and changes nothing
    other = {"type": "KeyError", "message": "other"}
    assert never_ns.post_result(job_id, {"error": other}).status == 409
    assert never_ns.result(job_id).json["error"] == error


def test_the_job_listing_shows_an_inline_never_error_without_its_traceback(never_ns):
    # Given a failed job of an inline `never` namespace
    job_id = _running_job(never_ns)
    error = {"type": "RuntimeError", "message": "boom " + secrets.token_hex(8), "traceback": "tb"}
    assert never_ns.post_result(job_id, {"error": error}).status == 204
    # When the client lists the queue's failed jobs
    listed = never_ns.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/queues/{queue}/jobs",
        {"ns": never_ns.ns, "queue": never_ns.queue},
        query={"state": "failed"},
    )
    # Then the job is there with its error's type and message, as for any namespace
    assert listed.status == 200, listed.raw_body
    (job,) = [j for j in listed.json["jobs"] if j["job_id"] == job_id]
    assert job["error"] == {"type": "RuntimeError", "message": error["message"]}


@pytest.mark.parametrize("state", ["payload_corrupt", "payload_lost"])
def test_a_failure_reports_detail_in_an_inline_never_namespace_is_kept_in_s3(
    never_ns, redis_view, state
):
    # Given a running job of an inline `never` namespace (payload_lost ends it: no requeue)
    job_id = _running_job(never_ns)
    secret = secrets.token_hex(16)
    detail = f"could not read {secret}"
    body = {"state": state, "detail": detail}
    if state == "payload_corrupt":
        body["actual_sha256"] = "ab" * 32
    # When its daemon reports the failure with a detail, as often as the policy requeues it
    for _ in range(2):
        reported = never_ns.report(job_id, body)
        assert reported.status == 204, reported.raw_body
        if never_ns.status(job_id).json["state"] == state:
            break
        assert never_ns.poll().status == 200
    # Then the detail is not in Redis, and the job's error shows it
    assert _in_redis(redis_view, secret.encode()) == []
    status = never_ns.status(job_id).json
    assert status["state"] == state
    assert status["error"]["message"] == detail


def test_a_refused_error_post_writes_nothing_to_s3(never_ns, s3_client, payload_bucket):
    # Given a running job of an inline `never` namespace, and a running job of another one
    job_id = _running_job(never_ns)
    lease = never_ns.leases[job_id]
    other = ControlPlane("o" + uuid.uuid4().hex[:10], NamespacePolicy("7d", "stack", "never"))
    theirs = _running_job(other)
    error = {"type": "ValueError", "message": "bad " + secrets.token_hex(8), "traceback": "tb"}
    # When this namespace's daemon posts an error for the other namespace's job, for a job
    # that does not exist, and for its own job under a lease that is not the job's
    refused = [
        never_ns.post_result(theirs, {"error": error, "lease": other.leases[theirs]}),
        never_ns.post_result("01" + theirs[2:-4] + "ZZZZ", {"error": error, "lease": lease}),
        never_ns.post_result(job_id, {"error": error, "lease": "0" * len(lease)}),
    ]
    # Then each is refused, and no error object was written for any of them
    assert [r.status for r in refused] == [404, 404, 409], [r.raw_body for r in refused]
    for job in (theirs, "01" + theirs[2:-4] + "ZZZZ", job_id):
        assert _kept_error_objects(s3_client, payload_bucket, job) == [], job
    # And once the job ended with its error, another error for it is refused and leaves the
    # one object it ended with
    assert never_ns.post_result(job_id, {"error": error}).status == 204
    kept = _kept_error_objects(s3_client, payload_bucket, job_id)
    assert len(kept) == 1
    again = never_ns.post_result(job_id, {"error": {**error, "message": "another"}})
    assert again.status == 409, again.raw_body
    assert _kept_error_objects(s3_client, payload_bucket, job_id) == kept


def test_a_refused_failure_report_writes_nothing_to_s3(never_ns, s3_client, payload_bucket):
    # Given a running job of an inline `never` namespace
    job_id = _running_job(never_ns)
    lease = never_ns.leases[job_id]
    body = {"state": "payload_corrupt", "detail": "read " + secrets.token_hex(8)}
    # When a daemon reports its failure under a lease that is not the job's
    stale = never_ns.report(job_id, {**body, "lease": "0" * len(lease)})
    # Then it is refused, and no error object is written
    assert stale.status == 409, stale.raw_body
    assert _kept_error_objects(s3_client, payload_bucket, job_id) == []
    # And once the job ended with its report, another report for it is refused and leaves the
    # one object it ended with
    assert never_ns.report(job_id, body).status == 204
    kept = _kept_error_objects(s3_client, payload_bucket, job_id)
    assert len(kept) == 1
    again = never_ns.report(job_id, {**body, "detail": "another"})
    assert again.status == 409, again.raw_body
    assert _kept_error_objects(s3_client, payload_bucket, job_id) == kept
    # And the same report sent again is answered as before, with the same error
    assert never_ns.report(job_id, body).status == 204
    assert never_ns.status(job_id).json["error"]["message"] == body["detail"]
