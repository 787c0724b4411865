"""Namespace policies (retention, kms_key, inline), proven by S3's own answers on the emulator:
the real handlers, real redis-server, the S3 emulator over HTTP (which verifies the signed
headers and enforces the stack's S3 and KMS grants)."""

from __future__ import annotations

import uuid

import pytest
import requests

from payloadstore_controlplane.models.policy import RETENTION_TAG, NamespacePolicy
from payloadstore_controlplane.store.sigv4 import invocation_running_as
from payloadstore_devstack.s3_credentials import function_credentials
from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
from tests.support.control_plane import ControlPlane, put_presigned, sha256_hex, upload
from tests.support.events import FakeLambdaContext

# A key the control plane is told its roles are granted on, but the emulator's KMS grants do
# not list: what S3 answers when the signing role may not use the key.
UNGRANTED_KEY = "arn:aws:kms:us-east-1:000000000000:key/11111111-2222-3333-4444-555555555555"


@pytest.fixture
def policy_env(settings_env):
    settings_env(
        KMS_KEY_ARN=LOCAL_KMS_KEY_ARN,
        KMS_KEY_ARNS=UNGRANTED_KEY,
        CONSUME_ARGS_GRACE_S="0",
        CONSUME_RESULT_GRACE_S="1",
    )


@pytest.fixture
def kms_ns(policy_env) -> ControlPlane:
    """A namespace with `7d` + the stack's key + inline `never`."""
    return ControlPlane("k" + uuid.uuid4().hex[:10], NamespacePolicy("7d", "stack", "never"))


@pytest.fixture
def consume_ns(policy_env) -> ControlPlane:
    """A namespace with `consume` + SSE-S3."""
    return ControlPlane("c" + uuid.uuid4().hex[:10], NamespacePolicy("consume", "none", "allowed"))


def _tags(s3_client, bucket: str, key: str) -> dict[str, str]:
    return {
        t["Key"]: t["Value"] for t in s3_client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    }


def _exists(s3_client, bucket: str, key: str) -> bool:
    try:
        s3_client.head_object(Bucket=bucket, Key=key)
    except s3_client.exceptions.ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def _run_scheduled() -> dict:
    """The scheduled function (queue metrics and the `consume` deletions), as EventBridge runs it."""
    from payloadstore_controlplane.handlers import metrics
    from payloadstore_devstack.scheduler import scheduled_event

    with invocation_running_as(function_credentials("metrics")):
        return metrics.lambda_handler(scheduled_event("metrics", "us-east-1"), FakeLambdaContext())


def test_presign_signs_the_namespace_tag_and_kms_key(kms_ns, consume_ns):
    # Given a `7d` + stack-key namespace and a `consume` + SSE-S3 one
    # When each presigns an upload
    kms = kms_ns.presign_put(100)
    plain = consume_ns.presign_put(100)
    # Then the headers the uploader must send carry the namespace's tag and encryption
    assert kms.status == 200, kms.raw_body
    assert kms.json["headers"]["x-amz-tagging"] == f"{RETENTION_TAG}=7d"
    assert kms.json["headers"]["x-amz-server-side-encryption"] == "aws:kms"
    assert kms.json["headers"]["x-amz-server-side-encryption-aws-kms-key-id"] == LOCAL_KMS_KEY_ARN
    assert plain.json["headers"]["x-amz-tagging"] == f"{RETENTION_TAG}=consume"
    assert plain.json["headers"]["x-amz-server-side-encryption"] == "AES256"
    assert "x-amz-server-side-encryption-aws-kms-key-id" not in plain.json["headers"]


