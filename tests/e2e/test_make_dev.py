"""`make dev` as a user meets it: a foreground process that serves the API until Ctrl-C.

Each test runs the stack in a process group of its own, with its own port and state dir
(PAYLOADSTORE_PORT / PAYLOADSTORE_STATE_DIR / PAYLOADSTORE_STATE_FILE), so a developer's own
`make dev` and `.devstack.json` are never touched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from payloadstore_devstack.services import find_redis_server, free_port, port_is_open

pytestmark = pytest.mark.e2e

# The server's binary name under the engine in use (PAYLOADSTORE_ENGINE: redis-server or
# valkey-server), as the stack's child processes show it.
SERVER = os.path.basename(find_redis_server(install=False))

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_KEYS = {"endpoint", "s3_endpoint", "bucket", "redis_url", "namespaces"}


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def command_of(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return "?"


class StackProcess:
    """A stack as `make dev` starts it. `redis` is its PAYLOADSTORE_REDIS, `single` (the
    default a user meets) unless a test asks for `cluster`, whatever the suite's own is."""

    def __init__(
        self, tmp_path: Path, command: list[str], port: int | None = None, redis: str = "single"
    ):
        self.port = port or free_port()
        self.state_dir = tmp_path / "state"
        self.state_file = tmp_path / "devstack.json"
        self.log_path = tmp_path / f"stack-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            "PAYLOADSTORE_PORT": str(self.port),
            "PAYLOADSTORE_STATE_DIR": str(self.state_dir),
            "PAYLOADSTORE_STATE_FILE": str(self.state_file),
            "PYTHONUNBUFFERED": "1",
            "PAYLOADSTORE_REDIS": redis,
        }
        env.pop("MAKEFLAGS", None)  # a `make test` parent must not turn this make into a sub-make
        env.pop("MAKELEVEL", None)
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - the stack writes it until ctrl_c()
        # Its own process group: SIGINT to the group is what Ctrl-C in a terminal sends.
        self.proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 240.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while not self.state_file.exists():
            assert self.proc.poll() is None, (
                f"stack exited with {self.proc.returncode}:\n{self.output()}"
            )
            assert time.monotonic() < deadline, (
                f"no {self.state_file} after {timeout_s}s:\n{self.output()}"
            )
            time.sleep(0.2)
        return json.loads(self.state_file.read_text())

    def ctrl_c(self, timeout_s: float = 60.0) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def stacks():
    started: list[StackProcess] = []
    yield started
    for stack in started:
        for pid in descendants(stack.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stack.kill()


def test_make_dev_serves_the_api_and_ctrl_c_leaves_no_child(tmp_path, stacks):
    # Given `make dev` started as a user would, on a free port
    stack = StackProcess(tmp_path, ["make", "--no-print-directory", "dev"])
    stacks.append(stack)
    # When .devstack.json appears
    state = stack.wait_ready()
    # Then it says where everything is, with a client and a daemon token per namespace
    assert set(state) == STATE_KEYS
    assert state["endpoint"] == f"http://127.0.0.1:{stack.port}"
    assert set(state["namespaces"]) == {"dev", "sandbox"}
    for tokens in state["namespaces"].values():
        assert set(tokens) == {"client_token", "daemon_token"}
        assert all(t.startswith("pst_") for t in tokens.values())
    # And the API answers: health without a token, config with one
    health = requests.get(f"{state['endpoint']}/v1/health", timeout=30)
    assert health.status_code == 200, health.text
    dev = state["namespaces"]["dev"]
    config = requests.get(
        f"{state['endpoint']}/v1/config",
        headers={"Authorization": f"Bearer {dev['client_token']}"},
        timeout=30,
    )
    assert config.status_code == 200, config.text
    assert config.json()["inline_threshold"] == 262144
    # And the banner told the user where to point the SDK
    assert state["endpoint"] in stack.output()

    children = descendants(stack.proc.pid)
    commands = [command_of(p) for p in children]
    redis_port = int(state["redis_url"].rsplit(":", 1)[1].split("/")[0])
    s3_port = int(state["s3_endpoint"].rsplit(":", 1)[1])
    assert any(SERVER in c and str(redis_port) in c for c in commands), commands
    assert any(f"-p {s3_port}" in c for c in commands), commands  # the S3/SSM emulator

    # When the user presses Ctrl-C
    stack.ctrl_c()
    # Then no process it started is left, and no port stays open
    survivors = [f"{p} {command_of(p)}" for p in children if alive(p)]
    assert survivors == []
    for port in (stack.port, redis_port, s3_port):
        assert not port_is_open(port), f"port {port} still open"
    # And the data is kept: the append-only file and the tokens stay in the state dir
    assert (stack.state_dir / "redis").is_dir()
    assert any((stack.state_dir / "redis").rglob("*.aof*"))
    assert json.loads((stack.state_dir / "tokens.json").read_text()) == state["namespaces"]
    # And the file describing a running stack is gone with it
    assert not stack.state_file.exists()


def test_make_dev_on_a_cluster_runs_a_job_and_ctrl_c_leaves_no_node(tmp_path, stacks):
    # Given `PAYLOADSTORE_REDIS=cluster make dev` (docs/local-stack.md)
    stack = StackProcess(tmp_path, ["make", "--no-print-directory", "dev"], redis="cluster")
    stacks.append(stack)
    # When .devstack.json appears
    state = stack.wait_ready()
    # Then it lists the cluster's nodes: 3 primaries, each with its replica
    assert set(state) == STATE_KEYS | {"redis_nodes"}
    nodes = state["redis_nodes"]
    primaries = {n["port"] for n in nodes if n["role"] == "primary"}
    replicas = [n for n in nodes if n["role"] == "replica"]
    assert len(primaries) == 3 and sorted(n["primary_port"] for n in replicas) == sorted(primaries)
    # And a job runs through it: enqueue, poll, result (the handlers in cluster mode, writes
    # acknowledged by a replica)
    url, dev = state["endpoint"], state["namespaces"]["dev"]
    client = {"Authorization": f"Bearer {dev['client_token']}"}
    daemon = {"Authorization": f"Bearer {dev['daemon_token']}"}
    queue = f"cl-{uuid.uuid4().hex[:6]}"
    enq = requests.post(
        f"{url}/v1/namespaces/dev/queues/{queue}/jobs",
        headers=client,
        json={"payloadInline": base64.b64encode(b"on a cluster").decode()},
        timeout=30,
    )
    assert enq.status_code == 201, enq.text
    polled = requests.post(
        f"{url}/v1/daemon/poll",
        headers=daemon,
        json={"namespace": "dev", "queues": [queue], "wait_s": 5, "daemon_id": "d1"},
        timeout=30,
    )
    assert polled.status_code == 200, polled.text
    assert polled.json()["job_id"] == enq.json()["job_id"]
    job_id = polled.json()["job_id"]
    posted = requests.post(
        f"{url}/v1/namespaces/dev/jobs/{job_id}/result",
        headers=daemon,
        json={"resultInline": base64.b64encode(b"done").decode(), "lease": polled.json()["lease"]},
        timeout=30,
    )
    assert posted.status_code == 204, posted.text
    got = requests.get(
        f"{url}/v1/namespaces/dev/jobs/{job_id}/result?wait=5", headers=client, timeout=30
    )
    assert got.status_code == 200, got.text
    assert got.json()["state"] == "succeeded"
    assert base64.b64decode(got.json()["resultInline"]) == b"done"
    # When the user presses Ctrl-C
    children = descendants(stack.proc.pid)
    assert sum(SERVER in command_of(p) for p in children) == len(nodes)
    stack.ctrl_c()
    # Then no node nor any other process it started is left, and no node's port stays open
    assert [f"{p} {command_of(p)}" for p in children if alive(p)] == []
    for port in [stack.port, *(n["port"] for n in nodes)]:
        assert not port_is_open(port), f"port {port} still open"


def test_restart_keeps_queued_jobs_their_s3_payloads_and_the_tokens(tmp_path, stacks):
    command = [sys.executable, "-m", "payloadstore_devstack"]
    # Given a running stack with one inline job and one job whose args are in S3
    first = StackProcess(tmp_path, command)
    stacks.append(first)
    state = first.wait_ready()
    url, dev = state["endpoint"], state["namespaces"]["dev"]
    client = {"Authorization": f"Bearer {dev['client_token']}"}
    inline = requests.post(
        f"{url}/v1/namespaces/dev/queues/restart/jobs",
        headers=client,
        json={"payloadInline": base64.b64encode(b"small args").decode()},
        timeout=30,
    )
    assert inline.status_code == 201, inline.text
    blob = os.urandom(300_000)
    presign = requests.post(
        f"{url}/v1/namespaces/dev/payloads/presign",
        headers=client,
        params={
            "op": "put",
            "size": len(blob),
            "kind": "args",
            "sha256": hashlib.sha256(blob).hexdigest(),
        },
        timeout=30,
    )
    assert presign.status_code == 200, presign.text
    put = presign.json()
    upload = requests.request(
        put["method"], put["url"], data=blob, headers=put["headers"], timeout=30
    )
    assert upload.status_code == 200, upload.text
    ref = {"kind": "s3", "bucket": put["bucket"], "key": put["key"], "size": len(blob)}
    by_ref = requests.post(
        f"{url}/v1/namespaces/dev/queues/restart/jobs",
        headers=client,
        json={"payloadRef": ref},
        timeout=30,
    )
    assert by_ref.status_code == 201, by_ref.text

    # When it is stopped with Ctrl-C and started again on the same state dir
    first.ctrl_c()
    second = StackProcess(tmp_path, command, port=first.port)
    stacks.append(second)
    state2 = second.wait_ready()

    # Then the same tokens still work
    assert state2["namespaces"] == state["namespaces"]
    daemon = {"Authorization": f"Bearer {dev['daemon_token']}"}
    # And both jobs are still queued, in order, and the S3 payload is still there
    got = []
    for _ in range(2):
        poll = requests.post(
            f"{url}/v1/daemon/poll",
            headers=daemon,
            timeout=30,
            json={"namespace": "dev", "queues": ["restart"], "wait_s": 2, "daemon_id": "d1"},
        )
        assert poll.status_code == 200, poll.text
        got.append(poll.json())
    assert [j["job_id"] for j in got] == [inline.json()["job_id"], by_ref.json()["job_id"]]
    assert base64.b64decode(got[0]["payloadInline"]) == b"small args"
    get = requests.post(
        f"{url}/v1/namespaces/dev/payloads/presign",
        headers=daemon,
        params={"op": "get", "key": got[1]["payloadRef"]["key"]},
        timeout=30,
    )
    assert get.status_code == 200, get.text
    assert requests.get(get.json()["url"], timeout=30).content == blob
    second.ctrl_c()


def test_port_taken_is_one_clear_line_and_starts_nothing(tmp_path, stacks):
    # Given something already listening on the port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = StackProcess(tmp_path, [sys.executable, "-m", "payloadstore_devstack"], port=port)
        stacks.append(stack)
        # When the stack starts
        code = stack.proc.wait(60)
    # Then it exits non-zero, naming the port and the way out, having started no service
    assert code != 0
    out = stack.output()
    assert f"port {port}" in out and "PAYLOADSTORE_PORT" in out
    assert not stack.state_file.exists()
    assert not (stack.state_dir / "redis").exists()


def test_closing_the_terminal_stops_it_cleanly_too(tmp_path, stacks):
    # Given a running stack that holds an object in S3
    stack = StackProcess(tmp_path, [sys.executable, "-m", "payloadstore_devstack"])
    stacks.append(stack)
    stack.wait_ready()
    children = descendants(stack.proc.pid)
    # When its terminal goes away (SIGHUP)
    os.killpg(stack.proc.pid, signal.SIGHUP)
    # Then it stops like on Ctrl-C: exit 0, children gone, token store saved
    assert stack.proc.wait(60) == 0
    assert [command_of(p) for p in children if alive(p)] == []
    assert "stopped" in stack.output()
    assert (stack.state_dir / "token-store.json").exists()


def test_a_killed_stack_takes_its_services_with_it(tmp_path, stacks):
    # Given a running stack
    stack = StackProcess(tmp_path, [sys.executable, "-m", "payloadstore_devstack"])
    stacks.append(stack)
    stack.wait_ready()
    children = descendants(stack.proc.pid)
    assert children
    # When it is killed outright (no chance to clean up)
    stack.proc.kill()
    stack.proc.wait(10)
    # Then redis-server and the S3 emulator stop by themselves
    deadline = time.monotonic() + 15
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [command_of(p) for p in children if alive(p)] == []


def test_saved_objects_come_back_until_the_lifecycle_would_expire_them(s3_client, tmp_path):
    # Given a bucket with a payload (with its checksum, tagged with the default retention class
    # as every upload is), one of a 7-day namespace under a KMS key, and an object outside
    # payloads/
    from payloadstore_controlplane.models.policy import LOCAL_KMS_KEY_ARN
    from payloadstore_devstack.services import create_payload_bucket
    from payloadstore_devstack.stack import restore_bucket, snapshot_bucket

    source, target = f"snap-{uuid.uuid4().hex[:8]}", f"restore-{uuid.uuid4().hex[:8]}"
    create_payload_bucket(s3_client, source)
    blob = os.urandom(70_000)
    checksum = base64.b64encode(hashlib.sha256(blob).digest()).decode()
    s3_client.put_object(
        Bucket=source,
        Key="payloads/2026/01/01/j1/args",
        Body=blob,
        ContentType="application/msgpack",
        ChecksumSHA256=checksum,
        Tagging="payloadstore-retention=2d",
    )
    s3_client.put_object(
        Bucket=source,
        Key="payloads/2026/01/01/j2/args",
        Body=b"week",
        Tagging="payloadstore-retention=7d",
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=LOCAL_KMS_KEY_ARN,
    )
    s3_client.put_object(Bucket=source, Key="exec/log.txt", Body=b"log")
    # When it is saved and put back into a fresh bucket
    assert snapshot_bucket(s3_client, source, tmp_path / "s3") == 3
    create_payload_bucket(s3_client, target)
    assert restore_bucket(s3_client, target, tmp_path / "s3") == 3
    # Then the 7-day object keeps its tag and key
    head = s3_client.head_object(Bucket=target, Key="payloads/2026/01/01/j2/args")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", LOCAL_KMS_KEY_ARN)
    tags = s3_client.get_object_tagging(Bucket=target, Key="payloads/2026/01/01/j2/args")
    assert tags["TagSet"] == [{"Key": "payloadstore-retention", "Value": "7d"}]

    # Then bytes, content type and checksum are as they were
    def read(bucket):
        return s3_client.get_object(
            Bucket=bucket, Key="payloads/2026/01/01/j1/args", ChecksumMode="ENABLED"
        )

    got, original = read(target), read(source)
    assert got["Body"].read() == blob
    assert got["ContentType"] == "application/msgpack"
    # (the emulator may not report checksums; whatever it reported is carried over)
    assert got.get("ChecksumSHA256") == original.get("ChecksumSHA256")
    # And three days later the 2-day payload is not restored (its class's rule), the 7-day one
    # and the other prefix are
    later = f"later-{uuid.uuid4().hex[:8]}"
    create_payload_bucket(s3_client, later)
    assert restore_bucket(s3_client, later, tmp_path / "s3", now=time.time() + 3 * 86400) == 2
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=later).get("Contents", [])]
    assert sorted(keys) == ["exec/log.txt", "payloads/2026/01/01/j2/args"]


