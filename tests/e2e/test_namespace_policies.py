"""Namespace policies end to end: the `payloadstore namespace policy` command, and two namespaces
of one local stack with different policies (`7d` + the stack's key + inline `never`; `consume`
+ SSE-S3) moving payloads through the SDK and a daemon that hold no AWS credentials, proven by
S3's own answers on the emulator and by a scan of every Redis key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from payloadstore import Client
from payloadstore_controlplane.models.policy import RETENTION_TAG
from payloadstore_controlplane.store.tokens import TokenStore
from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
from tests.e2e.sdk_helpers import daemon_thread, unique_queue
from tests.support.env import single_server_env

pytestmark = pytest.mark.e2e


def _cli(gateway, *args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "payloadstore"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "payloadstore.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYLOADSTORE_")}
    return subprocess.run(
        [
            *command,
            *args,
            "--path",
            gateway.token_path,
            "--ssm-endpoint",
            gateway.s3_endpoint,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _namespace(gateway, ssm_client, prefix: str) -> tuple[str, dict[str, str]]:
    """A fresh namespace with a client and a daemon token."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    store = TokenStore(ssm_client, gateway.token_path, cache_s=0)
    return ns, {role: store.mint(ns, role)[0] for role in ("client", "daemon")}


def _redis_bytes(r) -> list[bytes]:
    """Every key and every value of the database (every primary's, on a cluster), whatever its
    type."""
    out: list[bytes] = []
    for key in r.scan_iter(count=1000):
        out.append(key)
        kind = r.type(key)
        if kind == b"string":
            out.append(r.get(key) or b"")
        elif kind == b"hash":
            out.extend(k + v for k, v in r.hgetall(key).items())
        elif kind == b"list":
            out.extend(r.lrange(key, 0, -1))
        elif kind == b"set":
            out.extend(r.smembers(key))
        elif kind == b"zset":
            out.extend(r.zrange(key, 0, -1))
        elif kind == b"stream":
            for _, fields in r.xrange(key):
                out.extend(k + v for k, v in fields.items())
    return out


def test_namespace_policy_command_prints_sets_and_refuses(local_gateway, ssm_client):
    ns = f"cli-{uuid.uuid4().hex[:8]}"
    # Given a namespace with no policy: the command without options prints the defaults
    shown = _cli(local_gateway, "namespace", "policy", ns)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"retention": "2d", "kms_key": "none", "inline": "allowed"}
    # When options are given, the policy changes and is printed
    changed = _cli(
        local_gateway,
        "namespace",
        "policy",
        ns,
        "--retention",
        "7d",
        "--kms-key",
        "stack",
        "--inline",
        "never",
    )
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout) == {"retention": "7d", "kms_key": "stack", "inline": "never"}
    # And an option left out keeps its value
    again = _cli(local_gateway, "namespace", "policy", ns, "--retention", "consume")
    assert json.loads(again.stdout) == {
        "retention": "consume",
        "kms_key": "stack",
        "inline": "never",
    }
    # A bad value is refused with the reason, and nothing is written
    bad = _cli(local_gateway, "namespace", "policy", ns, "--kms-key", "not-a-key")
    assert bad.returncode != 0
    assert "kms_key 'not-a-key' must be none, stack or a KMS key ARN" in bad.stderr
    bad = _cli(local_gateway, "namespace", "policy", ns, "--retention", "3d")
    assert bad.returncode != 0 and "3d" in bad.stderr
    assert json.loads(_cli(local_gateway, "namespace", "policy", ns).stdout)["retention"] == (
        "consume"
    )


