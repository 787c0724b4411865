"""Blob lifetimes (issue 33, defects 4 and 5): a job keeps the blobs it references readable for its
own remaining life; requests only record that need (no S3 copy on any request path) and the
scheduled renewals function copies a due blob onto itself ahead of its lifecycle expiry (one
CopyObject, or parallel UploadPartCopy above COPY_PART_BYTES). Real handlers, a real
redis-server, the S3 emulator over HTTP; the S3 calls each side makes are recorded by wrapping its
injected client."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import msgpack
import pytest
import redis
import requests

from payloadstore_controlplane.store import keys
from tests.support.control_plane import create_blob, sha256_hex, upload
from tests.support.events import FakeLambdaContext

EVENT = json.loads((Path(__file__).parents[2] / "events" / "renewals_schedule.json").read_text())
HOUR = 3600
MiB = 1 << 20
# The defaults: queue retention = result retention = 48 h, renew ahead 6 h (margin 3 h), and a
# blob's lifecycle its namespace's retention class (the default policy's 2d: 2 days).
RETENTION_S = 172_800
LIFECYCLE_S = 2 * 86_400
MARGIN_S = 3 * HOUR
COPIES = {"copy_object", "upload_part_copy", "create_multipart_upload"}


@pytest.fixture
def r(redis_target):
    from redis.cluster import RedisCluster

    if redis_target.get("REDIS_CLUSTER") == "true":
        return RedisCluster.from_url(redis_target["REDIS_URL"])
    return redis.Redis.from_url(redis_target["REDIS_URL"])


class Recording:
    """An S3 client that records the name of every call it passes on."""

    def __init__(self, client, calls: list[str]):
        self._client = client
        self._calls = calls

    def __getattr__(self, name):
        target = getattr(self._client, name)
        if not callable(target):
            return target

        def call(*args, **kwargs):
            self._calls.append(name)
            return target(*args, **kwargs)

        return call


@pytest.fixture
def request_s3_calls(cp_env, monkeypatch) -> list[str]:
    """The S3 calls the request handlers make (their injected client, recorded)."""
    from payloadstore_controlplane.handlers._deps import get_deps

    calls: list[str] = []
    objects = get_deps().objects
    monkeypatch.setattr(objects, "_s3", Recording(objects._s3, calls))
    return calls


@pytest.fixture
def renewer_s3_calls(cp_env, monkeypatch) -> list[str]:
    """The S3 calls the renewals function makes (its injected client, recorded)."""
    from payloadstore_controlplane.handlers import renewals

    calls: list[str] = []
    objects = renewals.renewal_deps().objects
    monkeypatch.setattr(objects, "_s3", Recording(objects._s3, calls))
    return calls


def renew(cp):
    """One run of the renewer over this test's namespace."""
    from payloadstore_controlplane.handlers import renewals
    from payloadstore_controlplane.logic.renewals import renew_blobs

    return renew_blobs([cp.ns], renewals.renewal_deps())


def enqueue_with(cp, blobs):
    return cp.enqueue(
        body={"blobs": blobs, "payloadInline": base64.b64encode(b"\x91\x01").decode()}
    )


def expiring_in(r, cp, sha: str, seconds: float) -> None:
    """Make the blob's record say its object expires in `seconds` (the record ends the known
    margin before the object)."""
    r.pexpire(keys.blob(cp.ns, sha), int((seconds - MARGIN_S) * 1000))


def needs(r, cp) -> dict[str, float]:
    return {
        bytes(m).hex(): s / 1000
        for m, s in r.zrange(keys.blob_needs(cp.ns), 0, -1, withscores=True)
    }


def head(s3_client, bucket, cp, sha):
    return s3_client.head_object(Bucket=bucket, Key=f"blobs/{cp.ns}/{sha}", ChecksumMode="ENABLED")


def test_a_new_blobs_record_ends_the_known_margin_before_its_objects_lifecycle_expiry(cp, r):
    sha = create_blob(cp, os.urandom(1000))
    ttl = r.ttl(keys.blob(cp.ns, sha))
    assert LIFECYCLE_S - MARGIN_S - 5 <= ttl <= LIFECYCLE_S - MARGIN_S


