"""`pip install` of the built wheel into a fresh virtualenv, used away from the checkout: the SDK,
the CLI, every Lambda handler string and `payloadstore dev` work from the installed packages alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from payloadstore.devstack.services import free_port

REPO = Path(__file__).resolve().parents[2]
# A real install of the wheel and its dependencies into a fresh venv (from pip's cache when warm):
# minutes on a loaded machine, so more than the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(1500)


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)])
    (built,) = out.glob("payloadstore-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the wheel and its `stack` extra; an environment that knows no checkout."""
    root = tmp_path_factory.mktemp("fresh")
    run([sys.executable, "-m", "venv", str(root / "venv")])
    python = root / "venv" / "bin" / "python"
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[stack]"],
        timeout=1200,
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PAYLOADSTORE_", "AWS_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{root / 'venv' / 'bin'}:{env.get('PATH', '')}"
    away = root / "away"  # the working directory: nowhere near the checkout
    away.mkdir()
    return away, env


def test_the_wheel_holds_the_sdk_and_the_control_plane_but_not_infra(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if "/" in name and ".dist-info" not in name}
    assert tops == {"payloadstore", "controlplane"}
    assert "payloadstore/py.typed" in names and "controlplane/py.typed" in names
    assert "controlplane/handlers/jobs.py" in names
    # The store's Lua scripts travel with it (package data).
    assert "controlplane/store/jobs/delivery_take.lua" in names


def test_the_cli_runs_from_the_installed_wheel(installed):
    away, env = installed
    # When `payloadstore --help` runs outside the checkout
    done = run(["payloadstore", "--help"], cwd=away, env=env)
    # Then it lists its commands
    for command in ("dev", "enqueue", "result", "daemon", "token"):
        assert command in done.stdout


def test_every_handler_string_imports_from_the_installed_packages(installed):
    away, env = installed
    script = """
import importlib, json
import controlplane, payloadstore
from controlplane.routes import FUNCTIONS
for handler in FUNCTIONS.values():
    module, _, attr = handler.rpartition(".")
    assert callable(getattr(importlib.import_module(module), attr)), handler
print(json.dumps({"controlplane": controlplane.__file__, "payloadstore": payloadstore.__file__,
                  "handlers": len(FUNCTIONS)}))
"""
    done = run(["python", "-c", script], cwd=away, env=env)
    found = json.loads(done.stdout)
    # Then both packages come from the venv, not from the checkout
    assert found["handlers"] >= 6
    for path in (found["controlplane"], found["payloadstore"]):
        assert "site-packages" in path and not path.startswith(str(REPO)), path


def test_payloadstore_dev_serves_the_api_without_the_checkout(installed):
    away, env = installed
    port = free_port()
    state_file = away / ".devstack.json"
    # Given `payloadstore dev` started from a directory outside the checkout
    stack = subprocess.Popen(
        [
            "payloadstore",
            "dev",
            "--port",
            str(port),
            "--state-dir",
            str(away / "state"),
            "--state-file",
            str(state_file),
        ],
        cwd=away,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not state_file.exists():
            assert stack.poll() is None, stack.stdout.read()
            assert time.monotonic() < deadline, "no .devstack.json in 120 s"
            time.sleep(0.2)
        # When the health route is asked
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=30) as answer:
            status, body = answer.status, json.loads(answer.read())
        # Then the installed control plane answers healthy
        assert (status, body["status"]) == (200, "ok"), body
    finally:
        os.killpg(stack.pid, signal.SIGINT)
        try:
            stack.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
    assert stack.returncode == 0