def test_two_namespaces_get_what_their_policies_say(local_gateway, ssm_client, s3_client):
    # Given two namespaces of one stack: `7d` + stack key + inline never, and `consume` + SSE-S3
    kms_ns, kms_tokens = _namespace(local_gateway, ssm_client, "kms")
    plain_ns, plain_tokens = _namespace(local_gateway, ssm_client, "plain")
    assert (
        _cli(
            local_gateway,
            "namespace",
            "policy",
            kms_ns,
            "--retention",
            "7d",
            "--kms-key",
            "stack",
            "--inline",
            "never",
        ).returncode
        == 0
    )
    assert (
        _cli(local_gateway, "namespace", "policy", plain_ns, "--retention", "consume").returncode
        == 0
    )
    marker = b"MARK" + uuid.uuid4().hex.encode()
    results = {}
    for ns, tokens in ((kms_ns, kms_tokens), (plain_ns, plain_tokens)):
        client = Client(local_gateway.url, tokens["client"], ns)
        worker = Client(local_gateway.url, tokens["daemon"], ns)
        queue = unique_queue("policy")
        # When the SDK sends a small payload (well under INLINE_THRESHOLD) and a daemon with no
        # AWS credentials runs it and returns a small result
        with daemon_thread(worker, queue, lambda data: data + b"-done"):
            job = client.queue(queue).add(marker + ns.encode())
            assert job.result(timeout=60) == marker + ns.encode() + b"-done"
        results[ns] = (client, job)
    # Then the inline-never namespace sent both through S3, encrypted with the stack's key and
    # tagged 7d; the other kept them inline (SSE-S3 applies to what it uploads)
    kms_client, kms_job = results[kms_ns]
    assert kms_client.config.policy.inline == "never"
    status = kms_job.status()
    args_ref, result_ref = status.payload_ref, status.result_ref
    assert args_ref is not None and result_ref is not None
    for ref in (args_ref, result_ref):
        head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
        assert head["ServerSideEncryption"] == "aws:kms"
        assert head["SSEKMSKeyId"] == LOCAL_KMS_KEY_ARN
        tags = s3_client.get_object_tagging(Bucket=ref["bucket"], Key=ref["key"])["TagSet"]
        assert tags == [{"Key": RETENTION_TAG, "Value": "7d"}]
    # And no byte of the inline-never namespace's payloads is in Redis, while the other's
    # inline result is (the scan can see a payload when one is there)
    every = b"\n".join(_redis_bytes(local_gateway.redis_client()))
    assert marker + kms_ns.encode() not in every
    assert marker + plain_ns.encode() in every


def test_sse_kms_payloads_in_parts_move_through_presigned_urls(
    start_local_gateway, ssm_client, s3_client
):
    # Given a gateway where 12 MiB goes up in parts, and a namespace with the stack's key
    gateway = start_local_gateway(
        MULTIPART_THRESHOLD=str(6 * 2**20), MULTIPART_PART_BYTES=str(5 * 2**20)
    )
    ns, tokens = _namespace(gateway, ssm_client, "parts")
    assert _cli(gateway, "namespace", "policy", ns, "--kms-key", "stack").returncode == 0
    client = Client(gateway.url, tokens["client"], ns)
    worker = Client(gateway.url, tokens["daemon"], ns)
    queue = unique_queue("kms-parts")
    data = os.urandom(12 * 2**20)
    # When a client and a daemon holding no AWS credentials move it both ways
    with daemon_thread(worker, queue, lambda value: bytes(value)[::-1]):
        job = client.queue(queue).add(data)
        assert job.result(timeout=120) == data[::-1]
    # Then both objects are SSE-KMS under the stack's key, tagged with the default retention
    status = job.status()
    for ref in (status.payload_ref, status.result_ref):
        assert ref is not None
        head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == (
            "aws:kms",
            LOCAL_KMS_KEY_ARN,
        )
        tags = s3_client.get_object_tagging(Bucket=ref["bucket"], Key=ref["key"])["TagSet"]
        assert tags == [{"Key": RETENTION_TAG, "Value": "2d"}]


def test_the_async_client_uploads_small_payloads_of_an_inline_never_namespace(
    local_gateway, ssm_client
):
    import asyncio

    from payloadstore import AsyncClient

    ns, tokens = _namespace(local_gateway, ssm_client, "anever")
    assert _cli(local_gateway, "namespace", "policy", ns, "--inline", "never").returncode == 0

    async def run() -> list[str]:
        async with AsyncClient(local_gateway.url, tokens["client"], ns) as client:
            queue = client.queue(unique_queue("anever"))
            one = await queue.add(b"tiny")
            many = await queue.map([b"a", b"b"])
            return [one.tier, *(job.tier for job in many)]

    # When the async client sends a few bytes, one by one and as a batch
    tiers = asyncio.run(run())
    # Then each went through S3, the namespace keeping nothing inline
    assert tiers and set(tiers) == {"s3"}


def test_a_policy_changed_to_never_while_a_client_runs_sends_its_bytes_through_s3(
    local_gateway, ssm_client
):
    # Given a client that read its namespace's config while inline was allowed
    ns, tokens = _namespace(local_gateway, ssm_client, "late")
    client = Client(local_gateway.url, tokens["client"], ns)
    assert client.config.policy.inline == "allowed"
    queue = client.queue(unique_queue("late"))
    assert queue.add(b"before").tier == "inline"
    # When the policy becomes inline never
    assert _cli(local_gateway, "namespace", "policy", ns, "--inline", "never").returncode == 0
    # Then the next small payloads are refused inline (409 inline_never) and go through S3
    assert queue.add(b"after").tier == "s3"
    assert {job.tier for job in queue.map([b"x", b"y"])} == {"s3"}


# -- the lifecycle rule of each namespace's class applies (an emulator with 1-second days) ----

DAY_S = 1
LIFECYCLE_BUCKET = "policy-lifecycle"


