"""A namespace policy changing under live uploads, jobs and blobs (issue 43, defects 2, 3, 4, 10
and 11, and the records of jobs that end outside a result post): a record never promises
longer than its object lives, an object never goes before a record that promises it, a refused
upload can always be made again under the current policy, and retry judges arguments by the
namespace's class. The real handlers, a real redis-server and the S3 emulator over HTTP (which
verifies the signed policy headers, stores the tags and the encryption, and answers HEAD and
GetObjectTagging as S3 does)."""

from __future__ import annotations

import base64
import time
import uuid

import msgpack
import pytest
import requests

from payloadstore_controlplane.models.policy import RETENTION_TAG, NamespacePolicy
from payloadstore_controlplane.store import keys
from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
from tests.integration.test_blobs import blob_parts, chunks_of, specs
from tests.integration.test_multipart import ask_parts, part_specs, put_part, split
from tests.integration.test_operate import direct_redis, fail, purge, redrive, retry, take
from tests.support.control_plane import (
    ControlPlane,
    cancel,
    create_blob,
    put_presigned,
    sha256_hex,
    upload,
)

DAY = 86_400
HOUR = 3600
MiB = 1024 * 1024
PART = 5 * MiB  # S3's smallest part
MARGIN_S = 3 * HOUR  # a blob record's known margin (BLOB_RENEW_AHEAD_S / 2, the default)


@pytest.fixture
def r(redis_target):
    return direct_redis(redis_target)


@pytest.fixture
def small_multipart(settings_env):
    """Multipart from 6 MiB on, in 5 MiB parts (a 12 MiB upload is 3 parts), and the stack's
    own key set (kms_key `stack`)."""
    settings_env(
        MULTIPART_THRESHOLD=str(6 * MiB),
        MULTIPART_PART_BYTES=str(PART),
        KMS_KEY_ARN=LOCAL_KMS_KEY_ARN,
    )


def namespace(policy: NamespacePolicy) -> ControlPlane:
    return ControlPlane("pc" + uuid.uuid4().hex[:10], policy)


def tags(s3_client, bucket: str, key: str) -> dict[str, str]:
    answer = s3_client.get_object_tagging(Bucket=bucket, Key=key)
    return {t["Key"]: t["Value"] for t in answer["TagSet"]}


def enqueue_with_blobs(cp: ControlPlane, blobs: list[str]):
    return cp.enqueue(
        body={"blobs": blobs, "payloadInline": base64.b64encode(b"\x91\x01").decode()}
    )


def finish_blob(cp: ControlPlane, answer: dict, data: bytes):
    """Upload the blob as a POST .../blobs answer says (one PUT, or its parts), POST again."""
    sha = sha256_hex(data)
    if answer.get("multipart"):
        urls = blob_parts(cp, {"blob": sha, "parts": specs(data)})
        assert urls.status == 200, urls.raw_body
        by_number = {u["number"]: u for u in urls.json["parts"]}
        for n, chunk in enumerate(chunks_of(data), start=1):
            assert put_part(by_number[n], chunk).status_code == 200
    else:
        assert put_presigned(answer["upload"], data).status_code == 200
    return cp.blob(sha, len(data))


# -- defect 2: a blob uploaded in parts is recorded by its object's class -----------------------