def test_enqueue_poll_and_result_make_no_s3_copy_and_record_until_when_the_blob_is_needed(
    cp, r, request_s3_calls, s3_client, payload_bucket
):
    # Given a blob whose object expires in 4 h, well inside a job's life (48 h + 48 h)
    import time

    sha = create_blob(cp, os.urandom(300_000))
    expiring_in(r, cp, sha, 4 * HOUR)
    before = head(s3_client, payload_bucket, cp, sha)["LastModified"]
    request_s3_calls.clear()
    # When a job references it, a daemon takes it, and its result references the blob too
    now = time.time()
    job = enqueue_with(cp, [sha])
    assert job.status == 201, job.raw_body
    polled = cp.poll()
    assert polled.json["job_id"] == job.json["job_id"]
    posted = cp.post_result(
        job.json["job_id"], {"resultInline": base64.b64encode(b"\xc0").decode(), "blobs": [sha]}
    )
    assert posted.status == 204, posted.raw_body
    # Then no request copied anything in S3: the object is as it was
    assert not COPIES & set(request_s3_calls), request_s3_calls
    assert head(s3_client, payload_bucket, cp, sha)["LastModified"] == before
    # And the namespace's needs say the blob must live the job's whole life from its enqueue
    need = needs(r, cp)[sha]
    assert now + 2 * RETENTION_S <= need <= now + 2 * RETENTION_S + 10


def test_a_blob_whose_object_outlives_the_jobs_life_records_no_need(cp, r):
    sha = create_blob(cp, os.urandom(1000))
    expiring_in(r, cp, sha, 5 * 86_400)  # (e.g. a 7d namespace's); a job lives 4 days at most
    assert enqueue_with(cp, [sha]).status == 201
    assert needs(r, cp) == {}


