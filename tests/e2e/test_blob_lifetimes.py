"""A blob outlives the jobs that reference it (issue 33, defect 4), proven against an S3 emulator
that applies the bucket's lifecycle with days of a few seconds (PAYLOADSTORE_S3_DAY_S): a blob
referenced by a job queued past several lifecycle days (and, in the slow test, for the whole
queue retention) is still readable when the job runs and when its result is read, while a blob
no job references is gone. The renewals function runs inside the gateway on a shrunk timer, as
its EventBridge rule runs it in a deployed stack."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from pathlib import Path

import httpx
import pytest
from botocore.exceptions import ClientError

from payloadstore import Client, codec
from payloadstore._blob_cache import ENV_BLOB_CACHE
from payloadstore_devstack.gateway import GatewayProcess
from tests.e2e.sdk_helpers import daemon_thread, unique_queue
from tests.support.emulator import scaled_days_emulator
from tests.support.env import single_server_env

pytestmark = pytest.mark.e2e

DAY_S = 4  # a lifecycle day, in seconds, for the emulator and the control plane alike
RETENTION_S = 60  # queue retention = result retention: the shortest the settings allow
BUCKET = "lifetimes"
REDIS_DB = 3
MiB = 1 << 20


@pytest.fixture(scope="module")
def scaled_stack(_gateway_services, redis_server, tmp_path_factory):
    """An emulator whose days last DAY_S seconds (the default policy's blobs, tagged 2d, expire
    8 to 12 s after their last write), and a gateway whose settings say the same (BLOB_DAY_S)
    and whose renewer runs every 0.2 s (its 5 minutes, scaled). Tokens are the session's (SSM of
    the session's emulator)."""
    logs = Path(tmp_path_factory.mktemp("lifetimes"))
    with scaled_days_emulator(logs, DAY_S, BUCKET) as (emulator, s3):
        env = {
            **_gateway_services["env"],
            "AWS_ENDPOINT_URL_S3": emulator.endpoint,
            "S3_ENDPOINT_URL": emulator.endpoint,
            "PAYLOAD_BUCKET": BUCKET,
            **single_server_env(redis_server.url.rsplit("/", 1)[0] + f"/{REDIS_DB}"),
            "QUEUE_RETENTION_S": str(RETENTION_S),
            "RESULT_TTL_S": str(RETENTION_S),
            "VISIBILITY_TIMEOUT_S": "30",
            "IDEMPOTENCY_TTL_S": str(RETENTION_S),
            "BLOB_DAY_S": str(DAY_S),
            "BLOB_RENEW_AHEAD_S": str(DAY_S // 2),
        }
        gateway = GatewayProcess(
            env=env,
            log_path=logs / "gateway.log",
            schedules=("renewals",),
            schedule_scale=0.2 / 300,
        ).start()
        try:
            yield gateway, s3, _gateway_services["tokens"]["dev"]
        finally:
            gateway.stop()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_BLOB_CACHE, str(tmp_path / "blob-cache"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def exists(s3, key: str) -> bool:
    try:
        s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def enqueue_now(gateway, token: str, queue: str, model) -> str:
    """The job `fn(model)`, enqueued over HTTP with no Idempotency-Key: its id's time is now (an
    id derived from a key starts at its minute, and with a 60 s retention would count as up to
    a minute older than the job)."""
    encoded = codec.encode({"args": [model], "kwargs": {}})
    body = {
        "payloadInline": base64.b64encode(encoded.tobytes()).decode(),
        "blobs": [model.sha256],
    }
    answer = httpx.post(
        f"{gateway.url}/v1/namespaces/dev/queues/{queue}/jobs",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["job_id"]


def lifetime_run(scaled_stack, queued_s: float, result_after_s: float) -> None:
    gateway, s3, tokens = scaled_stack
    client = Client(gateway.url, tokens["client_token"], "dev")
    daemon_client = Client(gateway.url, tokens["daemon_token"], "dev")
    queue = unique_queue("lifetimes")
    # Given a blob a job references, queued with no daemon, and a blob no job references
    data = os.urandom(MiB)
    model = client.blob(data)
    job = client.job(enqueue_now(gateway, tokens["client_token"], queue, model))
    unreferenced = client.blob(os.urandom(1000))
    # When the job waits queued for several lifecycle days
    time.sleep(queued_s)
    # Then the unreferenced blob is gone (the emulator applies the rule)...
    assert not exists(s3, f"blobs/dev/{unreferenced.sha256}")
    # ...while the referenced one is still there: the daemon reads it when the job runs, and
    # hands the blob back as the job's result
    with daemon_thread(daemon_client, queue, lambda b: [sha(b.read()), b]):
        digest, back = job.result(timeout=60)
    assert digest == sha(data)
    # And when the result is read later, its blob is still readable
    time.sleep(result_after_s)
    assert exists(s3, f"blobs/dev/{model.sha256}")
    assert back.read() == data


@pytest.mark.slow
def test_a_blob_outlives_a_job_queued_past_several_lifecycle_days(scaled_stack):
    # (~35 s: the stack's start, 13 s queued, the result read 9 s after the job ended)
    lifetime_run(scaled_stack, queued_s=3 * DAY_S + 1, result_after_s=2 * DAY_S + 1)


@pytest.mark.slow
def test_a_blob_outlives_a_job_queued_for_the_whole_retention_and_its_result_retention(
    scaled_stack,
):
    # (~2 min: 56 s queued, then the result read 52 s after the job ended)
    lifetime_run(scaled_stack, queued_s=RETENTION_S - 4, result_after_s=RETENTION_S - 8)


@pytest.mark.slow
def test_a_7d_results_blob_outlives_the_result_retention_as_its_record_does(
    scaled_stack, _gateway_services, ssm_client
):
    # (~2 min: the result read back RESULT_TTL_S and a whole 7d lifecycle after it ended)
    from payloadstore_controlplane.store.tokens import TokenStore

    gateway = scaled_stack[0]
    # Given a `7d` namespace (its finished jobs keep their records 7 days), a blob of it, and a
    # daemon whose job's result is that blob (its arguments name no blob)
    ns = f"week-{os.urandom(4).hex()}"
    store = TokenStore(ssm_client, _gateway_services["token_path"], cache_s=0)
    tokens = {role: store.mint(ns, role)[0] for role in ("client", "daemon")}
    store.set_policy(ns, retention="7d")
    client = Client(gateway.url, tokens["client"], ns)
    worker = Client(gateway.url, tokens["daemon"], ns)
    queue = unique_queue("week")
    data = os.urandom(100_000)
    model = client.blob(data)
    with daemon_thread(worker, queue, lambda _: model):
        job = client.queue(queue).add(b"the model, please")
        back = job.result(timeout=60)
    assert back.sha256 == model.sha256
    # When RESULT_TTL_S and a whole 7d lifecycle (28 to 32 s here, and a sweep) have passed
    time.sleep(RETENTION_S + 10 * DAY_S)
    # Then the result still answers (its record is the class's), and the blob URL it hands out
    # still downloads the blob: the renewer kept it as long as that record names it
    answer = httpx.get(
        f"{gateway.url}/v1/namespaces/{ns}/jobs/{job.job_id}/result",
        headers={"Authorization": f"Bearer {tokens['client']}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    url = answer.json()["blobs"][0]["url"]
    got = httpx.get(url, timeout=30)
    assert got.status_code == 200, f"the result's blob is gone: {got.status_code}"
    assert got.content == data
