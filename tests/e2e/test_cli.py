"""The `payloadstore` command run as a shell user runs it (a subprocess), against the local gateway."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from payloadstore import Client
from tests.e2e.sdk_helpers import unique_queue

pytestmark = pytest.mark.e2e

TASKS = """
import hashlib, time

def describe(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "bytes", "len": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    return {"type": type(value).__name__, "value": value}

def reverse(data):
    return bytes(data)[::-1]

def divide(value):
    return value["a"] / value["b"]

def slow(seconds):
    time.sleep(seconds)
    return f"slept {seconds}"
"""


def payloadstore_command() -> list[str]:
    script = Path(sys.executable).parent / "payloadstore"
    return [str(script)] if script.exists() else [sys.executable, "-m", "payloadstore.cli"]


class Shell:
    """A working directory with tasks.py and a .devstack.json for one gateway."""

    def __init__(self, directory: Path, gateway):
        self.dir = directory
        self.gateway = gateway
        (directory / "tasks.py").write_text(TASKS)
        (directory / ".devstack.json").write_text(json.dumps(gateway.devstack_json()))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PAYLOADSTORE_")}

    def run(self, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            payloadstore_command() + list(args),
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kw,
        )

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            payloadstore_command() + list(args),
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {stderr!r}"
    assert lines[0].startswith("error: ")
    return lines[0]


def test_health_lists_every_check_and_exits_0(shell):
    out = shell.run("health")
    assert out.returncode == 0, out.stderr
    for check in ("redis", "bucket", "region", "encryption", "lifecycle"):
        assert f"ok   {check}:" in out.stdout
    assert out.stdout.strip().endswith("status: ok")


def test_enqueue_json_then_daemon_then_result_prints_the_value(shell):
    queue = unique_queue("cli-json")
    enqueued = shell.run("enqueue", queue, "--json", '{"a": 1, "b": [2, 3]}')
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    assert f"job_id={job_id}" in enqueued.stderr and "tier=inline" in enqueued.stderr
    daemon = shell.run(
        "daemon", "tasks:describe", "--queue", queue, "--max-jobs", "1", "--poll-wait", "1"
    )
    assert daemon.returncode == 0, daemon.stderr
    assert "succeeded=1" in daemon.stderr
    result = shell.run("result", job_id, "--wait", "10")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"type": "dict", "value": {"a": 1, "b": [2, 3]}}


def test_enqueue_a_large_file_goes_through_s3_and_result_out_writes_the_bytes(shell):
    queue = unique_queue("cli-file")
    data = os.urandom(3 * 1024 * 1024)
    (shell.dir / "input.bin").write_bytes(data)
    enqueued = shell.run("enqueue", queue, "--file", "input.bin", "--no-progress")
    assert enqueued.returncode == 0, enqueued.stderr
    assert "tier=s3" in enqueued.stderr
    job_id = enqueued.stdout.strip()
    assert (
        shell.run(
            "daemon", "tasks:reverse", "-q", queue, "--max-jobs", "1", "--poll-wait", "1"
        ).returncode
        == 0
    )
    result = shell.run("result", job_id, "--wait", "10", "--out", "output.bin")
    assert result.returncode == 0, result.stderr
    assert (shell.dir / "output.bin").read_bytes() == data[::-1]


def test_result_of_a_pending_job_exits_5(shell):
    job_id = shell.run("enqueue", unique_queue("cli-pending"), "--json", "1").stdout.strip()
    result = shell.run("result", job_id, "--wait", "0")
    assert result.returncode == 5
    assert f"job {job_id} still queued" in one_error_line(result.stderr)


def test_result_of_a_failed_job_exits_1_with_the_remote_error_and_traceback_on_v(shell):
    queue = unique_queue("cli-fail")
    job_id = shell.run("enqueue", queue, "--json", '{"a": 1, "b": 0}').stdout.strip()
    assert (
        shell.run(
            "daemon", "tasks:divide", "-q", queue, "--max-jobs", "1", "--poll-wait", "1"
        ).returncode
        == 0
    )
    result = shell.run("result", job_id, "--wait", "10")
    assert result.returncode == 1
    assert (
        result.stderr.splitlines()[0]
        == f"error: job {job_id} failed: ZeroDivisionError: division by zero"
    )
    verbose = shell.run("-v", "result", job_id)
    assert verbose.returncode == 1
    assert "in divide" in verbose.stderr and 'return value["a"] / value["b"]' in verbose.stderr


def test_a_bad_token_exits_3_with_one_line(shell):
    # (a given token goes with a given endpoint: never to a .devstack.json's)
    url = shell.gateway.url
    out = shell.run(
        "--endpoint", url, "--token", "pst_not-a-real-token", "enqueue", "q", "--json", "1"
    )
    assert out.returncode == 3
    assert "401" in one_error_line(out.stderr)


def test_unknown_job_exits_4(shell):
    out = shell.run("result", "01" + "0" * 24)
    assert out.returncode == 4
    one_error_line(out.stderr)


def test_a_file_over_the_cap_exits_6_naming_the_cap(tmp_path, start_local_gateway):
    gateway = start_local_gateway(MAX_PAYLOAD_BYTES=str(1024 * 1024))
    shell = Shell(tmp_path, gateway)
    (tmp_path / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    out = shell.run("enqueue", "q", "--file", "big.bin")
    assert out.returncode == 6
    assert "over the 1048576 byte (1.0 MiB) cap" in one_error_line(out.stderr)


def test_token_create_works_at_once_and_revoke_locks_it_out(shell, local_gateway):
    store = ["--ssm-endpoint", local_gateway.s3_endpoint, "--path", local_gateway.token_path]
    created = shell.run("token", "create", "-n", "sandbox", "--role", "client", *store)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("pst_") and "\n" not in token
    token_id = created.stderr.split("token_id=")[1].split()[0]
    given = ["--endpoint", local_gateway.url, "--token", token, "-n", "sandbox"]
    used = shell.run(*given, "enqueue", unique_queue("cli-token"), "--json", "1")
    assert used.returncode == 0, used.stderr
    listed = shell.run("token", "list", *store)
    assert f"{token_id}\tsandbox\tclient" in listed.stdout
    revoked = shell.run("token", "revoke", token_id, *store)
    assert revoked.returncode == 0, revoked.stderr
    refused = shell.run(*given, "enqueue", "q", "--json", "1")
    assert refused.returncode == 3
    assert shell.run("token", "revoke", token_id, *store).returncode == 4


def test_daemon_with_an_unknown_function_exits_2(shell):
    out = shell.run("daemon", "no_such_module:fn", "--queue", "q")
    assert out.returncode == 2
    assert "cannot import no_such_module" in out.stderr


def test_daemon_refuses_an_unhealthy_control_plane_with_exit_7(
    tmp_path, start_local_gateway, s3_client
):
    bucket = f"payloadstore-cli-bare-{os.getpid()}"
    s3_client.create_bucket(Bucket=bucket)
    shell = Shell(tmp_path, start_local_gateway(PAYLOAD_BUCKET=bucket))
    out = shell.run("daemon", "tasks:describe", "--queue", "q")
    assert out.returncode == 7
    line = one_error_line(out.stderr)
    assert "refusing to take jobs" in line and "lifecycle" in line
    assert shell.run("health").returncode == 7


def test_sigterm_lets_the_daemon_finish_its_job_then_exit_0(shell, local_gateway):
    queue = unique_queue("cli-term")
    job_id = shell.run("enqueue", queue, "--json", "2").stdout.strip()
    client = Client(local_gateway.url, local_gateway.token("dev", "client"), "dev")
    daemon = shell.start("daemon", "tasks:slow", "--queue", queue, "--poll-wait", "1")
    try:
        deadline = time.monotonic() + 30
        while client.job(job_id).status().state != "running":
            assert time.monotonic() < deadline, "the daemon never took the job"
            time.sleep(0.1)
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 0, stderr
    assert "succeeded=1" in stderr
    assert client.job(job_id).result(timeout=1) == "slept 2"


def test_dev_starts_the_local_stack_that_the_other_commands_find(tmp_path):
    from payloadstore_devstack.services import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOADSTORE_", "AWS_"))}
    state_file = tmp_path / ".devstack.json"
    stack = subprocess.Popen(
        payloadstore_command()
        + [
            "dev",
            "--port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / "state"),
            "--state-file",
            str(state_file),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not state_file.exists():
            assert stack.poll() is None, stack.stderr.read()
            assert time.monotonic() < deadline, "no .devstack.json within 60 s"
            time.sleep(0.2)
        health = subprocess.run(
            payloadstore_command() + ["health"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert health.returncode == 0, health.stdout + health.stderr
        stack.send_signal(signal.SIGINT)
        stack.communicate(timeout=60)
        assert stack.returncode == 0
        assert not state_file.exists(), "a clean stop removes the state file"
    finally:
        if stack.poll() is None:
            stack.kill()


def test_the_daemons_log_lines_start_with_an_iso_utc_time(shell):
    # Given a queued job
    queue = unique_queue("cli-logtime")
    assert shell.run("enqueue", queue, "--json", "1").returncode == 0
    # When the CLI daemon runs it
    before = datetime.datetime.now(datetime.UTC)
    daemon = shell.run(
        "daemon", "tasks:describe", "--queue", queue, "--max-jobs", "1", "--poll-wait", "1"
    )
    after = datetime.datetime.now(datetime.UTC)
    assert daemon.returncode == 0, daemon.stderr
    # Then each of its log lines (one per job at least) starts with an ISO-8601 UTC time of now
    lines = [line for line in daemon.stderr.splitlines() if " INFO " in line]
    assert lines, daemon.stderr
    for line in lines:
        stamp = line.split(" ", 1)[0]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), line
        when = datetime.datetime.fromisoformat(stamp)
        assert before - datetime.timedelta(seconds=1) <= when <= after, line


def test_enqueue_of_a_value_the_codec_refuses_exits_2_and_enqueues_nothing(shell, local_gateway):
    # Given a fresh queue and JSON with an integer past msgpack's 64 bits
    queue = unique_queue("cli-refused")
    too_big = str(2**64)
    # When it is enqueued, alone and as a JSON Lines file
    one = shell.run("enqueue", queue, "--json", f'{{"n": {too_big}}}')
    lines = shell.dir / "values.jsonl"
    lines.write_text(f"1\n{too_big}\n")
    many = shell.run("enqueue", queue, "--jsonl", str(lines))
    # Then each says why in one line and exits 2 (no traceback), and no job exists
    for out in (one, many):
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("error: ") and "64-bit" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and "nothing was enqueued" in out.stderr
    with Client(local_gateway.url, local_gateway.token("dev", "client"), "dev") as client:
        assert queue not in [q.name for q in client.queues()]