def test_the_renewer_copies_a_due_blob_onto_itself_and_keeps_the_need_the_copy_does_not_cover(
    cp, r, renewer_s3_calls, s3_client, payload_bucket
):
    # Given a job referencing a blob whose object expires in 4 h (within BLOB_RENEW_AHEAD_S, 6 h)
    data = os.urandom(300_000)
    sha = create_blob(cp, data)
    expiring_in(r, cp, sha, 4 * HOUR)
    assert enqueue_with(cp, [sha]).status == 201
    before = head(s3_client, payload_bucket, cp, sha)
    # When the renewals function runs (EventBridge's scheduled event)
    from payloadstore_controlplane.handlers import renewals

    summary = renewals.lambda_handler(EVENT, FakeLambdaContext(remaining_ms=240_000))
    assert summary["renewed"] >= 1 and summary["failed"] == 0
    # Then the object was copied onto itself by one CopyObject (no bytes through the function),
    # its checksum kept and its lifecycle counting from now
    assert renewer_s3_calls.count("copy_object") >= 1
    assert "upload_part_copy" not in renewer_s3_calls
    after = head(s3_client, payload_bucket, cp, sha)
    assert after["Metadata"].get("renewed-at")
    assert after["LastModified"] >= before["LastModified"]
    assert after["ChecksumSHA256"] == base64.b64encode(bytes.fromhex(sha)).decode()
    # And its record tells the new expiry (2 days from the copy: its tag's class, copied with
    # it); the job needs it 4 days, so the need stays for the copy a lifecycle later
    assert r.ttl(keys.blob(cp.ns, sha)) > LIFECYCLE_S - MARGIN_S - 60
    tags = s3_client.get_object_tagging(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert {t["Key"]: t["Value"] for t in tags["TagSet"]} == {"payloadstore-retention": "2d"}
    assert sha in needs(r, cp)
    # And a second run copies nothing (the new expiry is not within 6 h)
    renewer_s3_calls.clear()
    assert renew(cp).renewed == 0 and "copy_object" not in renewer_s3_calls


def test_a_blob_above_copy_part_bytes_is_renewed_by_parallel_upload_part_copy(
    cp, r, settings_env, s3_client, payload_bucket, monkeypatch
):
    # Given copies in parts of 5 MiB, and a job referencing a 12 MiB blob due for renewal
    settings_env(COPY_PART_BYTES=str(5 * MiB))
    from payloadstore_controlplane.handlers import renewals

    calls: list[str] = []
    objects = renewals.renewal_deps().objects
    monkeypatch.setattr(objects, "_s3", Recording(objects._s3, calls))
    data = os.urandom(12 * MiB)
    sha = create_blob(cp, data)
    expiring_in(r, cp, sha, 4 * HOUR)
    assert enqueue_with(cp, [sha]).status == 201
    # When the renewer runs
    run = renew(cp)
    # Then the blob was copied as a multipart upload of 3 UploadPartCopy ranges, not CopyObject
    assert (run.renewed, run.renewed_in_parts) == (1, 1)
    assert calls.count("upload_part_copy") == 3 and "copy_object" not in calls
    assert calls.count("complete_multipart_upload") == 1
    # And the object holds the same bytes, with S3's composite checksum of the parts
    got = s3_client.get_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert got["Metadata"].get("renewed-at")
    assert sha256_hex(got["Body"].read()) == sha
    assert head(s3_client, payload_bucket, cp, sha)["ChecksumSHA256"].endswith("-3")
    # And its retention tag came along (a multipart upload would not carry it by itself)
    tags = s3_client.get_object_tagging(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert {t["Key"]: t["Value"] for t in tags["TagSet"]} == {"payloadstore-retention": "2d"}
    # And the blob stays usable: its record renewed
    assert r.ttl(keys.blob(cp.ns, sha)) > LIFECYCLE_S - MARGIN_S - 60
    assert cp.blob(sha, len(data)).json["exists"] is True


def test_a_needed_blob_not_yet_due_is_left_for_a_later_run(cp, r, renewer_s3_calls):
    sha = create_blob(cp, os.urandom(1000))
    expiring_in(r, cp, sha, 10 * HOUR)  # past BLOB_RENEW_AHEAD_S (6 h)
    assert enqueue_with(cp, [sha]).status == 201
    run = renew(cp)
    assert run.renewed == 0 and "copy_object" not in renewer_s3_calls
    assert sha in needs(r, cp)


def test_a_need_the_objects_expiry_already_covers_is_forgotten_without_a_copy(
    cp, r, renewer_s3_calls
):
    # Given a job's need (96 h) recorded while the blob's object had 40 h left, and a record
    # since then moved past the need (e.g. an upload again under a 7d policy)
    sha = create_blob(cp, os.urandom(1000))
    expiring_in(r, cp, sha, 40 * HOUR)
    assert enqueue_with(cp, [sha]).status == 201
    expiring_in(r, cp, sha, 5 * 86_400)
    # When the renewer runs, then it forgets the need and copies nothing
    run = renew(cp)
    assert run.covered == 1 and run.renewed == 0
    assert sha not in needs(r, cp) and "copy_object" not in renewer_s3_calls


def test_a_needed_blob_whose_object_is_gone_is_dropped_with_a_warning(
    cp, r, s3_client, payload_bucket
):
    sha = create_blob(cp, os.urandom(1000))
    expiring_in(r, cp, sha, 4 * HOUR)
    assert enqueue_with(cp, [sha]).status == 201
    s3_client.delete_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    run = renew(cp)
    assert run.lost == 1 and run.renewed == 0
    assert sha not in needs(r, cp)


def test_a_retry_records_the_retried_jobs_need_and_copies_nothing(cp, r, request_s3_calls):
    sha = create_blob(cp, os.urandom(1000))
    ref = upload(cp, msgpack.packb([b"a" * 300_000]))
    job_id = cp.enqueue(body={"blobs": [sha], "payloadRef": ref}).json["job_id"]
    assert cp.poll().json["job_id"] == job_id
    assert cp.post_result(job_id, {"error": {"type": "Boom", "message": "x"}}).status == 204
    expiring_in(r, cp, sha, 5 * HOUR)
    request_s3_calls.clear()
    retried = cp.call(
        "jobs", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"ns": cp.ns, "job_id": job_id}
    )
    assert retried.status == 200, retried.raw_body
    assert sha in needs(r, cp)
    assert not COPIES & set(request_s3_calls)
    got = cp.poll()
    assert [b["sha256"] for b in got.json["blobs"]] == [sha]
    assert requests.get(got.json["blobs"][0]["url"], timeout=30).status_code == 200


def test_a_run_near_its_timeout_starts_no_copy_and_leaves_the_blob_due_for_the_next(
    cp, r, renewer_s3_calls
):
    from payloadstore_controlplane.handlers import renewals
    from payloadstore_controlplane.logic.renewals import renew_blobs

    sha = create_blob(cp, os.urandom(1000))
    expiring_in(r, cp, sha, 4 * HOUR)
    assert enqueue_with(cp, [sha]).status == 201
    # When the invocation has less time left than a copy may take
    run = renew_blobs([cp.ns], renewals.renewal_deps(), time_left_s=lambda: 5.0, spare_s=10.0)
    # Then nothing is copied and the need stays for the next run, which renews it
    assert (run.deferred, run.renewed) == (1, 0) and "copy_object" not in renewer_s3_calls
    assert sha in needs(r, cp)
    assert renew(cp).renewed == 1
