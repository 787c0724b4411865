"""The README's SDK quick start, run as written: the local stack as `make dev` starts it
(`python -m payloadstore.devstack`), the worker script in one process, the client script in another,
and the output compared with what the README says it prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from payloadstore.devstack.services import free_port

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_blocks() -> tuple[str, str, str]:
    text = README.read_text()
    section = text.split("### From Python", 1)[1].split("\n## ", 1)[0]
    python = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    output = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    worker = next(b for b in python if b.startswith("# worker.py"))
    client = next(b for b in python if b.startswith("# client.py"))
    return worker, client, output[0]


def test_the_readme_quick_start_runs_as_written_against_the_local_stack(tmp_path):
    worker_code, client_code, expected = quickstart_blocks()
    (tmp_path / "worker.py").write_text(worker_code)
    (tmp_path / "client.py").write_text(client_code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOADSTORE_", "AWS_"))}
    state_file = tmp_path / ".devstack.json"
    stack = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "payloadstore.devstack",
            "--port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / ".devstack"),
            "--state-file",
            str(state_file),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not state_file.exists():
            assert stack.poll() is None, f"the local stack exited: {stack.stderr.read()}"
            assert time.monotonic() < deadline, (
                "the local stack did not write .devstack.json in 60 s"
            )
            time.sleep(0.2)
        assert set(json.loads(state_file.read_text())["namespaces"]) >= {"dev"}
        worker = subprocess.Popen(
            [sys.executable, "worker.py"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        client = subprocess.run(
            [sys.executable, "client.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert client.returncode == 0, client.stderr
        assert client.stdout == expected
        worker.send_signal(2)  # Ctrl-C
        _, worker_err = worker.communicate(timeout=30)
        assert worker.returncode == 0, worker_err
    finally:
        for proc in (worker, stack):
            if proc is not None and proc.poll() is None:
                proc.send_signal(2)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