@pytest.mark.parametrize(
    "left_out",
    [
        "x-amz-tagging",
        "x-amz-server-side-encryption-aws-kms-key-id",
        "x-amz-server-side-encryption",
    ],
)
def test_an_upload_without_a_signed_policy_header_is_refused_by_s3(kms_ns, left_out):
    # Given a presigned PUT of a `7d` + stack-key namespace
    data = b"policy" * 20
    r = kms_ns.presign_put(len(data), sha256=sha256_hex(data))
    headers = {k: v for k, v in r.json["headers"].items() if k != left_out}
    # When the uploader leaves one of the policy headers out
    up = requests.put(r.json["url"], data=data, headers=headers, timeout=30)
    # Then S3 refuses it (the header is signed), and nothing is stored
    assert up.status_code == 403, up.text
    assert "SignatureDoesNotMatch" in up.text


def test_an_upload_with_another_tag_value_is_refused_by_s3(kms_ns):
    data = b"policy" * 20
    r = kms_ns.presign_put(len(data), sha256=sha256_hex(data))
    headers = {**r.json["headers"], "x-amz-tagging": f"{RETENTION_TAG}=30d"}
    up = requests.put(r.json["url"], data=data, headers=headers, timeout=30)
    assert up.status_code == 403, up.text


def test_stored_objects_carry_the_namespace_key_and_tag(kms_ns, consume_ns, s3_client):
    # Given an upload through each namespace's presigned PUT, enqueued
    refs = {}
    for cp in (kms_ns, consume_ns):
        ref = upload(cp, b"x" * 300)
        assert cp.enqueue(ref=ref).status == 201
        refs[cp.ns] = ref
    # Then S3 answers the stack key + tag 7d for one, SSE-S3 + tag consume for the other
    kms_ref, plain_ref = refs[kms_ns.ns], refs[consume_ns.ns]
    head = s3_client.head_object(Bucket=kms_ref["bucket"], Key=kms_ref["key"])
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"] == LOCAL_KMS_KEY_ARN
    assert _tags(s3_client, kms_ref["bucket"], kms_ref["key"]) == {RETENTION_TAG: "7d"}
    head = s3_client.head_object(Bucket=plain_ref["bucket"], Key=plain_ref["key"])
    assert head["ServerSideEncryption"] == "AES256"
    assert _tags(s3_client, plain_ref["bucket"], plain_ref["key"]) == {RETENTION_TAG: "consume"}


def test_a_presigned_get_of_an_sse_kms_object_works_without_credentials(kms_ns):
    # Given an SSE-KMS payload enqueued in the stack-key namespace
    data = b"secret-bytes" * 50
    ref = upload(kms_ns, data)
    kms_ns.enqueue(ref=ref)
    # When a daemon polls it and downloads through the presigned URL it got (no AWS credentials)
    polled = kms_ns.poll()
    assert polled.status == 200, polled.raw_body
    url = polled.json["download"]["url"]
    got = requests.get(url, timeout=30)
    # Then S3 decrypts for the signer's role: the bytes come back
    assert got.status_code == 200, got.text
    assert got.content == data


def test_an_object_without_the_namespace_policy_is_refused_at_enqueue(kms_ns, s3_client):
    # Given an upload presigned under the namespace's earlier policy (2d, SSE-S3)
    kms_ns.policy = NamespacePolicy()
    ref = upload(kms_ns, b"y" * 200)
    # When the policy becomes 7d + stack key before the enqueue
    kms_ns.policy = NamespacePolicy("7d", "stack", "allowed")
    r = kms_ns.enqueue(ref=ref)
    # Then the CP's verifying HEAD refuses it with 409 policy_mismatch, and no job exists
    assert r.status == 409, r.raw_body
    assert r.error["code"] == "policy_mismatch"
    job_id = ref["key"].split("/")[-2]
    assert kms_ns.status(job_id).status == 404


