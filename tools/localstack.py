"""A local stack for the benchmark scripts and the cost measurement: in this process
(`local_stack`) or as `python -m payloadstore_devstack` in a child process (`start_stack`),
its state in a directory of the caller's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def local_stack(tmp: Path) -> Iterator:
    """A DevStack running in this process under `tmp`, stopped (no snapshot) on exit."""
    from payloadstore_devstack.services import free_port
    from payloadstore_devstack.stack import DevStack

    stack = DevStack(
        state_dir=tmp / "stack", state_file=tmp / "stack.json", port=free_port()
    ).start()
    try:
        yield stack
    finally:
        stack.stop(snapshot=False)


def start_stack(tmp: Path) -> tuple[subprocess.Popen, dict]:
    """The local stack in a child process (its own GIL) under `tmp`, and its state file once
    written; the caller stops the process."""
    from payloadstore_devstack.services import free_port

    env = {
        **os.environ,
        "PAYLOADSTORE_PORT": str(free_port()),
        "PAYLOADSTORE_STATE_DIR": str(tmp / "state"),
        "PAYLOADSTORE_STATE_FILE": str(tmp / "devstack.json"),
        "PAYLOADSTORE_GATEWAY_LOG_LEVEL": "WARNING",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "payloadstore_devstack"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (tmp / "devstack.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the local stack did not start")
        time.sleep(0.1)
    return proc, json.loads((tmp / "devstack.json").read_text())