def test_a_blob_opened_under_1d_and_completed_under_30d_is_never_promised_past_its_object(
    small_multipart, r, s3_client, payload_bucket
):
    # Given a `1d` namespace's blob upload in parts, every part uploaded
    cp = namespace(NamespacePolicy("1d"))
    data = bytes(range(256)) * (12 * MiB // 256)
    sha = sha256_hex(data)
    opened = cp.blob(sha, len(data))
    assert opened.status == 200 and opened.json["multipart"], opened.raw_body
    urls = blob_parts(cp, {"blob": sha, "parts": specs(data)})
    for n, chunk in enumerate(chunks_of(data), start=1):
        assert put_part(urls.json["parts"][n - 1], chunk).status_code == 200
    # When the namespace's retention becomes `30d` before the POST that completes the upload
    cp.policy = NamespacePolicy("30d")
    done = cp.blob(sha, len(data))
    # Then no record promises the 1-day object for 30 days: the blob is not recorded (a job
    # cannot reference it), and the answer is a fresh upload under the current policy
    assert done.status == 200, done.raw_body
    key = f"blobs/{cp.ns}/{sha}"
    assert tags(s3_client, payload_bucket, key) == {RETENTION_TAG: "1d"}
    assert done.json["exists"] is False, done.raw_body
    assert done.json["multipart"]["upload_id"] != opened.json["multipart"]["upload_id"]
    assert enqueue_with_blobs(cp, [sha]).error["code"] == "unknown_blob"
    # When the client uploads it as told
    again = finish_blob(cp, done.json, data)
    # Then the object carries the 30-day class, and its record ends the margin before that
    assert again.status == 200 and again.json["exists"] is True, again.raw_body
    assert tags(s3_client, payload_bucket, key) == {RETENTION_TAG: "30d"}
    assert 30 * DAY - MARGIN_S - 60 <= r.ttl(keys.blob(cp.ns, sha)) <= 30 * DAY - MARGIN_S
    assert enqueue_with_blobs(cp, [sha]).status == 201


def test_a_blob_found_at_its_key_of_a_shorter_class_is_uploaded_again_not_recorded_longer(
    cp_env, r, s3_client, payload_bucket
):
    # Given a `30d` namespace whose blob key holds an object of the `1d` class (uploaded
    # before the namespace's class changed, its record gone)
    cp = namespace(NamespacePolicy("1d"))
    data = b"one-day-blob" * 1000
    sha = sha256_hex(data)
    first = cp.blob(sha, len(data))
    assert put_presigned(first.json["upload"], data).status_code == 200
    cp.policy = NamespacePolicy("30d")
    # When a client POSTs the blob
    answer = cp.blob(sha, len(data))
    # Then it is not recorded for 30 days over a 1-day object: it is uploaded again
    assert answer.status == 200 and answer.json["exists"] is False, answer.raw_body
    assert r.ttl(keys.blob(cp.ns, sha)) == -2
    assert answer.json["upload"]["headers"]["x-amz-tagging"] == f"{RETENTION_TAG}=30d"


# -- defect 10: blobs pass the policy check payload references get ------------------------------


def test_a_blob_presigned_before_the_key_became_stack_is_not_recorded_as_sse_s3(
    small_multipart, r, s3_client, payload_bucket
):
    # Given a blob presigned and uploaded while the namespace's kms_key was `none`
    cp = namespace(NamespacePolicy("2d", "none"))
    data = b"secret-model-weights" * 500
    sha = sha256_hex(data)
    first = cp.blob(sha, len(data))
    assert first.json["upload"]["headers"]["x-amz-server-side-encryption"] == "AES256"
    assert put_presigned(first.json["upload"], data).status_code == 200
    # When the policy becomes the stack's key before the POST that verifies it
    cp.policy = NamespacePolicy("2d", "stack")
    answer = cp.blob(sha, len(data))
    # Then the SSE-S3 object is not recorded: no job can reference it, and the answer is a
    # fresh upload signed with the stack's key
    assert answer.status == 200, answer.raw_body
    assert answer.json["exists"] is False, answer.raw_body
    assert enqueue_with_blobs(cp, [sha]).error["code"] == "unknown_blob"
    signed = answer.json["upload"]["headers"]
    assert signed["x-amz-server-side-encryption"] == "aws:kms"
    assert signed["x-amz-server-side-encryption-aws-kms-key-id"] == LOCAL_KMS_KEY_ARN
    # When the client uploads it as told
    again = finish_blob(cp, answer.json, data)
    # Then the blob exists, encrypted with the stack's key, and jobs reference it
    assert again.json["exists"] is True, again.raw_body
    head = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    assert enqueue_with_blobs(cp, [sha]).status == 201


def test_a_blob_in_parts_opened_before_the_key_became_stack_is_uploaded_again(
    small_multipart, s3_client, payload_bucket
):
    # Given a blob uploaded in parts while the namespace's kms_key was `none`
    cp = namespace(NamespacePolicy("2d", "none"))
    data = bytes(range(256)) * (12 * MiB // 256)
    sha = sha256_hex(data)
    opened = cp.blob(sha, len(data))
    # When the policy becomes the stack's key before the completing POST
    cp.policy = NamespacePolicy("2d", "stack")
    done = finish_blob(cp, opened.json, data)
    # Then it is not recorded, and a new upload (under the stack's key) takes its place
    assert done.status == 200 and done.json["exists"] is False, done.raw_body
    again = finish_blob(cp, done.json, data)
    assert again.json["exists"] is True, again.raw_body
    head = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)


def test_a_blob_recorded_before_the_key_became_stack_is_not_referenced_until_uploaded_again(
    small_multipart, s3_client, payload_bucket
):
    # Given a blob recorded while the namespace's kms_key was `none`, and a failed job that
    # referenced it then
    cp = namespace(NamespacePolicy("2d", "none"))
    data = b"old-weights" * 700
    sha = create_blob(cp, data)
    job_id = enqueue_with_blobs(cp, [sha]).json["job_id"]
    take(cp, job_id)
    fail(cp, job_id)
    # When the policy becomes the stack's key and a new job references the blob
    cp.policy = NamespacePolicy("2d", "stack")
    refused = enqueue_with_blobs(cp, [sha])
    # Then it is refused as a payload uploaded before the change is (409 unknown_blob), while
    # the job that referenced it before is still retried
    assert refused.status == 409 and refused.error["code"] == "unknown_blob", refused.raw_body
    assert retry(cp, job_id).status == 200
    # When the client POSTs the blob: a fresh upload under the stack's key, not `exists`
    answer = cp.blob(sha, len(data))
    assert answer.json["exists"] is False, answer.raw_body
    again = finish_blob(cp, answer.json, data)
    # Then once uploaded again it is the namespace's blob, encrypted with the stack's key
    assert again.json["exists"] is True, again.raw_body
    head = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    assert enqueue_with_blobs(cp, [sha]).status == 201


def test_a_blob_recorded_before_a_retention_change_is_still_referenced(cp_env):
    # Given a blob recorded under `2d`
    cp = namespace(NamespacePolicy("2d"))
    sha = create_blob(cp, b"kept" * 900)
    # When the namespace's class becomes `7d`
    cp.policy = NamespacePolicy("7d")
    # Then jobs still reference it (its lifetime follows its references: the renewer keeps
    # it as long as they need it), and POST .../blobs answers that it exists
    assert enqueue_with_blobs(cp, [sha]).status == 201
    assert cp.blob(sha, 900 * 4).json["exists"] is True


# -- defect 3: a result's blobs live as long as the result's record ------------------------------


def test_a_7d_results_blob_is_kept_as_long_as_the_result_and_renewed_before_it_goes(
    cp_env, r, s3_client, payload_bucket
):
    from payloadstore_controlplane.handlers import renewals
    from payloadstore_controlplane.logic.renewals import renew_blobs
    from payloadstore_controlplane.runtime import clock

    # Given a `7d` namespace's blob, uploaded 2 days ago (its object expires in 5 days)
    cp = namespace(NamespacePolicy("7d"))
    data = b"weights" * 10_000
    sha = create_blob(cp, data)
    r.pexpire(keys.blob(cp.ns, sha), (5 * DAY - MARGIN_S) * 1000)
    # When a job's result references it
    job_id = enqueue_with_blobs(cp, []).json["job_id"]
    assert cp.poll().status == 200
    inline = base64.b64encode(msgpack.packb(1)).decode()
    posted = cp.post_result(job_id, {"resultInline": inline, "blobs": [sha]})
    assert posted.status == 204, posted.raw_body
    # Then the result's record is kept 7 days (the class), and so the blob is needed that long
    record_ends = clock.now() + r.ttl(keys.job(job_id))
    assert record_ends > clock.now() + 6 * DAY
    needs = {
        bytes(m).hex(): s / 1000
        for m, s in r.zrange(keys.blob_needs(cp.ns), 0, -1, withscores=True)
    }
    assert needs.get(sha, 0) >= record_ends - 60, needs
    # When 5 days have passed (its record now says the object expires in 4 h, within
    # BLOB_RENEW_AHEAD_S) and the renewer runs
    r.pexpire(keys.blob(cp.ns, sha), (4 * HOUR - MARGIN_S) * 1000)
    before = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    run = renew_blobs([cp.ns], renewals.renewal_deps())
    # Then it copied the object (its lifecycle counts again), and the result still answers
    # with a download of it
    assert run.renewed == 1, run
    after = s3_client.head_object(Bucket=payload_bucket, Key=f"blobs/{cp.ns}/{sha}")
    assert after["Metadata"].get("renewed-at") and not before["Metadata"].get("renewed-at")
    answer = cp.result(job_id)
    assert answer.status == 200 and answer.json["blobs"][0]["sha256"] == sha
    assert requests.get(answer.json["blobs"][0]["url"], timeout=30).content == data


def test_a_7d_jobs_argument_blobs_are_needed_for_its_queued_time_and_its_kept_record(cp_env, r):
    from payloadstore_controlplane.runtime import clock

    # Given a `7d` namespace's blob whose object expires in 5 days
    cp = namespace(NamespacePolicy("7d"))
    sha = create_blob(cp, b"table" * 1000)
    r.pexpire(keys.blob(cp.ns, sha), (5 * DAY - MARGIN_S) * 1000)
    # When a job references it
    now = clock.now()
    assert enqueue_with_blobs(cp, [sha]).status == 201
    # Then the blob is needed for the job's queued time (48 h) and its record's 7 days
    need = {
        bytes(m).hex(): s / 1000
        for m, s in r.zrange(keys.blob_needs(cp.ns), 0, -1, withscores=True)
    }
    assert now + 2 * DAY + 7 * DAY <= need[sha] <= now + 2 * DAY + 7 * DAY + 10


# -- defect 4: a result refused for a policy change can always be stored ------------------------


def test_a_multipart_result_uploaded_before_a_policy_change_is_stored_after_a_fresh_upload(
    small_multipart, s3_client, payload_bucket
):
    # Given a running job whose daemon uploaded its 12 MiB result in parts under SSE-S3
    cp = namespace(NamespacePolicy("2d", "none"))
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    lease = cp.leases[job_id]
    data = bytes(range(256)) * (12 * MiB // 256)

    def upload_parts(presigned: dict) -> None:
        mp = presigned["multipart"]
        urls = ask_parts(
            cp,
            job_id,
            part_specs(data, mp["part_bytes"]),
            role="daemon",
            kind="result",
            lease=lease,
        )
        assert urls.status == 200, urls.raw_body
        for url, chunk in zip(urls.json["parts"], split(data, PART), strict=True):
            assert put_part(url, chunk).status_code == 200

    first = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    assert first.status == 200, first.raw_body
    upload_parts(first.json)
    ref = {"bucket": first.json["bucket"], "key": first.json["key"], "size": len(data)}
    # When the policy becomes the stack's key before the post
    cp.policy = NamespacePolicy("2d", "stack")
    refused = cp.post_result(job_id, {"resultRef": ref})
    # Then the post is refused as policy_mismatch, the job still running
    assert refused.status == 409 and refused.error["code"] == "policy_mismatch", refused.raw_body
    assert cp.status(job_id).json["state"] == "running"
    # When the delivery presigns its result again
    again = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    # Then it gets a fresh upload (not the completed one), whose parts take the bytes
    assert again.status == 200, again.raw_body
    assert again.json["key"] == first.json["key"]
    assert again.json["multipart"]["upload_id"] != first.json["multipart"]["upload_id"]
    upload_parts(again.json)
    # And the post stores the result, encrypted with the stack's key
    stored = cp.post_result(job_id, {"resultRef": ref})
    assert stored.status == 204, stored.raw_body
    answer = cp.result(job_id).json
    assert answer["state"] == "succeeded"
    assert requests.get(answer["download"]["url"], timeout=60).content == data
    head = s3_client.head_object(Bucket=payload_bucket, Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)


def test_a_completed_multipart_result_is_still_not_presigned_again(small_multipart):
    # Given a job whose multipart result was stored
    cp = namespace(NamespacePolicy())
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    lease = cp.leases[job_id]
    data = bytes(range(256)) * (12 * MiB // 256)
    first = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    urls = ask_parts(cp, job_id, part_specs(data, PART), role="daemon", kind="result", lease=lease)
    for url, chunk in zip(urls.json["parts"], split(data, PART), strict=True):
        assert put_part(url, chunk).status_code == 200
    ref = {"bucket": first.json["bucket"], "key": first.json["key"], "size": len(data)}
    assert cp.post_result(job_id, {"resultRef": ref}).status == 204
    # When its delivery presigns the result again
    # Then it is refused (the job is no longer running): a stored result is never replaced
    again = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    assert again.status == 409, again.raw_body


# -- defect 11: retry and redrive judge arguments by the namespace's class ----------------------


def _failed_s3_job(cp: ControlPlane) -> str:
    job_id = cp.enqueue(ref=upload(cp, b"\x05" * 300_000)).json["job_id"]
    take(cp, job_id)
    fail(cp, job_id)
    return job_id


def test_a_1d_jobs_retry_after_a_day_is_refused_as_arguments_expired(cp_env, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given two failed S3-tier jobs of a `1d` namespace (their args objects live one day)
    cp = namespace(NamespacePolicy("1d"))
    first, second = _failed_s3_job(cp), _failed_s3_job(cp)
    # When a day and an hour have passed and a client retries one, and redrives the queue
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + DAY + HOUR)
    retried = retry(cp, first)
    redriven = redrive(cp, {"states": ["failed"]})
    # Then the retry is 409 arguments_expired and the redrive skips both: nothing is queued
    # to end payload_lost
    assert retried.status == 409, retried.raw_body
    assert (retried.error["code"], retried.error["reason"]) == (
        "not_retryable",
        "arguments_expired",
    )
    assert redriven.status == 200, redriven.raw_body
    assert redriven.json == {"retried": 0, "skipped": 2}
    assert cp.status(first).json["state"] == "failed"
    assert cp.status(second).json["state"] == "failed"
    # And within the day both are retried
    monkeypatch.setattr(clock, "now", lambda: real_now + DAY - HOUR)
    assert retry(cp, first).status == 200


def test_a_7d_jobs_retry_after_three_days_is_accepted_and_runs_from_its_args(cp_env, monkeypatch):
    from payloadstore_controlplane.logic import operate
    from payloadstore_controlplane.models.domain import job_id_time_s

    # Given a failed S3-tier job of a `7d` namespace (its args object lives 7 days), created
    # 3 days ago (past the stack's 48 h; its id's time says so, Redis's own clock untouched)
    cp = namespace(NamespacePolicy("7d"))
    job_id = _failed_s3_job(cp)
    monkeypatch.setattr(operate, "job_id_time_s", lambda j: job_id_time_s(j) - 3 * DAY)
    # When a client retries it
    reply = retry(cp, job_id)
    # Then it is queued again, and a daemon downloads its arguments
    assert reply.status == 200, reply.raw_body
    delivery = take(cp, job_id)
    got = requests.get(delivery["download"]["url"], timeout=30)
    assert got.status_code == 200 and got.content == b"\x05" * 300_000


def test_a_retry_judges_arguments_uploaded_before_a_change_by_their_own_class(cp_env, monkeypatch):
    from payloadstore_controlplane.logic import operate
    from payloadstore_controlplane.models.domain import job_id_time_s

    # Given a failed S3-tier job whose args were uploaded while its namespace was `1d`, in a
    # namespace that is `7d` now, created 3 days ago
    cp = namespace(NamespacePolicy("1d"))
    job_id = _failed_s3_job(cp)
    cp.policy = NamespacePolicy("7d")
    monkeypatch.setattr(operate, "job_id_time_s", lambda j: job_id_time_s(j) - 3 * DAY)
    # When a client retries it
    reply = retry(cp, job_id)
    # Then it is refused: its args object, of the 1-day class, is gone whatever the class now
    assert reply.status == 409, reply.raw_body
    assert reply.error["reason"] == "arguments_expired"


# -- jobs that end outside a result post keep a 7d/30d record -----------------------------------


@pytest.mark.parametrize(
    "how", ["cancelled", "purged", "delivery_limit", "payload_lost", "payload_corrupt"]
)
def test_a_7d_job_that_ends_outside_a_result_post_keeps_its_record_7_days(how, settings_env, r):
    # Given a `7d` namespace's job (one delivery allowed, one payload_lost ends it)
    settings_env(MAX_DELIVERIES="1", PAYLOAD_LOST_POLICY="fail", VISIBILITY_TIMEOUT_S="1")
    cp = namespace(NamespacePolicy("7d"))
    job_id = cp.enqueue(ref=upload(cp, b"\x06" * 1000)).json["job_id"]
    # When it ends cancelled while queued (a cancel, a purge), at the delivery cap, or with its
    # payload lost or corrupt
    if how == "cancelled":
        assert cancel(cp, job_id).status == 200
    elif how == "purged":
        assert purge(cp).json["cancelled"] == 1
    elif how == "delivery_limit":
        take(cp, job_id)
        time.sleep(1.2)  # its daemon died: the lease lapses
        assert cp.poll().status == 204
    else:
        take(cp, job_id)
        lost = cp.report(job_id, {"state": how, "detail": "gone"})
        assert lost.status == 204, lost.raw_body
    state = cp.status(job_id).json["state"]
    assert state in ("cancelled", "failed", how), state
    # Then its record is kept for the class's 7 days, as a result post's end is
    assert r.ttl(keys.job(job_id)) > 6 * DAY


def test_a_blob_uploaded_again_after_a_key_change_is_not_promised_past_its_new_object(
    small_multipart, r, s3_client, payload_bucket
):
    # Given a `30d` namespace's blob recorded under kms_key `none` (its record promises about
    # 30 days), and a failed job that referenced it then
    cp = namespace(NamespacePolicy("30d", "none"))
    data = b"shared-table" * 700
    sha = create_blob(cp, data)
    job_id = enqueue_with_blobs(cp, [sha]).json["job_id"]
    take(cp, job_id)
    fail(cp, job_id)
    # When the policy becomes `1d` with the stack's key, a client POSTs the blob (a fresh
    # upload under the new policy) and PUTs it, but never POSTs again to have it verified
    cp.policy = NamespacePolicy("1d", "stack")
    answer = cp.blob(sha, len(data))
    assert answer.status == 200 and answer.json["exists"] is False, answer.raw_body
    assert put_presigned(answer.json["upload"], data).status_code == 200
    key = f"blobs/{cp.ns}/{sha}"
    assert tags(s3_client, payload_bucket, key) == {RETENTION_TAG: "1d"}
    # Then the record no longer promises the 30 days of the object it replaced: it ends
    # within the day the new object lives, before the margin
    assert r.pttl(keys.blob(cp.ns, sha)) <= (DAY - MARGIN_S) * 1000
    # And the job retried now needs the blob past that day: the renewer is told to keep it
    assert retry(cp, job_id).status == 200
    needs = {bytes(m).hex() for m in r.zrange(keys.blob_needs(cp.ns), 0, -1)}
    assert sha in needs


def test_a_multipart_result_verified_then_refused_503_is_stored_after_a_policy_change(
    small_multipart, monkeypatch, s3_client, payload_bucket
):
    from payloadstore_controlplane.logic import daemon
    from payloadstore_controlplane.models.errors import ServiceUnavailable

    # Given a running job whose daemon uploaded its 12 MiB result in parts under SSE-S3, and
    # whose post completed and verified the upload, then answered 503 (Redis failed before
    # the result was stored: the job still runs)
    cp = namespace(NamespacePolicy("2d", "none"))
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    lease = cp.leases[job_id]
    data = bytes(range(256)) * (12 * MiB // 256)

    def upload_parts(presigned: dict) -> None:
        mp = presigned["multipart"]
        urls = ask_parts(
            cp,
            job_id,
            part_specs(data, mp["part_bytes"]),
            role="daemon",
            kind="result",
            lease=lease,
        )
        assert urls.status == 200, urls.raw_body
        for url, chunk in zip(urls.json["parts"], split(data, PART), strict=True):
            assert put_part(url, chunk).status_code == 200

    first = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    assert first.status == 200, first.raw_body
    upload_parts(first.json)
    ref = {"bucket": first.json["bucket"], "key": first.json["key"], "size": len(data)}
    stored_for_real = daemon._complete

    def unavailable(*args, **kwargs):
        raise ServiceUnavailable("redis unreachable")

    monkeypatch.setattr(daemon, "_complete", unavailable)
    assert cp.post_result(job_id, {"resultRef": ref}).status == 503
    monkeypatch.setattr(daemon, "_complete", stored_for_real)
    assert cp.status(job_id).json["state"] == "running"
    # When the policy becomes the stack's key before the daemon posts again
    cp.policy = NamespacePolicy("2d", "stack")
    refused = cp.post_result(job_id, {"resultRef": ref})
    assert refused.status == 409 and refused.error["code"] == "policy_mismatch", refused.raw_body
    # Then the delivery's re-presign opens a fresh upload under the current policy, and the
    # result is stored in the same delivery, encrypted with the stack's key
    again = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    assert again.status == 200, again.raw_body
    assert again.json["key"] == first.json["key"]
    assert again.json["multipart"]["upload_id"] != first.json["multipart"]["upload_id"]
    upload_parts(again.json)
    stored = cp.post_result(job_id, {"resultRef": ref})
    assert stored.status == 204, stored.raw_body
    answer = cp.result(job_id).json
    assert answer["state"] == "succeeded"
    assert requests.get(answer["download"]["url"], timeout=60).content == data
    head = s3_client.head_object(Bucket=payload_bucket, Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)


def test_a_crc64nvme_result_verified_then_refused_503_is_stored_after_a_policy_change(
    small_multipart, monkeypatch, s3_client, payload_bucket
):
    from payloadstore_controlplane.logic import daemon
    from payloadstore_controlplane.models.errors import ServiceUnavailable
    from tests.integration.test_crc64nvme import crc, presign, put_parts, ref_of

    # Given a running job whose daemon uploaded its 12 MiB result in CRC64NVME parts (the
    # SDK's default) under SSE-S3, and whose post completed and verified the upload, then
    # answered 503 before the result was stored
    cp = namespace(NamespacePolicy("2d", "none"))
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    data = bytes(range(256)) * (12 * MiB // 256)
    first = presign(cp, len(data), role="daemon", job_id=job_id, checksum_algorithm="CRC64NVME")
    assert first.status == 200, first.raw_body
    put_parts(first.json, data, PART)
    ref = ref_of(first.json, len(data), crc64nvme=crc(data))
    stored_for_real = daemon._complete

    def unavailable(*args, **kwargs):
        raise ServiceUnavailable("redis unreachable")

    monkeypatch.setattr(daemon, "_complete", unavailable)
    assert cp.post_result(job_id, {"resultRef": ref}).status == 503
    monkeypatch.setattr(daemon, "_complete", stored_for_real)
    # When the policy becomes the stack's key before the daemon posts again
    cp.policy = NamespacePolicy("2d", "stack")
    refused = cp.post_result(job_id, {"resultRef": ref})
    assert refused.status == 409 and refused.error["code"] == "policy_mismatch", refused.raw_body
    # Then the delivery's re-presign opens a fresh upload, and the result is stored
    again = presign(cp, len(data), role="daemon", job_id=job_id, checksum_algorithm="CRC64NVME")
    assert again.status == 200, again.raw_body
    assert again.json["multipart"]["upload_id"] != first.json["multipart"]["upload_id"]
    put_parts(again.json, data, PART)
    stored = cp.post_result(job_id, {"resultRef": ref})
    assert stored.status == 204, stored.raw_body
    answer = cp.result(job_id).json
    assert answer["state"] == "succeeded" and answer["resultRef"]["crc64nvme"] == crc(data)
    head = s3_client.head_object(Bucket=payload_bucket, Key=first.json["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
