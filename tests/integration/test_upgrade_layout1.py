"""Upgrade in place: jobs written by the previous Redis layout (layout 1: long field names, issue
records, references in stream entries, results in the job hash, idempotency strings) finish
correctly under this code. Each test writes the keys exactly as the old code did, then drives
them through the new handlers."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest
import redis

from payloadstore_controlplane.logic.payload_keys import key_for
from payloadstore_controlplane.models.domain import PayloadKind, new_job_id
from payloadstore_controlplane.store import keys
from tests.support.control_plane import put_presigned, sha256_hex, upload

TTL = 172_800


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class Layout1:
    """Writes what the layout-1 control plane wrote, key by key and field by field."""

    def __init__(self, r: redis.Redis, ns: str, queue: str, bucket: str):
        self.r, self.ns, self.queue, self.bucket = r, ns, queue, bucket
        self.stream = keys.queue(ns, queue)

    def issue(self, job_id: str, kind: str, size: int, sha: str | None) -> dict:
        now = time.time()
        key = key_for(job_id, PayloadKind(kind))
        self.r.hset(
            keys.issue(job_id, kind),
            mapping={
                "namespace": self.ns,
                "job_id": job_id,
                "kind": kind,
                "key": key,
                "bucket": self.bucket,
                "size": size,
                "content_type": "application/msgpack",
                "sha256": sha or "",
                "presigns": 1,
                "issued_at": repr(now),
            },
        )
        self.r.expire(keys.issue(job_id, kind), TTL)
        ref = {"kind": "s3", "bucket": self.bucket, "key": key, "size": size}
        ref["contentType"] = "application/msgpack"
        if sha:
            ref["sha256"] = sha
        return ref

    def job(self, job_id: str, *, tier: str, size: int, ref: dict | None = None, **extra) -> str:
        now = time.time()
        fields = {
            "namespace": self.ns,
            "queue": self.queue,
            "state": "queued",
            "tier": tier,
            "attempts": 0,
            "payload_size": size,
            "created_at": repr(now),
            "updated_at": repr(now),
            "enqueuing_at": int(now * 1000),
        }
        if ref is not None:
            fields["payload_ref"] = dumps(ref)
        fields.update(extra)
        key = keys.job(job_id)
        self.r.hset(key, mapping=fields)
        self.r.expire(key, TTL)
        return key

    def entry(self, job_id: str, *, inline: bytes | None = None, ref: dict | None = None) -> str:
        fields = {"job": job_id}
        if inline is not None:
            fields["inline"] = inline
        if ref is not None:
            fields["ref"] = dumps(ref)
        stream_id = self.r.xadd(self.stream, fields).decode()
        self.r.hset(keys.job(job_id), "stream_id", stream_id)
        return stream_id

    def deliver(self, job_id: str, consumer: str = "d-old") -> None:
        """What an old poll did: the entry pending for a consumer, the job running."""
        try:
            self.r.xgroup_create(self.stream, keys.CONSUMER_GROUP, id="0", mkstream=True)
        except redis.ResponseError:
            pass
        self.r.xreadgroup(keys.CONSUMER_GROUP, consumer, {self.stream: ">"}, count=1)
        self.r.hset(
            keys.job(job_id),
            mapping={"state": "running", "daemon_id": consumer, "started_at": repr(time.time())},
        )
        self.r.hincrby(keys.job(job_id), "attempts", 1)

    def finish_inline(self, job_id: str, result: bytes) -> None:
        now = repr(time.time())
        key = keys.job(job_id)
        self.r.hset(
            key,
            mapping={
                "state": "succeeded",
                "result_digest": "inline:" + hashlib.sha256(result).hexdigest(),
                "finished_at": now,
                "updated_at": now,
                "result_kind": "inline",
                "result_inline": result,
                "result_size": len(result),
            },
        )
        self.r.rpush(keys.done(job_id), "succeeded")
        self.r.expire(keys.done(job_id), TTL)

    def idempotency(self, key: str, job_id: str) -> None:
        self.r.set(keys.idempotency(self.ns, key), job_id, ex=TTL)


@pytest.fixture
def old(cp, redis_view, payload_bucket) -> Layout1:
    return Layout1(redis_view, cp.ns, cp.queue, payload_bucket)


def test_queued_s3_job_of_layout1_is_delivered_and_finishes(cp, old, s3_client):
    # Given a layout-1 S3-tier job, uploaded and queued before the upgrade
    data = b"\x11" * 5000
    job = new_job_id()
    ref = old.issue(job, "args", len(data), sha256_hex(data))
    s3_client.put_object(Bucket=old.bucket, Key=ref["key"], Body=data)
    old.job(job, tier="s3", size=len(data), ref=ref)
    old.entry(job, ref=ref)
    # Then its status reads as before
    status = cp.status(job).json
    assert (status["state"], status["tier"], status["payloadRef"]) == ("queued", "s3", ref)
    # When a new daemon polls
    polled = cp.poll().json
    # Then it gets the same reference, rebuilt from the converted job
    assert polled["job_id"] == job and polled["payloadRef"] == ref and polled["attempt"] == 1
    # And it can presign, upload and post an S3 result
    result = upload(cp, b"\x12" * 3000, role="daemon", job_id=job)
    assert cp.post_result(job, {"resultRef": result}).status == 204
    assert cp.result(job).json["resultRef"] == result
    # And the old issue records are gone (folded into the job hash)
    assert not old.r.exists(keys.issue(job, "args"))
    assert old.r.object("encoding", keys.job(job)) == b"listpack"


def test_queued_inline_job_of_layout1_keeps_its_idempotency_key(cp, old):
    # Given a layout-1 inline job enqueued with an Idempotency-Key
    job = new_job_id()
    old.job(job, tier="inline", size=3)
    old.entry(job, inline=b"\x93\x01\x02")
    old.idempotency("order-1", job)
    # When the client's retry arrives after the upgrade
    again = cp.enqueue(raw=b"\x93\x01\x02", headers={"Idempotency-Key": "order-1"})
    # Then it is the same job, with no second entry
    assert (again.status, again.json["job_id"]) == (200, job)
    assert old.r.xlen(old.stream) == 1
    # And a new daemon runs it from the old entry
    polled = cp.poll().json
    assert polled["job_id"] == job and base64.b64decode(polled["payloadInline"]) == b"\x93\x01\x02"
    assert cp.post_result(job, {"resultInline": b64(b"\x01")}).status == 204
    assert base64.b64decode(cp.result(job).json["resultInline"]) == b"\x01"


def redeliver(cp, job: str) -> dict:
    """A delivery of layout 1 carries no lease: after the visibility timeout the job is handed
    out again, with a lease, and that delivery finishes it."""
    time.sleep(1.2)
    polled = cp.poll(daemon_id="d-new")
    assert polled.status == 200 and polled.json["job_id"] == job, polled.raw_body
    assert polled.json["attempt"] == 2
    return polled.json


def test_running_job_of_layout1_takes_its_result_after_the_upgrade(cp, old, settings_env):
    # Given a layout-1 inline job that an old daemon took before the upgrade
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = new_job_id()
    old.job(job, tier="inline", size=1)
    old.entry(job, inline=b"\x01")
    old.deliver(job)
    assert cp.status(job).json["state"] == "running"
    # When its delivery times out and a new daemon takes it, then posts an error
    assert base64.b64decode(redeliver(cp, job)["payloadInline"]) == b"\x01"
    error = {"type": "ValueError", "message": "bad input", "traceback": "t" * 2000}
    assert cp.post_result(job, {"error": error}).status == 204
    # Then the job failed with that error, and its entry is acknowledged and deleted
    got = cp.result(job).json
    assert got["state"] == "failed" and got["error"]["traceback"] == "t" * 2000
    assert old.r.xlen(old.stream) == 0
    assert old.r.xpending(old.stream, keys.CONSUMER_GROUP)["pending"] == 0


def test_running_s3_job_with_a_result_presigned_before_the_upgrade(cp, old, settings_env):
    # Given a layout-1 job that was running and had presigned (and uploaded) its result key
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = new_job_id()
    old.job(job, tier="inline", size=1)
    old.entry(job, inline=b"\x01")
    old.deliver(job)
    redeliver(cp, job)
    data = b"\x21" * 4000
    result_ref = old.issue(job, "result", len(data), sha256_hex(data))
    # (the upload needs a URL: the running delivery's presign after the upgrade gets a key of
    # its own, since the issue made before it belongs to a delivery that can no longer post)
    again = cp.presign_put(len(data), role="daemon", job_id=job, sha256=sha256_hex(data))
    assert again.status == 200 and again.json["key"] == result_ref["key"] + "-2"
    assert put_presigned(again.json, data).status_code == 200
    ref = {**result_ref, "key": again.json["key"]}
    # When the daemon posts the reference
    assert cp.post_result(job, {"resultRef": ref}).status == 204
    # Then it is the job's result
    assert cp.result(job).json["resultRef"] == ref


def test_finished_job_of_layout1_keeps_its_result(cp, old):
    # Given a layout-1 job that finished with an inline result before the upgrade
    job = new_job_id()
    old.job(job, tier="inline", size=1, attempts=1)
    old.finish_inline(job, b"\x42" * 500)
    # Then its result and status read as before
    got = cp.result(job, wait=1).json
    assert got["state"] == "succeeded" and base64.b64decode(got["resultInline"]) == b"\x42" * 500
    assert cp.status(job).json["attempts"] == 1
    # And it is never delivered again
    assert cp.poll().status == 204


def test_layout1_inline_job_that_never_reached_its_queue_is_appended_by_the_retry(cp, old):
    # Given the layout-1 failure mode: a job hash and idempotency key, but no stream entry
    job = new_job_id()
    old.job(job, tier="inline", size=2)
    old.idempotency("order-9", job)
    # When the client retries with the same key after the upgrade
    again = cp.enqueue(raw=b"\x92\x01", headers={"Idempotency-Key": "order-9"})
    # Then the retry completes the append, and the job runs
    assert (again.status, again.json["job_id"]) == (200, job)
    polled = cp.poll().json
    assert polled["job_id"] == job and base64.b64decode(polled["payloadInline"]) == b"\x92\x01"
