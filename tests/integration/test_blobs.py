"""Blobs (issue 25): uploaded once per namespace, referenced by many jobs and results, isolated
between namespaces, downloadable only through a job (their renewal: test_blob_renewals.py)."""

from __future__ import annotations

import base64
import os

import msgpack
import pytest
import redis
import requests

from payloadstore_controlplane.store import keys
from tests.support.control_plane import create_blob, put_presigned, sha256_hex, upload

RETENTION_S = 172_800
# A record's TTL: the blob's lifecycle (its namespace's retention class, 2 days by default) less
# the known margin (3 h).
RECORD_S = 2 * 86_400 - 3 * 3600


@pytest.fixture
def r(redis_target):
    """The Redis the control plane uses (a cluster with PAYLOADSTORE_REDIS=cluster)."""
    from redis.cluster import RedisCluster

    if redis_target.get("REDIS_CLUSTER") == "true":
        return RedisCluster.from_url(redis_target["REDIS_URL"])
    return redis.Redis.from_url(redis_target["REDIS_URL"])


def blob_bytes(n: int = 300_000) -> bytes:
    return os.urandom(n)


def enqueue_with(cp, blobs, *, inline=b"\x91\x01", ref=None):
    body = {"blobs": blobs}
    if ref is not None:
        body["payloadRef"] = ref
    else:
        body["payloadInline"] = base64.b64encode(inline).decode()
    return cp.enqueue(body=body)


def test_given_new_content_when_posted_then_upload_instructions_then_exists_once_verified(cp):
    data = blob_bytes()
    sha = sha256_hex(data)
    # When a client asks for content the namespace does not have
    first = cp.blob(sha, len(data))
    # Then it gets a presigned PUT with the size and sha256 signed in, at the namespace's key
    assert first.status == 200 and first.json["exists"] is False
    assert first.json["key"] == f"blobs/{cp.ns}/{sha}"
    assert (
        first.json["upload"]["headers"]["x-amz-checksum-sha256"]
        == base64.b64encode(bytes.fromhex(sha)).decode()
    )
    # And the blob is not usable before its upload is verified
    assert enqueue_with(cp, [sha]).error["code"] == "unknown_blob"
    # When it uploads and asks again
    assert put_presigned(first.json["upload"], data).status_code == 200
    again = cp.blob(sha, len(data))
    # Then the blob exists, and asking once more uploads nothing
    assert again.json["exists"] is True and "upload" not in again.json
    assert cp.blob(sha, len(data), role="daemon").json["exists"] is True


def test_other_bytes_cannot_be_uploaded_under_a_blobs_sha256(cp):
    data = blob_bytes(1000)
    first = cp.blob(sha256_hex(data), len(data))
    # S3 refuses a body whose sha256 is not the signed one
    assert put_presigned(first.json["upload"], b"x" * 1000).status_code == 400
    assert cp.blob(sha256_hex(data), len(data)).json["exists"] is False


def test_a_blob_of_another_size_is_refused(cp):
    data = blob_bytes(1000)
    sha = create_blob(cp, data)
    reply = cp.blob(sha, 999)
    assert reply.status == 409 and reply.error["reason"] == "size_mismatch"


def test_blobs_are_per_namespace(cp, other_cp):
    # Given a blob in one namespace
    data = blob_bytes()
    sha = create_blob(cp, data)
    # When another namespace names the same sha256
    theirs = other_cp.blob(sha, len(data))
    # Then it has nothing: it must upload the content itself, to a key of its own
    assert theirs.json["exists"] is False
    assert theirs.json["key"] == f"blobs/{other_cp.ns}/{sha}"
    # And its jobs cannot reference the other namespace's blob
    reply = enqueue_with(other_cp, [sha])
    assert reply.status == 409 and reply.error["code"] == "unknown_blob"
    assert reply.error["blobs"] == [sha]


def test_unknown_blob_refuses_the_job_and_writes_nothing(cp, r):
    sha = "ab" * 32
    reply = enqueue_with(cp, [sha])
    assert reply.status == 409 and reply.error["code"] == "unknown_blob"
    assert not r.exists(f"ps:{{ns:{cp.ns}}}:q:{cp.queue}")
    assert cp.poll().status == 204