def test_a_key_the_signing_role_is_not_granted_on_is_refused_by_s3(policy_env):
    # Given a namespace whose policy names a key the functions' roles are not granted on in S3
    cp = ControlPlane("u" + uuid.uuid4().hex[:10], NamespacePolicy("2d", UNGRANTED_KEY, "allowed"))
    data = b"z" * 100
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    assert r.status == 200, r.raw_body
    # When the client uploads through the URL exactly as told
    up = put_presigned(r.json, data)
    # Then S3 refuses it: the signer may not generate data keys with that key
    assert up.status_code == 403, up.text
    assert "AccessDenied" in up.text


def test_inline_never_refuses_inline_payloads_and_results(kms_ns):
    # Given a namespace with inline `never`
    # When a client enqueues inline bytes
    r = kms_ns.enqueue(inline=b"\x01small")
    # Then it is refused with 409 inline_never, saying what to do
    assert r.status == 409, r.raw_body
    assert r.error["code"] == "inline_never"
    assert "S3" in r.error["message"]
    # And a daemon's inline result is refused the same way
    ref = upload(kms_ns, b"a" * 100)
    job_id = kms_ns.enqueue(ref=ref).json["job_id"]
    assert kms_ns.poll().status == 200
    posted = kms_ns.post_result(job_id, {"resultInline": "AQ=="})
    assert posted.status == 409, posted.raw_body
    assert posted.error["code"] == "inline_never"
    assert kms_ns.status(job_id).json["state"] == "running"


def test_config_carries_the_callers_policy(kms_ns, cp):
    r = kms_ns.call("public", "GET", "/v1/config")
    assert r.status == 200, r.raw_body
    assert r.json["policy"] == {"retention": "7d", "kms_key": "stack", "inline": "never"}
    assert cp.call("public", "GET", "/v1/config").json["policy"] == {
        "retention": "2d",
        "kms_key": "none",
        "inline": "allowed",
    }


def _succeed_through_s3(cp: ControlPlane, args: bytes, result: bytes) -> tuple[dict, dict, str]:
    ref = upload(cp, args)
    job_id = cp.enqueue(ref=ref).json["job_id"]
    assert cp.poll().status == 200
    result_ref = upload(cp, result, role="daemon", job_id=job_id)
    posted = cp.post_result(job_id, {"resultRef": result_ref})
    assert posted.status == 204, posted.raw_body
    return ref, result_ref, job_id


def test_consume_deletes_a_succeeded_jobs_args_and_a_read_result(
    consume_ns, s3_client, monkeypatch
):
    from payloadstore_controlplane.runtime import clock

    # Given a `consume` namespace's job that succeeded, args and result in S3
    args_ref, result_ref, job_id = _succeed_through_s3(consume_ns, b"A" * 400, b"R" * 500)
    bucket = args_ref["bucket"]
    # When the scheduled function runs (args grace 0 s in this test)
    _run_scheduled()
    # Then the argument object is gone from the bucket, the unread result is not
    assert not _exists(s3_client, bucket, args_ref["key"])
    assert _exists(s3_client, bucket, result_ref["key"])
    # When the client reads the result, and reads it again within the grace (1 s here)
    first = consume_ns.result(job_id)
    assert first.status == 200 and first.json["resultRef"]["key"] == result_ref["key"]
    _run_scheduled()
    again = consume_ns.result(job_id)
    assert requests.get(again.json["download"]["url"], timeout=30).content == b"R" * 500
    # Then once the grace is over and the last download URL has expired (PRESIGN_TTL_S) with
    # the grace again to finish a download, the scheduled function deletes the result object
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 900 + 2 * 1 + 1)
    _run_scheduled()
    assert not _exists(s3_client, bucket, result_ref["key"])


