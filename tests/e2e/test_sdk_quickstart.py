"""The README's quick start, run as written: the local stack as `make dev` starts it
(`python -m payloadstore_devstack`), examples/worker.py in one process, examples/client.py in
another, and the CLI daemon serving examples/tasks.py; each output compared with what the README
says it prints. (tests/docs/test_readme.py checks the README quotes these files exactly.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from payloadstore_devstack.services import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
EXAMPLES = REPO / "examples"
CLI = str(Path(sys.executable).with_name("payloadstore"))


def readme_outputs() -> tuple[str, str]:
    """The README's promised output of client.py, and of the shell's `enqueue --wait`."""
    text = README.read_text()
    python_part, shell_part = text.split("### From a shell", 1)
    client_out = re.findall(
        r"```text\n(.*?)```", python_part.split("## Quick start", 1)[1], re.DOTALL
    )
    shell_out = re.findall(r"```text\n(.*?)```", shell_part.split("\n## ", 1)[0], re.DOTALL)
    return client_out[0], shell_out[0]


def shell_commands() -> tuple[list[str], list[str]]:
    """The README's two shell lines (daemon, enqueue), as argument lists after the program."""
    block = README.read_text().split("### From a shell", 1)[1]
    lines = re.findall(r"```bash\n(.*?)```", block, re.DOTALL)[0].splitlines()
    daemon = next(line for line in lines if " daemon " in line)
    enqueue = next(line for line in lines if " enqueue " in line)

    def args(line: str) -> list[str]:
        import shlex

        words = shlex.split(line.split("#", 1)[0].split("&&")[-1])
        return words[1:]  # drop the program (.venv/bin/payloadstore or ../.venv/bin/...)

    return args(daemon), args(enqueue)


@pytest.fixture
def local_stack(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOADSTORE_", "AWS_"))}
    state_file = tmp_path / ".devstack.json"
    stack = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "payloadstore_devstack",
            "--port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / ".devstack"),
            "--state-file",
            str(state_file),
        ],
        cwd=tmp_path,
        env=env,
        stdout=open(tmp_path / "stack.out", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.PIPE,
        text=True,
    )
    started: list[subprocess.Popen] = [stack]
    try:
        deadline = time.monotonic() + 60
        while not state_file.exists():
            assert stack.poll() is None, f"the local stack exited: {stack.stderr.read()}"
            assert time.monotonic() < deadline, "the local stack wrote no .devstack.json in 60 s"
            time.sleep(0.2)
        assert set(json.loads(state_file.read_text())["namespaces"]) >= {"dev"}
        # The SDK and CLI would find .devstack.json in a parent of the working directory; the
        # examples run from elsewhere here, so say where it is (and never use a developer's).
        yield {**env, "PAYLOADSTORE_DEVSTACK": str(state_file)}, started
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                proc.send_signal(2)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_the_python_quick_start_runs_as_written_against_the_local_stack(local_stack, tmp_path):
    env, started = local_stack
    expected, _ = readme_outputs()
    # Given examples/worker.py serving the queue `demo`
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "worker.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(worker)
    # When examples/client.py runs
    client = subprocess.run(
        [sys.executable, str(EXAMPLES / "client.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it prints what the README says, and the worker stops cleanly on Ctrl-C
    assert client.returncode == 0, client.stderr
    assert client.stdout == expected
    worker.send_signal(2)
    _, worker_err = worker.communicate(timeout=30)
    assert worker.returncode == 0, worker_err
    # And the stack's output is not flooded with EMF metric lines (off unless asked for)
    assert '"_aws"' not in (tmp_path / "stack.out").read_text()


def test_the_shell_quick_start_runs_as_written_against_the_local_stack(local_stack):
    env, started = local_stack
    _, expected = readme_outputs()
    daemon_args, enqueue_args = shell_commands()
    # Given the README's CLI daemon for examples/tasks.py, run from examples/ as it says
    daemon = subprocess.Popen(
        [CLI, *daemon_args],
        cwd=EXAMPLES,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(daemon)
    # When the README's enqueue line runs from the repository root
    enqueue = subprocess.run(
        [CLI, *enqueue_args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it prints the job id, then the result the README shows
    assert enqueue.returncode == 0, enqueue.stderr
    job_id, result = enqueue.stdout.splitlines()
    assert re.fullmatch(r"[0-9A-Z]{26}", job_id), job_id
    assert result + "\n" == expected
    daemon.send_signal(2)
    _, daemon_err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, daemon_err