def test_tokens_minted_and_revoked_while_running_stay_so_after_a_restart(tmp_path, stacks):
    import boto3

    from payloadstore_controlplane.store.tokens import TokenStore
    from payloadstore_devstack.stack import DEV_REGION, DEV_TOKEN_PATH

    command = [sys.executable, "-m", "payloadstore_devstack"]
    first = StackProcess(tmp_path, command)
    stacks.append(first)
    state = first.wait_ready()
    # Given one token minted and one revoked while the stack runs
    ssm = boto3.client(
        "ssm",
        endpoint_url=state["s3_endpoint"],
        region_name=DEV_REGION,
        aws_access_key_id="local",
        aws_secret_access_key="local-secret",
    )
    store = TokenStore(ssm, DEV_TOKEN_PATH)
    minted, _ = store.mint("team-a", "client")
    revoked = state["namespaces"]["sandbox"]["client_token"]
    assert store.revoke(revoked) == 1
    # When the stack is restarted
    first.ctrl_c()
    second = StackProcess(tmp_path, command, port=first.port)
    stacks.append(second)
    url = second.wait_ready()["endpoint"]

    def config_status(token: str) -> int:
        return requests.get(
            f"{url}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ).status_code

    # Then the minted one still works and the revoked one is still refused
    assert config_status(minted) == 200
    assert config_status(revoked) == 401
    assert config_status(state["namespaces"]["dev"]["client_token"]) == 200
    second.ctrl_c()


def test_a_second_stack_on_the_same_state_dir_is_refused(tmp_path, stacks):
    command = [sys.executable, "-m", "payloadstore_devstack"]
    # Given a running stack
    first = StackProcess(tmp_path, command)
    stacks.append(first)
    first.wait_ready()
    # When another starts on a different port but the same state dir (and so the same AOF)
    second = StackProcess(tmp_path, command)
    stacks.append(second)
    code = second.proc.wait(60)
    # Then it refuses with one line naming the way out, and the first one keeps serving
    assert code != 0
    assert "PAYLOADSTORE_STATE_DIR" in second.output()
    assert requests.get(f"http://127.0.0.1:{first.port}/v1/health", timeout=30).status_code == 200
    first.ctrl_c()
