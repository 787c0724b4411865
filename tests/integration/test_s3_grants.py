"""The local S3 emulator holds each function to the template's S3 grants (issue 23).

One table (payloadstore_controlplane/grants.py) writes the CDK roles and is what the emulator
enforces on requests signed with each function's local keys: 403 AccessDenied for an action the
function lacks, and 403 instead of 404 for a missing key when the caller, or the signer of a
presigned URL, lacks s3:ListBucket. The last tests run the `not_uploaded` and `payload_lost`
paths against two emulators over HTTP, one with the template's table and one with the same
table less s3:ListBucket: the grant is what turns S3's 403 into the 404 those answers need."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import httpx
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from payloadstore._http import RetryPolicy
from payloadstore._transfer import download
from payloadstore.errors import PayloadLost
from payloadstore_controlplane import grants
from payloadstore_controlplane.store.s3.signer import SigV4Presigner
from payloadstore_controlplane.store.sigv4 import invocation_running_as
from payloadstore_devstack.s3_credentials import function_credentials
from payloadstore_devstack.s3_grants import GRANTS_ENV
from payloadstore_devstack.services import MotoServer, create_payload_bucket
from tests.integration.conftest import reset_caches
from tests.support.control_plane import upload
from tests.support.env import patched_environ

REGION = "us-east-1"


def client_as(group: str, endpoint: str):
    key_id, secret, _ = function_credentials(group)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(signature_version="s3v4", retries={"max_attempts": 1}),
    )


def code_of(call) -> str:
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"]


# -- the table -------------------------------------------------------------------------------


def test_the_functions_that_head_or_presign_gets_hold_list_bucket():
    table = grants.grant_table()
    for group in ("payloads", "jobs", "daemon"):
        assert table[group].allows("s3:GetObject", "payloads/2026/01/01/j/args"), group
        assert table[group].lists_bucket, group
        assert not table[group].allows("s3:GetObject", "exec/log"), group
    assert table["payloads"].allows("s3:PutObject", "payloads/x")
    assert not table["payloads"].allows("s3:AbortMultipartUpload", "payloads/x")
    # jobs and daemon complete multipart references (CompleteMultipartUpload is s3:PutObject)
    for group in ("jobs", "daemon"):
        for action in ("s3:PutObject", "s3:ListMultipartUploadParts", "s3:AbortMultipartUpload"):
            assert table[group].allows(action, "payloads/x"), (group, action)
            assert not table[group].allows(action, "exec/x"), (group, action)
    assert "authorizer" not in table and "admin" not in table


# -- what each function may do, over HTTP ---------------------------------------------------


def test_actions_a_function_lacks_are_access_denied(moto_server, payload_bucket, s3_client):
    endpoint = moto_server.endpoint
    key = f"payloads/grants/{uuid.uuid4().hex}"
    s3_client.put_object(Bucket=payload_bucket, Key=key, Body=b"x")
    # the authorizer, admin and metrics have no S3 object actions at all
    for group in ("authorizer", "admin", "metrics", "public"):
        s3 = client_as(group, endpoint)
        assert code_of(lambda s3=s3: s3.put_object(Bucket=payload_bucket, Key=key, Body=b"y")) == (
            "AccessDenied"
        ), group
    for group in ("authorizer", "admin", "metrics", "public"):
        s3 = client_as(group, endpoint)
        assert code_of(lambda s3=s3: s3.get_object(Bucket=payload_bucket, Key=key)) == (
            "AccessDenied"
        ), group
    # no function deletes, and none reads outside payloads/
    s3_client.put_object(Bucket=payload_bucket, Key="exec/other", Body=b"z")
    payloads = client_as("payloads", endpoint)
    assert code_of(lambda: payloads.delete_object(Bucket=payload_bucket, Key=key)) == (
        "AccessDenied"
    )
    assert code_of(lambda: payloads.get_object(Bucket=payload_bucket, Key="exec/other")) == (
        "AccessDenied"
    )
    # what is granted works
    assert client_as("jobs", endpoint).get_object(Bucket=payload_bucket, Key=key)["Body"].read()
    assert client_as("public", endpoint).head_bucket(Bucket=payload_bucket)
    assert s3_client.get_object(Bucket=payload_bucket, Key=key)["Body"].read() == b"x"


def test_with_list_bucket_a_missing_key_is_404_to_the_caller_and_to_a_presigned_get(
    moto_server, payload_bucket
):
    key = f"payloads/grants/{uuid.uuid4().hex}/never"
    jobs = client_as("jobs", moto_server.endpoint)
    assert code_of(lambda: jobs.head_object(Bucket=payload_bucket, Key=key)) == "404"
    url = presigned_get_as("daemon", moto_server.endpoint, payload_bucket, key)
    assert requests.get(url, timeout=10).status_code == 404


def test_the_handlers_sign_with_their_own_functions_keys(cp):
    r = cp.presign_put(10)
    assert "X-Amz-Credential=local-payloads%2F" in r.json["url"]


# -- the same paths, with and without s3:ListBucket ---------------------------------------


def presigned_get_as(group: str, endpoint: str, bucket: str, key: str) -> str:
    with invocation_running_as(function_credentials(group)):
        return SigV4Presigner(REGION, endpoint).url("GET", bucket, key, 300)


WITHOUT_LIST_BUCKET = grants.grant_table(
    bucket_actions={
        g: tuple(a for a in actions if a != grants.LIST_BUCKET)
        for g, actions in grants.BUCKET_ACTIONS.items()
    }
)


@pytest.fixture(scope="module")
def emulator_without_list_bucket(tmp_path_factory, aws_env):
    with patched_environ({GRANTS_ENV: grants.table_to_json(WITHOUT_LIST_BUCKET)}):
        server = MotoServer(
            log_path=Path(tmp_path_factory.mktemp("moto-nolist")) / "moto.log"
        ).start()
    yield server
    server.stop()


@pytest.fixture(params=["template", "without_list_bucket"])
def table(request, cp_env, moto_server, payload_bucket):
    """The control plane against an emulator enforcing the template's table, or that table
    less s3:ListBucket."""
    if request.param == "template":
        yield request.param, moto_server.endpoint
        return
    server = request.getfixturevalue("emulator_without_list_bucket")
    create_payload_bucket(
        boto3.client("s3", endpoint_url=server.endpoint, region_name=REGION), payload_bucket
    )
    endpoint = {"S3_ENDPOINT_URL": server.endpoint, "AWS_ENDPOINT_URL_S3": server.endpoint}
    with patched_environ(endpoint):
        reset_caches()
        yield request.param, server.endpoint
    reset_caches()


def test_not_uploaded_needs_list_bucket(table, cp):
    which, _ = table
    # Given an args key and a result key issued and never uploaded
    r = cp.presign_put(10)
    args = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": 10}
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    r = cp.presign_put(10, role="daemon", job_id=job)
    result = {"kind": "s3", "bucket": r.json["bucket"], "key": r.json["key"], "size": 10}
    # When the client enqueues and the daemon posts them
    enqueued, posted = cp.enqueue(ref=args), cp.post_result(job, {"resultRef": result})
    if which == "template":
        # Then, with s3:ListBucket, the HEAD is 404 and both say not_uploaded
        assert enqueued.status == 409 and enqueued.error["reason"] == "not_uploaded"
        assert posted.status == 409 and posted.error["reason"] == "not_uploaded"
    else:
        # Without it the HEAD is 403, as on AWS: a storage error naming the grants, not 409
        for out in (enqueued, posted):
            assert out.status == 502 and out.error["code"] == "storage_error", out.raw_body
            assert "s3:ListBucket" in out.error["message"]


def test_payload_lost_needs_list_bucket(table, cp):
    which, endpoint = table
    # Given an S3-tier job whose args object is gone when the daemon fetches it
    ref = upload(cp, b"soon gone")
    job = cp.enqueue(ref=ref).json["job_id"]
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION).delete_object(
        Bucket=ref["bucket"], Key=ref["key"]
    )
    delivery = cp.poll().json
    grant = {"url": delivery["download"]["url"], "method": "GET"}
    # The URL the daemon function presigned answers 404 with the grant, 403 without
    status = requests.get(grant["url"], timeout=10).status_code
    assert status == (404 if which == "template" else 403)

    # When the SDK downloads it (re-presigning through the payloads function on a 403)
    def fetch():
        with httpx.Client() as s3:
            return download(
                s3,
                grant,
                size=ref["size"],
                sha256=None,
                presign_again=lambda: cp.presign_get(ref["key"]).json,
                retry=RetryPolicy(max_attempts=3, base_s=0.0),
                job_id=job,
                key=ref["key"],
            )

    if which == "template":
        # Then it is payload_lost, which the daemon reports
        with pytest.raises(PayloadLost):
            fetch()
    else:
        # Then a missing object looks like a refused URL and payload_lost never fires
        with pytest.raises(Exception) as refused:
            fetch()
        assert not isinstance(refused.value, PayloadLost)