@pytest.fixture(scope="module")
def one_second_days(_gateway_services, redis_server, tmp_path_factory):
    """An emulator whose lifecycle days last a second, and a gateway in front of it."""
    from payloadstore_devstack.gateway import GatewayProcess
    from tests.support.emulator import scaled_days_emulator

    logs = Path(tmp_path_factory.mktemp("policy-lifecycle"))
    with scaled_days_emulator(logs, DAY_S, LIFECYCLE_BUCKET) as (emulator, s3):
        env = {
            **_gateway_services["env"],
            "AWS_ENDPOINT_URL_S3": emulator.endpoint,
            "S3_ENDPOINT_URL": emulator.endpoint,
            "PAYLOAD_BUCKET": LIFECYCLE_BUCKET,
            **single_server_env(redis_server.url.rsplit("/", 1)[0] + "/4"),
        }
        gateway = GatewayProcess(env=env, log_path=logs / "gateway.log").start()
        try:
            yield gateway, s3
        finally:
            gateway.stop()


def test_each_namespace_object_expires_by_the_rule_of_its_retention_class(
    one_second_days, _gateway_services, ssm_client
):
    gateway, s3 = one_second_days
    store = TokenStore(ssm_client, _gateway_services["token_path"], cache_s=0)

    def namespace_with(retention: str, kms_key: str, inline: str) -> Client:
        ns = f"life-{retention}-{uuid.uuid4().hex[:6]}"
        store.set_policy(
            ns, retention=retention, kms_key=kms_key, inline=inline, stack_key_arn=LOCAL_KMS_KEY_ARN
        )
        return Client(gateway.url, store.mint(ns, "client")[0], ns)

    def exists(key: str) -> bool:
        try:
            s3.head_object(Bucket=LIFECYCLE_BUCKET, Key=key)
        except s3.exceptions.ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    # Given the two namespaces of the issue (7d + stack key + inline never; consume + SSE-S3)
    week = namespace_with("7d", "stack", "never")
    consume = namespace_with("consume", "none", "allowed")
    # When each enqueues a payload through S3 (days here last one second)
    keys = {}
    for client in (week, consume):
        job = client.queue(unique_queue("life")).add(os.urandom(300_000))
        keys[client.namespace] = job.status().payload_ref["key"]
    written = time.monotonic()
    # Then S3's lifecycle removes each by its class's rule: `consume` (2 days, its backstop)
    # first, while the 7-day object stays, which then goes after its 7 days
    while exists(keys[consume.namespace]):
        assert time.monotonic() - written < 3 * DAY_S + 2, "the consume object outlived 2 days"
        time.sleep(0.2)
    assert exists(keys[week.namespace]), "the 7-day object went with the 2-day one"
    while exists(keys[week.namespace]):
        assert time.monotonic() - written < 8 * DAY_S + 2, "the 7-day object outlived 7 days"
        time.sleep(0.2)
    assert time.monotonic() - written >= 6 * DAY_S - 0.5


def test_a_policy_changed_between_upload_and_enqueue_is_uploaded_again_once(
    local_gateway, ssm_client, s3_client
):
    # Given a client whose first upload is signed under the default policy, and a policy that
    # changes to 7d + the stack's key right after that upload (before the enqueue)
    ns, tokens = _namespace(local_gateway, ssm_client, "race")
    client = Client(local_gateway.url, tokens["client"], ns)
    store = TokenStore(ssm_client, local_gateway.token_path, cache_s=0)
    original = client.payloads.store
    uploads = []

    def store_then_change_policy(*args, **kwargs):
        answer = original(*args, **kwargs)
        uploads.append(answer)
        if len(uploads) == 1:
            store.set_policy(ns, retention="7d", kms_key="stack", stack_key_arn=LOCAL_KMS_KEY_ARN)
        return answer

    client.payloads.store = store_then_change_policy  # type: ignore[method-assign]
    # When it enqueues a payload through S3
    job = client.queue(unique_queue("race")).add(os.urandom(300_000))
    # Then the first enqueue was refused (409 policy_mismatch), the bytes went up once more
    # under the new policy, and the job's object carries its key and tag
    assert len(uploads) == 2
    ref = job.status().payload_ref
    head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    tags = s3_client.get_object_tagging(Bucket=ref["bucket"], Key=ref["key"])["TagSet"]
    assert tags == [{"Key": RETENTION_TAG, "Value": "7d"}]