def test_consume_a_re_read_past_the_grace_is_410_result_consumed(
    consume_ns, s3_client, monkeypatch
):
    from payloadstore_controlplane.runtime import clock

    # Given a `consume` namespace's job that succeeded (args grace 0 s, result grace 1 s here)
    args_ref, result_ref, job_id = _succeed_through_s3(consume_ns, b"A" * 400, b"R" * 500)
    bucket = args_ref["bucket"]
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now)
    # When the client reads the result, then reads it again and presigns it within the grace
    assert consume_ns.result(job_id).status == 200
    again = consume_ns.result(job_id)
    # Then the re-read still downloads the bytes
    assert again.status == 200, again.raw_body
    assert requests.get(again.json["download"]["url"], timeout=30).content == b"R" * 500
    assert consume_ns.presign_get(result_ref["key"], role="client").status == 200
    # And the succeeded job's arguments (grace 0 s) are refused as consumed, not presigned
    args = consume_ns.presign_get(args_ref["key"], role="client")
    assert args.status == 410, args.raw_body
    assert args.error["code"] == "arguments_consumed"
    assert args.error["reason"] == "arguments_consumed"
    # When the grace is over, the last download URL expired (PRESIGN_TTL_S) and the grace
    # again passed, and the scheduled function deleted the result object
    monkeypatch.setattr(clock, "now", lambda: real_now + 900 + 2 * 1 + 1)
    _run_scheduled()
    assert not _exists(s3_client, bucket, result_ref["key"])
    # Then a re-read of the result answers 410 result_consumed, saying when it was deleted
    late = consume_ns.result(job_id)
    assert late.status == 410, late.raw_body
    assert late.error["code"] == "result_consumed"
    assert late.error["reason"] == "result_consumed"
    assert "consumed" in late.error["message"] and late.error["deleted_at"].endswith("Z")
    # And a presign of its key too: no URL to an object that is not there
    for role in ("client", "daemon"):
        presigned = consume_ns.presign_get(result_ref["key"], role=role)
        assert presigned.status == 410, presigned.raw_body
        assert presigned.error["code"] == "result_consumed"
    # And the operators' view shows both as consumed, references kept, no download
    view = consume_ns.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/jobs/{job_id}/payloads",
        {"ns": consume_ns.ns, "job_id": job_id},
    ).json
    assert view["args"]["gone"] == "consumed" and "download" not in view["args"]
    assert (
        view["result"]["gone"] == "consumed" and view["result"]["ref"]["key"] == result_ref["key"]
    )