def test_a_job_referencing_a_blob_is_delivered_with_a_get_of_that_blob_only(cp):
    # Given two blobs, and a job that references one of them
    mine, other = blob_bytes(), blob_bytes()
    sha, other_sha = create_blob(cp, mine), create_blob(cp, other)
    job_id = enqueue_with(cp, [sha]).json["job_id"]
    # When a daemon polls it
    got = cp.poll()
    # Then the delivery carries a presigned GET of that blob, and of no other
    assert got.status == 200 and got.json["job_id"] == job_id
    blobs = got.json["blobs"]
    assert [b["sha256"] for b in blobs] == [sha] and other_sha not in got.raw_body
    assert requests.get(blobs[0]["url"], timeout=30).content == mine


def test_an_s3_tier_job_carries_its_blobs_too(cp):
    sha = create_blob(cp, blob_bytes())
    ref = upload(cp, msgpack.packb([b"a" * 300_000]))
    assert enqueue_with(cp, [sha], ref=ref).status == 201
    got = cp.poll()
    assert [b["sha256"] for b in got.json["blobs"]] == [sha] and got.json["download"]


def test_a_job_without_blobs_has_no_blobs_field(cp):
    cp.enqueue(raw=msgpack.packb([1]))
    assert "blobs" not in cp.poll().json


def test_batch_items_are_refused_one_by_one_for_unknown_blobs(cp):
    sha = create_blob(cp, blob_bytes())
    inline = base64.b64encode(b"\x91\x01").decode()
    reply = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={
            "jobs": [
                {"payloadInline": inline, "blobs": [sha]},
                {"payloadInline": inline, "blobs": ["cd" * 32]},
                {"payloadInline": inline},
            ]
        },
    )
    answers = reply.json["jobs"]
    assert "job_id" in answers[0] and "job_id" in answers[2]
    assert answers[1]["error"]["code"] == "unknown_blob"


def test_a_result_referencing_a_blob_hands_the_client_a_get_of_it(cp):
    # Given a running job whose daemon made a blob
    job_id = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    assert cp.poll().status == 200
    out = blob_bytes()
    sha = create_blob(cp, out, role="daemon")
    # When the daemon posts a result that references it
    inline = base64.b64encode(b"\xc4\x01x").decode()
    posted = cp.post_result(job_id, {"resultInline": inline, "blobs": [sha]})
    assert posted.status == 204, posted.raw_body
    # Then the client's result answer carries a GET of it
    got = cp.result(job_id)
    assert [b["sha256"] for b in got.json["blobs"]] == [sha]
    assert requests.get(got.json["blobs"][0]["url"], timeout=30).content == out


def test_a_result_naming_an_unknown_blob_is_refused_and_the_job_stays_running(cp):
    job_id = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    assert cp.poll().status == 200
    inline = base64.b64encode(b"\x01").decode()
    posted = cp.post_result(job_id, {"resultInline": inline, "blobs": ["ef" * 32]})
    assert posted.status == 409 and posted.error["code"] == "unknown_blob"
    assert cp.status(job_id).json["state"] == "running"


def test_a_blob_record_costs_at_most_128_bytes_and_lives_until_the_known_margin(cp, r):
    sha = create_blob(cp, blob_bytes())
    key = keys.blob(cp.ns, sha)
    assert r.memory_usage(key) <= 128
    # (the object's lifecycle, its retention class's 2 days by default, less the margin of 3 h)
    assert RECORD_S - 5 <= r.ttl(key) <= RECORD_S


def test_an_expired_blob_is_unknown(cp, r):
    sha = create_blob(cp, blob_bytes())
    r.delete(keys.blob(cp.ns, sha))  # its record expired with the retention
    # (the object lingers until the lifecycle's midnight; an upload found again is re-verified
    # by the next POST, but a job naming it is refused)
    assert enqueue_with(cp, [sha]).error["code"] == "unknown_blob"


def test_an_old_upload_found_without_its_record_is_uploaded_again_not_copied(
    cp, r, s3_client, payload_bucket, monkeypatch
):
    # Given a blob whose record expired while its object lingers, uploaded 47 h ago by the
    # control plane's clock (its object's 2-day lifecycle ends within the known margin)
    from payloadstore_controlplane.runtime import clock

    data = blob_bytes()
    sha = create_blob(cp, data)
    r.delete(keys.blob(cp.ns, sha))
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 47 * 3600)
    # When a client asks for it again
    again = cp.blob(sha, len(data))
    # Then it is not usable as it is (no job could be sure to outlive it, and no request copies
    # in S3): the client uploads it again, which moves its expiry
    assert again.json["exists"] is False and again.json["upload"]["url"]
    assert not r.exists(keys.blob(cp.ns, sha))
    head = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert "renewed-at" not in head["Metadata"]