def test_a_daemon_whose_policy_changes_before_its_result_post_uploads_it_again(
    local_gateway, ssm_client, s3_client
):
    # Given a daemon whose first result upload is signed under the default policy, and a policy
    # that turns to the stack's key right after that upload (before the result post)
    ns, tokens = _namespace(local_gateway, ssm_client, "dpol")
    client = Client(local_gateway.url, tokens["client"], ns)
    worker = Client(local_gateway.url, tokens["daemon"], ns)
    store = TokenStore(ssm_client, local_gateway.token_path, cache_s=0)
    original = worker.payloads.store
    result_uploads = []

    def store_then_change_policy(encoded, kind, *args, **kwargs):
        answer = original(encoded, kind, *args, **kwargs)
        if kind == "result":
            result_uploads.append(answer)
            if len(result_uploads) == 1:
                store.set_policy(ns, kms_key="stack", stack_key_arn=LOCAL_KMS_KEY_ARN)
        return answer

    worker.payloads.store = store_then_change_policy  # type: ignore[method-assign]
    queue = unique_queue("dpol")
    data = os.urandom(300_000)
    # When the daemon runs a job whose result goes through S3
    with daemon_thread(worker, queue, lambda value: bytes(value)[::-1]):
        job = client.queue(queue).add(data)
        # Then its first post was refused (409 policy_mismatch), the result went up once more
        # under the new policy, and the job succeeded with it
        assert job.result(timeout=60) == data[::-1]
    assert len(result_uploads) == 2
    ref = job.status().result_ref
    head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)


def test_a_daemon_whose_multipart_result_meets_a_policy_change_uploads_it_fresh(
    small_parts_gateway, ssm_client, s3_client
):
    # Given a daemon whose first result upload, 12 MiB in parts, is signed under the default
    # policy, and a policy that turns to the stack's key right after it (before the post,
    # which completes the upload and then finds it under the old policy)
    gateway = small_parts_gateway
    ns, tokens = _namespace(gateway, ssm_client, "mpol")
    client = Client(gateway.url, tokens["client"], ns)
    worker = Client(gateway.url, tokens["daemon"], ns)
    store = TokenStore(ssm_client, gateway.token_path, cache_s=0)
    original = worker.payloads.store
    result_uploads = []

    def store_then_change_policy(encoded, kind, *args, **kwargs):
        answer = original(encoded, kind, *args, **kwargs)
        if kind == "result":
            result_uploads.append(answer)
            if len(result_uploads) == 1:
                store.set_policy(ns, kms_key="stack", stack_key_arn=LOCAL_KMS_KEY_ARN)
        return answer

    worker.payloads.store = store_then_change_policy  # type: ignore[method-assign]
    queue = unique_queue("mpol")
    data = os.urandom(12 << 20)
    # When the daemon runs a job whose result goes up in parts
    with daemon_thread(worker, queue, lambda value: data):
        job = client.queue(queue).add(b"x")
        # Then the first post was refused (409 policy_mismatch), the delivery got a fresh
        # upload under the new policy (not the completed one), and the job succeeded with it
        # in this delivery: no run again after the visibility timeout
        assert job.result(timeout=60) == data
    assert len(result_uploads) == 2
    status = job.status()
    assert status.attempts == 1
    ref = status.result_ref
    head = s3_client.head_object(Bucket=ref["bucket"], Key=ref["key"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)


def test_a_consumed_result_read_past_its_grace_raises_payload_consumed(
    start_local_gateway, ssm_client
):
    import asyncio

    from payloadstore import AsyncClient, PayloadConsumed

    # Given a stack whose results are consumed 1 s after their first read, and a `consume`
    # namespace keeping nothing inline (so both payloads go through S3)
    gateway = start_local_gateway(CONSUME_RESULT_GRACE_S="1")
    ns, tokens = _namespace(gateway, ssm_client, "eaten")
    policy = ("--retention", "consume", "--inline", "never")
    assert _cli(gateway, "namespace", "policy", ns, *policy).returncode == 0
    client = Client(gateway.url, tokens["client"], ns)
    worker = Client(gateway.url, tokens["daemon"], ns)
    queue = unique_queue("eaten")
    with daemon_thread(worker, queue, lambda data: data + b"-done"):
        job = client.queue(queue).add(b"eat me")
        # When the client reads the result, and reads it again within the grace
        assert job.result(timeout=60) == b"eat me-done"
        assert client.job(job.job_id).result(timeout=10) == b"eat me-done"
    # When it reads it again after the grace
    time.sleep(1.3)
    with pytest.raises(PayloadConsumed) as late:
        client.job(job.job_id).result(timeout=10)
    # Then the SDK says the result was consumed (a PayloadLost for code that handles those)
    assert late.value.reason == "result_consumed" and late.value.job_id == job.job_id
    assert "consumed" in str(late.value) and late.value.deleted_at

    async def read_async() -> None:
        async with AsyncClient(gateway.url, tokens["client"], ns) as aclient:
            await aclient.job(job.job_id).result(timeout=10)

    # And the async client says the same
    with pytest.raises(PayloadConsumed, match="consumed"):
        asyncio.run(read_async())