def test_consume_a_result_never_read_is_not_refused(consume_ns, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given a `consume` job that succeeded, its result not read yet
    _, _, job_id = _succeed_through_s3(consume_ns, b"A" * 400, b"R" * 500)
    real_now = clock.now()
    # When an hour passes and the scheduled function runs (the read starts the grace, not the end)
    monkeypatch.setattr(clock, "now", lambda: real_now + 3600)
    _run_scheduled()
    # Then the first read gets its result
    first = consume_ns.result(job_id)
    assert first.status == 200, first.raw_body
    assert requests.get(first.json["download"]["url"], timeout=30).content == b"R" * 500


def test_consume_keeps_a_failed_jobs_args_for_a_retry(consume_ns, s3_client):
    # Given a `consume` job that failed
    ref = upload(consume_ns, b"F" * 400)
    job_id = consume_ns.enqueue(ref=ref).json["job_id"]
    assert consume_ns.poll().status == 200
    failed = consume_ns.post_result(job_id, {"error": {"type": "ValueError", "message": "no"}})
    assert failed.status == 204, failed.raw_body
    # When the scheduled function runs
    _run_scheduled()
    # Then its arguments are still there (the lifecycle's 2 days keep them for a retry)
    assert _exists(s3_client, ref["bucket"], ref["key"])


def test_default_policy_namespaces_are_untouched(cp, s3_client):
    # Given a namespace with no policy: tag 2d, SSE-S3, inline allowed (today's behaviour)
    ref = upload(cp, b"d" * 300)
    assert cp.enqueue(ref=ref).status == 201
    assert _tags(s3_client, ref["bucket"], ref["key"]) == {RETENTION_TAG: "2d"}
    assert cp.enqueue(inline=b"\x01").status == 201


# -- the policy store: admin actions, the authorizer's context --------------------------------


def _admin(event: dict) -> dict:
    from payloadstore_controlplane.handlers import admin

    return admin.lambda_handler(event, FakeLambdaContext())


def _authorize(token: str) -> dict:
    import copy

    from payloadstore_controlplane.handlers import authorizer
    from tests.support.events import load_event

    event = copy.deepcopy(load_event("authorizer_request"))
    event["headers"] = {"Authorization": f"Bearer {token}"}
    return authorizer.lambda_handler(event, FakeLambdaContext())


def test_admin_sets_and_gets_a_policy_and_the_authorizer_passes_it_on(policy_env, ssm_client):
    from payloadstore_controlplane.store.tokens import TokenStore
    from tests.support.control_plane import TOKEN_PATH

    ns = "p" + uuid.uuid4().hex[:10]
    token, _ = TokenStore(ssm_client, TOKEN_PATH, cache_s=0).mint(ns, "client")
    # Given no policy: the defaults
    assert _admin({"action": "get_policy", "namespace": ns})["policy"] == {
        "retention": "2d",
        "kms_key": "none",
        "inline": "allowed",
    }
    # When the admin sets retention and inline (the key left out keeps its value)
    answer = _admin({"action": "set_policy", "namespace": ns, "retention": "7d", "inline": "never"})
    assert answer == {
        "namespace": ns,
        "policy": {"retention": "7d", "kms_key": "none", "inline": "never"},
    }
    answer = _admin({"action": "set_policy", "namespace": ns, "kms_key": "stack"})
    assert answer["policy"] == {"retention": "7d", "kms_key": "stack", "inline": "never"}
    # Then get_policy answers it, and the authorizer hands it to the handlers with the token
    assert _admin({"action": "get_policy", "namespace": ns})["policy"]["kms_key"] == "stack"
    context = _authorize(token)["context"]
    assert NamespacePolicy.from_context(context) == NamespacePolicy("7d", "stack", "never")
    # And the token listing shows tokens only, the policy beside them left out
    listed = _admin({"action": "list"})["tokens"]
    assert [t["role"] for t in listed if t["namespace"] == ns] == ["client"]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("retention", "3d", "retention '3d' must be one of consume, 1d, 2d, 7d, 30d"),
        ("inline", "sometimes", "inline 'sometimes' must be one of allowed, never"),
        ("kms_key", "my-key", "kms_key 'my-key' must be none, stack or a KMS key ARN"),
        ("kms_key", "arn:aws:kms:us-east-1:000000000000:key/not-granted-1", "not granted"),
    ],
)
def test_a_bad_policy_value_is_refused_and_nothing_is_written(policy_env, field, value, says):
    ns = "b" + uuid.uuid4().hex[:10]
    _admin({"action": "set_policy", "namespace": ns, "retention": "1d"})
    answer = _admin({"action": "set_policy", "namespace": ns, field: value})
    assert says in answer["error"]
    assert _admin({"action": "get_policy", "namespace": ns})["policy"] == {
        "retention": "1d",
        "kms_key": "none",
        "inline": "allowed",
    }


# -- multipart uploads and blobs follow the policy ---------------------------------------------