def test_a_recent_upload_found_without_its_record_is_recorded_for_what_is_left(
    cp, r, s3_client, payload_bucket, monkeypatch
):
    from payloadstore_controlplane.runtime import clock

    data = blob_bytes()
    sha = create_blob(cp, data)
    r.delete(keys.blob(cp.ns, sha))
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 10 * 3600)
    assert cp.blob(sha, len(data)).json["exists"] is True
    head = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert "renewed-at" not in head["Metadata"]
    # (its record lives for what is left of its object's lifecycle since the upload, less the
    # known margin)
    assert RECORD_S - 10 * 3600 - 120 <= r.ttl(keys.blob(cp.ns, sha)) <= RECORD_S - 10 * 3600


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_a_retried_job_names_its_blobs_again(cp, tier):
    # Given a job referencing a blob that failed
    sha = create_blob(cp, blob_bytes())
    if tier == "s3":
        job_id = enqueue_with(cp, [sha], ref=upload(cp, msgpack.packb([b"a" * 300_000]))).json[
            "job_id"
        ]
    else:
        job_id = enqueue_with(cp, [sha]).json["job_id"]
    assert cp.poll().status == 200
    failed = cp.post_result(job_id, {"error": {"type": "Boom", "message": "x"}})
    assert failed.status == 204
    # When a client retries it
    retried = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/retry",
        {"ns": cp.ns, "job_id": job_id},
    )
    assert retried.status == 200, retried.raw_body
    # Then its new delivery carries the GET of its blob again
    got = cp.poll()
    assert got.json["job_id"] == job_id
    assert [b["sha256"] for b in got.json["blobs"]] == [sha]


def test_no_route_but_a_jobs_answer_hands_out_a_blobs_url(cp):
    # Given a blob of this namespace
    sha = create_blob(cp, blob_bytes())
    # When a token of the namespace asks presign-get for its key directly
    direct = cp.presign_get(f"blobs/{cp.ns}/{sha}")
    # Then it is refused as a key never issued: only a job's poll or result answer carries one
    assert direct.status == 404
    # (and the blobs route, for a blob the namespace has, answers no URL at all)
    assert "url" not in cp.blob(sha, 300_000).raw_body


# -- multipart blobs (above MULTIPART_THRESHOLD) ------------------------------------------------

MiB = 1024 * 1024
PART = 5 * MiB  # S3's smallest part


@pytest.fixture
def small_multipart(settings_env):
    """Multipart from 6 MiB on, in 5 MiB parts: a 12 MiB blob is parts of 5, 5 and 2 MiB."""
    settings_env(MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART))


def chunks_of(data: bytes) -> list[bytes]:
    return [data[i : i + PART] for i in range(0, len(data), PART)]


def blob_parts(cp, body: dict, *, role="client"):
    return cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/parts",
        {"ns": cp.ns},
        role=role,
        body=body,
    )


def specs(data: bytes, numbers=None) -> list[dict]:
    chunks = chunks_of(data)
    return [
        {"number": n, "size": len(chunks[n - 1]), "sha256": sha256_hex(chunks[n - 1])}
        for n in numbers or range(1, len(chunks) + 1)
    ]


def put_parts(urls: list[dict], data: bytes, numbers) -> None:
    chunks = chunks_of(data)
    by_number = {u["number"]: u for u in urls}
    for n in numbers:
        got = requests.put(
            by_number[n]["url"], data=chunks[n - 1], headers=by_number[n]["headers"], timeout=60
        )
        assert got.status_code == 200, got.text


