"""POST /v1/namespaces/{ns}/queues/{queue}/jobs: inline and by reference, and every refusal."""

from __future__ import annotations

import base64

import msgpack

from payloadstore_controlplane.store import keys
from tests.support.control_plane import sha256_hex, upload


def stream_len(redis_view, ns, queue) -> int:
    return redis_view.xlen(keys.queue(ns, queue))


def test_inline_raw_msgpack_body_is_queued_in_the_stream_entry(cp, redis_view):
    payload = msgpack.packb({"args": [1, 2], "kwargs": {"x": "y"}})
    r = cp.enqueue(raw=payload)
    assert r.status == 201 and r.json["tier"] == "inline"
    entries = redis_view.xrange(keys.queue(cp.ns, cp.queue))
    assert len(entries) == 1
    # The entry is the job id and the bytes, nothing else
    assert entries[0][1] == {b"j": r.json["job_id"].encode(), b"b": payload}
    status = cp.status(r.json["job_id"])
    assert status.json["state"] == "queued" and status.json["tier"] == "inline"


def test_inline_base64_json_is_accepted(cp):
    r = cp.enqueue(inline=b"\x93\x01\x02\x03")
    assert r.status == 201
    polled = cp.poll()
    assert base64.b64decode(polled.json["payloadInline"]) == b"\x93\x01\x02\x03"


def test_inline_at_threshold_ok_and_one_byte_over_is_413(cp, redis_view):
    assert cp.enqueue(raw=b"\x00" * 262_144).status == 201
    r = cp.enqueue(raw=b"\x00" * 262_145)
    assert r.status == 413
    assert "INLINE_THRESHOLD=262144" in r.error["message"]
    assert stream_len(redis_view, cp.ns, cp.queue) == 1


def test_both_or_neither_is_422_and_writes_nothing(cp, redis_view):
    ref = upload(cp, b"abc")
    both = cp.enqueue(ref=ref, inline=b"x")
    neither = cp.enqueue(body={})
    assert both.status == 422 and neither.status == 422
    assert "exactly one" in both.error["message"]
    assert stream_len(redis_view, cp.ns, cp.queue) == 0


def test_bad_queue_names_and_bad_base64_are_422(cp):
    assert cp.enqueue(raw=b"x", queue="bad$queue").status == 422
    assert cp.enqueue(raw=b"x", queue="a" * 64).status == 422
    assert cp.enqueue(body={"payloadInline": "!!!not base64"}).status == 422
    assert cp.enqueue(body={"payloadInline": "eA==", "extra": 1}).status == 422


def test_ref_enqueue_verifies_and_creates_a_job(cp, redis_view):
    data = b"\x01" * 300_000
    ref = upload(cp, data)
    r = cp.enqueue(ref=ref)
    assert r.status == 201 and r.json["tier"] == "s3"
    assert r.json["job_id"] in ref["key"]
    status = cp.status(r.json["job_id"]).json
    assert status["payloadRef"]["key"] == ref["key"]
    assert status["payloadRef"]["sha256"] == sha256_hex(data)
    entries = redis_view.xrange(keys.queue(cp.ns, cp.queue))
    # No payload bytes and no reference in the entry: only the job id
    assert entries[0][1] == {b"j": r.json["job_id"].encode()}


def test_same_key_twice_returns_same_job_without_second_entry(cp, redis_view):
    ref = upload(cp, b"retry me")
    first, second = cp.enqueue(ref=ref), cp.enqueue(ref=ref)
    assert (first.status, second.status) == (201, 200)
    assert first.json == second.json
    assert stream_len(redis_view, cp.ns, cp.queue) == 1


def test_same_key_to_another_queue_is_409(cp):
    ref = upload(cp, b"one queue only")
    assert cp.enqueue(ref=ref).status == 201
    assert cp.enqueue(ref=ref, queue="elsewhere").status == 409


def test_idempotency_key_makes_inline_enqueue_repeatable(cp, redis_view):
    h = {"Idempotency-Key": "order-42"}
    first = cp.enqueue(raw=b"\x01", headers=h)
    second = cp.enqueue(raw=b"\x01", headers=h)
    other = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "order-43"})
    assert (first.status, second.status, other.status) == (201, 200, 201)
    assert first.json["job_id"] == second.json["job_id"] != other.json["job_id"]
    assert stream_len(redis_view, cp.ns, cp.queue) == 2


def test_forged_foreign_and_wrong_kind_refs_are_409(cp, other_cp, redis_view):
    mine = upload(cp, b"mine")
    theirs = upload(other_cp, b"theirs")
    cases = {
        "forged key": {**mine, "key": mine["key"].replace("/args", "/other")},
        "made-up job": {**mine, "key": mine["key"][:-32] + "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args"},
        "other namespace's key": theirs,
        "foreign bucket": {**mine, "bucket": "someone-elses-bucket"},
        "wrong size": {**mine, "size": mine["size"] + 1},
        "wrong kind": {**mine, "kind": "http"},
        "result key": {**mine, "key": mine["key"].replace("/args", "/result")},
    }
    for name, ref in cases.items():
        r = cp.enqueue(ref=ref)
        assert r.status == 409, (name, r.raw_body)
    assert stream_len(redis_view, cp.ns, cp.queue) == 0


def test_ref_not_uploaded_is_409_saying_so(cp):
    r = cp.presign_put(10)
    ref = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": 10}
    out = cp.enqueue(ref=ref)
    assert out.status == 409 and out.error["reason"] == "not_uploaded"
    assert cp.status(r.json["job_id"]).status == 404  # no job was created


def test_size_mismatch_in_s3_is_409(cp, s3_client):
    # Given a key issued for 10 bytes but an object of 11 bytes behind it (a misbehaving uploader;
    # real S3 refuses this PUT because content-length is signed, the emulator does not)
    r = cp.presign_put(10)
    s3_client.put_object(Bucket=r.json["bucket"], Key=r.json["key"], Body=b"x" * 11)
    ref = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": 10}
    out = cp.enqueue(ref=ref)
    assert out.status == 409 and out.error["reason"] == "size_mismatch"


def test_checksum_mismatch_in_s3_is_409(cp, s3_client):
    data = b"y" * 64
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    # An object of the right size without the signed checksum
    s3_client.put_object(Bucket=r.json["bucket"], Key=r.json["key"], Body=b"z" * 64)
    ref = {
        "kind": "s3",
        "bucket": r.json["bucket"],
        "key": r.json["key"],
        "size": 64,
        "sha256": sha256_hex(data),
    }
    out = cp.enqueue(ref=ref)
    assert out.status == 409 and out.error["reason"] == "checksum_mismatch"


def test_queue_stream_is_trimmed_of_entries_older_than_retention(cp, redis_view):
    # Given 300 entries queued three days ago (ids are Redis's ms timestamps)
    import time

    r = redis_view
    key = keys.queue(cp.ns, cp.queue)
    old_ms = int((time.time() - 3 * 86400) * 1000)
    for i in range(300):
        r.xadd(key, {"j": "expired"}, id=f"{old_ms}-{i}")
    # When a fresh job is enqueued
    assert cp.enqueue(raw=b"\x01").status == 201
    # Then the XADD's MINID ~ trim dropped (whole nodes of) the expired entries, kept the new one
    remaining = r.xrange(key)
    assert len(remaining) <= 101
    assert remaining[-1][1][b"j"] != b"expired"