def test_a_multipart_upload_carries_the_namespace_key_and_tag(kms_ns, settings_env, s3_client):
    from tests.integration.test_multipart import PART, part_specs, put_part, split

    # Given multipart from 6 MiB in 5 MiB parts, and the `7d` + stack-key namespace
    settings_env(
        KMS_KEY_ARN=LOCAL_KMS_KEY_ARN,
        MULTIPART_THRESHOLD=str(6 * 2**20),
        MULTIPART_PART_BYTES=str(PART),
    )
    data = bytes(range(256)) * (12 * 2**20 // 256)
    # When a client uploads 12 MiB in parts (SHA256 parts) and enqueues the reference
    r = kms_ns.presign_put(len(data), sha256=None)
    assert r.status == 200, r.raw_body
    mp = r.json["multipart"]
    urls = kms_ns.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/parts",
        {"ns": kms_ns.ns},
        body={"job_id": r.json["job_id"], "parts": part_specs(data, mp["part_bytes"])},
    )
    assert urls.status == 200, urls.raw_body
    for url, chunk in zip(urls.json["parts"], split(data, mp["part_bytes"]), strict=True):
        assert put_part(url, chunk).status_code == 200
    ref = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": len(data)}
    enq = kms_ns.enqueue(ref=ref)
    assert enq.status == 201, enq.raw_body
    # Then the object S3 assembled is encrypted with the stack's key and tagged 7d
    head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    assert _tags(s3_client, ref["bucket"], ref["key"]) == {RETENTION_TAG: "7d"}


def test_a_blob_carries_the_namespace_key_and_tag(kms_ns, s3_client, payload_bucket):
    from tests.support.control_plane import create_blob

    data = b"blob-under-policy" * 100
    sha = create_blob(kms_ns, data)
    key = f"blobs/{kms_ns.ns}/{sha}"
    head = s3_client.head_object(Bucket=payload_bucket, Key=key)
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    assert _tags(s3_client, payload_bucket, key) == {RETENTION_TAG: "7d"}


def test_presign_get_is_410_past_a_one_day_retention(policy_env, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given a payload of a namespace with retention 1d
    cp = ControlPlane("r" + uuid.uuid4().hex[:10], NamespacePolicy("1d", "none", "allowed"))
    ref = upload(cp, b"one day only")
    real_now = clock.now()
    # When a day and a second have passed (the object may still be in S3: lifecycle rounds)
    monkeypatch.setattr(clock, "now", lambda: real_now + 24 * 3600 + 1)
    r = cp.presign_get(ref["key"])
    # Then the download is refused as gone, naming the retention
    assert r.status == 410, r.raw_body
    assert "24 h" in r.error["message"]
    # And within the day it is served
    monkeypatch.setattr(clock, "now", lambda: real_now + 24 * 3600 - 60)
    assert cp.presign_get(ref["key"]).status == 200


def test_on_a_local_emulator_the_stack_key_needs_no_setting(cp_env, ssm_client):
    # Given a control plane on the local S3 emulator with no KMS_KEY_ARN set
    import os

    assert not os.environ.get("KMS_KEY_ARN")
    ns = "s" + uuid.uuid4().hex[:10]
    # When the admin sets kms_key stack
    answer = _admin({"action": "set_policy", "namespace": ns, "kms_key": "stack"})
    assert answer["policy"]["kms_key"] == "stack", answer
    # Then uploads are signed with the local stack's key
    cp = ControlPlane(ns, NamespacePolicy("2d", "stack", "allowed"))
    headers = cp.presign_put(10).json["headers"]
    assert headers["x-amz-server-side-encryption-aws-kms-key-id"] == LOCAL_KMS_KEY_ARN


def test_a_download_signed_by_a_role_without_the_key_grant_is_refused_by_s3(kms_ns, s3_client):
    # Given an issued payload key whose object is encrypted with a key the functions' roles are
    # not granted on (written there by the operator, who may)
    data = b"k" * 64
    ref = upload(kms_ns, data)
    s3_client.put_object(
        Bucket=ref["bucket"],
        Key=ref["key"],
        Body=data,
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=UNGRANTED_KEY,
    )
    # When a daemon downloads it through a URL the control plane presigned
    url = kms_ns.presign_get(ref["key"]).json["url"]
    got = requests.get(url, timeout=30)
    # Then S3 refuses: the signer may not decrypt with that key
    assert got.status_code == 403, got.text
    assert "AccessDenied" in got.text
    # While the same object under the stack's key downloads
    s3_client.put_object(
        Bucket=ref["bucket"],
        Key=ref["key"],
        Body=data,
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=LOCAL_KMS_KEY_ARN,
    )
    assert requests.get(url, timeout=30).content == data


def test_inline_never_refuses_each_inline_item_of_a_batch_and_takes_references(kms_ns):
    import base64

    from tests.integration.test_batch import batch

    # Given a batch of an inline item and a reference, for an inline-never namespace
    ref = upload(kms_ns, b"r" * 100)
    r = batch(kms_ns, [{"payloadInline": base64.b64encode(b"\x01").decode()}, {"payloadRef": ref}])
    # Then the inline item answers 409 inline_never in place, the reference is a job
    assert r.status == 200, r.raw_body
    first, second = r.json["jobs"]
    assert first["error"]["code"] == "inline_never"
    assert second["tier"] == "s3" and second["job_id"]


def test_a_finished_job_of_a_7d_namespace_keeps_its_record_for_7_days(
    kms_ns, consume_ns, redis_target, monkeypatch
):
    import redis as redis_lib
    from redis.cluster import RedisCluster

    from payloadstore_controlplane.runtime import clock
    from payloadstore_controlplane.store import keys

    # the control plane's own Redis: the single test server, or the cluster under
    # PAYLOADSTORE_REDIS=cluster
    url = redis_target["REDIS_URL"]
    r = (
        RedisCluster.from_url(url)
        if redis_target.get("REDIS_CLUSTER")
        else redis_lib.Redis.from_url(url)
    )
    ids = {}
    for cp in (kms_ns, consume_ns):
        # Given a job of each namespace that finished with a result in S3
        _, result_ref, job_id = _succeed_through_s3(cp, b"A" * 200, b"R" * 300)
        ids[cp.ns] = (job_id, result_ref)
    # Then the 7d namespace's job record lives 7 days, the other's RESULT_TTL_S (48 h at most)
    week_job, week_result = ids[kms_ns.ns]
    assert 7 * 86_400 - 60 <= r.ttl(keys.job(week_job)) <= 7 * 86_400
    assert r.ttl(keys.done(week_job)) >= 7 * 86_400 - 60
    assert r.ttl(keys.job(ids[consume_ns.ns][0])) <= 2 * 86_400
    # And its result is still served 3 days on (past 48 h), and refused past its 7 days
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 3 * 86_400)
    assert kms_ns.presign_get(week_result["key"]).status == 200
    assert kms_ns.result(week_job).json["state"] == "succeeded"
    monkeypatch.setattr(clock, "now", lambda: real_now + 7 * 86_400 + 60)
    assert kms_ns.presign_get(week_result["key"]).status == 410