def test_a_blob_above_the_threshold_is_uploaded_in_parts_and_verified_at_the_second_post(
    cp, small_multipart, s3_client, r
):
    # Given 12 MiB of content the namespace does not have
    data = blob_bytes(12 * MiB)
    sha = sha256_hex(data)
    # When the client asks for it
    first = cp.blob(sha, len(data))
    # Then it gets a multipart upload (as a presign above the threshold answers), no single PUT
    assert first.status == 200 and first.json["exists"] is False, first.raw_body
    assert "upload" not in first.json
    mp = first.json["multipart"]
    assert mp["part_bytes"] == PART and mp["part_count"] == 3 and mp["upload_id"]
    # And asking again before any part is presigned answers the same upload
    assert cp.blob(sha, len(data)).json["multipart"] == mp
    # When it asks the parts route for the blob's part URLs (checksums signed in) and PUTs each
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data)})
    assert urls.status == 200, urls.raw_body
    assert urls.json["blob"] == sha and "job_id" not in urls.json
    assert urls.json["key"] == f"blobs/{cp.ns}/{sha}" and urls.json["upload_id"] == mp["upload_id"]
    first_part = chunks_of(data)[0]
    assert urls.json["parts"][0]["headers"]["x-amz-checksum-sha256"] == (
        base64.b64encode(bytes.fromhex(sha256_hex(first_part))).decode()
    )
    put_parts(urls.json["parts"], data, [1, 2, 3])
    # And the blob is not usable before the control plane completed and verified the upload
    assert enqueue_with(cp, [sha]).error["code"] == "unknown_blob"
    # When it POSTs the blob again
    done = cp.blob(sha, len(data))
    # Then the upload is completed with its parts' composite checksum and the blob exists
    assert done.status == 200 and done.json["exists"] is True, done.raw_body
    head = s3_client.head_object(Bucket=os.environ["PAYLOAD_BUCKET"], Key=done.json["key"])
    assert head["ContentLength"] == len(data)
    assert r.exists(keys.blob(cp.ns, sha)) and not r.exists(keys.blob_upload(cp.ns, sha))
    # And jobs reference it, and a poll hands out a GET of its whole content
    assert enqueue_with(cp, [sha]).status == 201
    polled = cp.poll()
    got = requests.get(polled.json["blobs"][0]["url"], timeout=60)
    assert got.status_code == 200 and sha256_hex(got.content) == sha


def test_a_missing_blob_part_is_409_parts_mismatch_and_no_blob_is_recorded(cp, small_multipart, r):
    # Given a blob's multipart upload whose part 2 was presigned but never uploaded
    data = blob_bytes(12 * MiB)
    sha = sha256_hex(data)
    opened = cp.blob(sha, len(data)).json["multipart"]["upload_id"]
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data)}).json["parts"]
    put_parts(urls, data, [1, 3])
    # When the client POSTs the blob to have it completed
    out = cp.blob(sha, len(data))
    # Then 409 parts_mismatch names the part, no record exists, and jobs cannot reference it
    assert out.status == 409 and out.error["reason"] == "parts_mismatch", out.raw_body
    assert "part 2 is missing" in out.error["message"]
    # And the answer names the upload, still open (whoever POSTed may upload the parts)
    assert out.error["multipart"] == {"upload_id": opened, "part_bytes": PART, "part_count": 3}
    assert not r.exists(keys.blob(cp.ns, sha))
    assert enqueue_with(cp, [sha]).error["code"] == "unknown_blob"
    # And once the part is uploaded, the next POST completes it
    put_parts(urls, data, [2])
    assert cp.blob(sha, len(data)).json["exists"] is True
    assert enqueue_with(cp, [sha]).status == 201


def test_a_blob_part_never_presigned_is_409_parts_mismatch(cp, small_multipart, r):
    data = blob_bytes(12 * MiB)
    sha = sha256_hex(data)
    cp.blob(sha, len(data))
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data, [1, 2])}).json["parts"]
    put_parts(urls, data, [1, 2])
    out = cp.blob(sha, len(data))
    assert out.status == 409 and out.error["reason"] == "parts_mismatch"
    assert "part 3 was never presigned" in out.error["message"]
    assert not r.exists(keys.blob(cp.ns, sha))


def test_a_blob_part_with_other_bytes_is_refused_and_asked_again_with_another_sha_is_409(
    cp, small_multipart
):
    data = blob_bytes(12 * MiB)
    sha = sha256_hex(data)
    cp.blob(sha, len(data))
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data, [1])}).json["parts"]
    # S3 refuses a part of other bytes than the sha256 signed into its URL
    other = requests.put(urls[0]["url"], data=b"x" * PART, headers=urls[0]["headers"], timeout=60)
    assert other.status_code == 400 and "BadDigest" in other.text
    # And the part cannot be asked for again with another sha256
    again = blob_parts(
        cp, {"blob": sha, "parts": [{"number": 1, "size": PART, "sha256": "ab" * 32}]}
    )
    assert again.status == 409


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"job_id": "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C", "blob": "ab" * 32}, 422),
        ({}, 422),
        ({"blob": "ab" * 32, "lease": "x" * 20}, 422),
        ({"blob": "ab" * 32}, 404),  # no upload open for that blob
    ],
)
def test_blob_parts_need_exactly_one_of_job_id_and_an_open_blob_upload(
    cp, small_multipart, body, status
):
    part = {"number": 1, "size": PART, "sha256": "cd" * 32}
    out = blob_parts(cp, {**body, "parts": [part]})
    assert out.status == status, out.raw_body


def test_blob_parts_of_wrong_size_are_422_and_another_namespace_sees_no_upload(
    cp, other_cp, small_multipart
):
    data = blob_bytes(12 * MiB)
    sha = sha256_hex(data)
    cp.blob(sha, len(data))
    wrong = blob_parts(cp, {"blob": sha, "parts": [{"number": 3, "size": PART, "sha256": sha}]})
    assert wrong.status == 422
    # Another namespace has no upload of that sha256: its parts call is 404
    assert blob_parts(other_cp, {"blob": sha, "parts": specs(data, [1])}).status == 404


def test_a_daemon_uploads_a_blob_in_parts(cp, small_multipart):
    data = blob_bytes(7 * MiB)
    sha = sha256_hex(data)
    first = cp.blob(sha, len(data), role="daemon")
    assert first.json["multipart"]["part_count"] == 2
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data)}, role="daemon").json["parts"]
    put_parts(urls, data, [1, 2])
    assert cp.blob(sha, len(data), role="daemon").json["exists"] is True


def upload_in_parts(cp, data: bytes) -> str:
    sha = sha256_hex(data)
    assert cp.blob(sha, len(data)).json["multipart"]
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data)}).json["parts"]
    put_parts(urls, data, range(1, len(urls) + 1))
    assert cp.blob(sha, len(data)).json["exists"] is True
    return sha


def test_a_multipart_blob_found_without_its_record_is_recorded_again(cp, small_multipart, r):
    # Given a blob uploaded in parts whose record is gone (the object lingers)
    data = blob_bytes(12 * MiB)
    sha = upload_in_parts(cp, data)
    r.delete(keys.blob(cp.ns, sha))
    # When a client asks for it, then it exists again without another upload
    again = cp.blob(sha, len(data))
    assert again.json["exists"] is True and "multipart" not in again.json
    assert r.exists(keys.blob(cp.ns, sha))


def failed_job_with(cp, sha: str, tier: str) -> str:
    """A job referencing the blob `sha` that ran and failed (retryable)."""
    if tier == "s3":
        ref = upload(cp, msgpack.packb([b"a" * 300_000]))
        job_id = enqueue_with(cp, [sha], ref=ref).json["job_id"]
    else:
        job_id = enqueue_with(cp, [sha]).json["job_id"]
    assert cp.poll().json["job_id"] == job_id
    assert cp.post_result(job_id, {"error": {"type": "Boom", "message": "x"}}).status == 204
    return job_id


def retry(cp, job_id: str):
    return cp.call(
        "jobs", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"ns": cp.ns, "job_id": job_id}
    )


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_a_retry_of_a_job_whose_blob_expired_is_refused_blob_expired_and_nothing_changes(
    cp, r, tier
):
    # Given a failed job whose blob has since expired from the namespace
    sha = create_blob(cp, blob_bytes())
    job_id = failed_job_with(cp, sha, tier)
    r.delete(keys.blob(cp.ns, sha))  # its record expired with the retention
    # When a client retries it
    refused = retry(cp, job_id)
    # Then it is refused up front, naming the blob, instead of failing payload_lost at a daemon
    assert refused.status == 409, refused.raw_body
    assert refused.error["code"] == "not_retryable"
    assert refused.error["reason"] == "blob_expired"
    assert refused.error["state"] == "failed"
    assert refused.error["blobs"] == [sha]
    # And the job stays failed, nothing queued
    status = cp.status(job_id)
    assert status.json["state"] == "failed" and status.json.get("retries", 0) == 0
    assert cp.poll(wait_s=0).status == 204


def test_a_redrive_skips_the_jobs_whose_blobs_expired(cp, r):
    # Given two failed jobs of one queue, one referencing a blob that then expired
    gone = create_blob(cp, blob_bytes())
    kept = create_blob(cp, blob_bytes())
    lost_job = failed_job_with(cp, gone, "inline")
    good_job = failed_job_with(cp, kept, "inline")
    r.delete(keys.blob(cp.ns, gone))
    # When the queue is redriven
    answer = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/redrive",
        {"ns": cp.ns, "queue": cp.queue},
        body={},
    )
    # Then the intact one is retried and the other skipped
    assert answer.status == 200, answer.raw_body
    assert (answer.json["retried"], answer.json["skipped"]) == (1, 1)
    got = cp.poll()
    assert got.json["job_id"] == good_job != lost_job