def test_consume_a_download_started_within_the_grace_keeps_its_object(
    consume_ns, s3_client, monkeypatch
):
    from payloadstore_controlplane.runtime import clock

    # Given a `consume` namespace's job whose result was read (grace 1 s here), its answer's
    # download URL valid PRESIGN_TTL_S (900 s)
    _, result_ref, job_id = _succeed_through_s3(consume_ns, b"A" * 400, b"R" * 500)
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now)
    read = consume_ns.result(job_id)
    assert read.status == 200, read.raw_body
    # When the grace is over and the scheduled function runs (the next minute), while a long
    # download through that URL is still going
    monkeypatch.setattr(clock, "now", lambda: real_now + 61)
    _run_scheduled()
    # Then the object is still there for it: the download gets the bytes
    assert requests.get(read.json["download"]["url"], timeout=30).content == b"R" * 500
    # And a new read answers 410 result_consumed all the same (no new URL is handed out)
    late = consume_ns.result(job_id)
    assert (late.status, late.error["code"]) == (410, "result_consumed")
    # When that URL has expired and the grace passed once more, Then the object is deleted
    monkeypatch.setattr(clock, "now", lambda: real_now + 900 + 2 * 1 + 1)
    _run_scheduled()
    assert not _exists(s3_client, result_ref["bucket"], result_ref["key"])
