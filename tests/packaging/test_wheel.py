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

from payloadstore_devstack.services import free_port

REPO = Path(__file__).resolve().parents[2]
# A real install of the wheel and its dependencies into a fresh venv (from pip's cache when warm):
# minutes on a loaded machine, so more than the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(1500)


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the SDK's wheel, the control plane's wheel, the local stack's wheel), built from the
    checkout."""
    out = tmp_path_factory.mktemp("wheel")
    for project in (REPO, REPO / "functions", REPO / "devstack"):
        run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out)]
            + [str(project)]
        )
    (sdk,) = out.glob("payloadstore-0*.whl")
    (control_plane,) = out.glob("payloadstore_controlplane-*.whl")
    (devstack,) = out.glob("payloadstore_devstack-*.whl")
    return sdk, control_plane, devstack


@pytest.fixture(scope="module")
def wheel(wheels) -> Path:
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the SDK's wheel and its `stack` extra (which takes the local stack's and
    the control plane's wheels, given beside it); an environment that knows no checkout."""
    wheel, control_plane, devstack = wheels
    root = tmp_path_factory.mktemp("fresh")
    run([sys.executable, "-m", "venv", str(root / "venv")])
    python = root / "venv" / "bin" / "python"
    run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            str(control_plane),
            str(devstack),
            # The SDK's wheel as itself too: the local stack requires `payloadstore`, and pip
            # (23.2, a fresh venv's) does not take a wheel named with extras for that.
            str(wheel),
            f"{wheel}[stack]",
        ],
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


def tops(wheel: Path) -> set[str]:
    names = zipfile.ZipFile(wheel).namelist()
    return {name.split("/")[0] for name in names if "/" in name and ".dist-info" not in name}


def test_the_sdk_wheel_holds_the_sdk_alone(wheels):
    # Given the wheel a user who only wants the client installs
    sdk, _, _ = wheels
    names = zipfile.ZipFile(sdk).namelist()
    # Then it has one top-level package: no control plane, no local stack, no infra
    assert tops(sdk) == {"payloadstore"}
    assert not [n for n in names if "devstack" in n or "s3_emulator" in n]
    assert "payloadstore/py.typed" in names and "payloadstore/client.py" in names
    # And the dashboard's page travels with it (package data: no build step, no CDN)
    for name in ("index.html", "app.js", "app.css"):
        assert f"payloadstore/dashboard/static/{name}" in names


def test_the_control_plane_wheel_holds_the_control_plane_under_its_own_name(wheels):
    _, control_plane, _ = wheels
    names = zipfile.ZipFile(control_plane).namelist()
    assert tops(control_plane) == {"payloadstore_controlplane"}
    assert "payloadstore_controlplane/py.typed" in names
    assert "payloadstore_controlplane/handlers/jobs.py" in names
    # The store's Lua scripts travel with it (package data).
    assert "payloadstore_controlplane/store/jobs/delivery_take.lua" in names


def test_the_local_stack_wheel_holds_the_stack_under_its_own_name(wheels):
    _, _, devstack = wheels
    names = zipfile.ZipFile(devstack).namelist()
    # Then it has one top-level package, typed, with the emulator's modules and the gateway
    assert tops(devstack) == {"payloadstore_devstack"}
    assert "payloadstore_devstack/py.typed" in names
    for module in ("__main__", "stack", "gateway", "s3_emulator", "s3_sigv4", "smoke", "demo"):
        assert f"payloadstore_devstack/{module}.py" in names


def test_the_cli_runs_from_the_installed_wheel(installed):
    away, env = installed
    # When `payloadstore --help` runs outside the checkout
    done = run(["payloadstore", "--help"], cwd=away, env=env)
    # Then it lists its commands
    for command in ("dev", "enqueue", "result", "daemon", "token", "dashboard"):
        assert command in done.stdout


def test_every_handler_string_imports_from_the_installed_packages(installed):
    away, env = installed
    script = """
import importlib, json
import payloadstore_controlplane, payloadstore, payloadstore_devstack
from payloadstore_controlplane.routes import FUNCTIONS
for handler in FUNCTIONS.values():
    module, _, attr = handler.rpartition(".")
    assert callable(getattr(importlib.import_module(module), attr)), handler
print(json.dumps({"payloadstore_controlplane": payloadstore_controlplane.__file__, "payloadstore": payloadstore.__file__,
                  "payloadstore_devstack": payloadstore_devstack.__file__, "handlers": len(FUNCTIONS)}))
"""
    done = run(["python", "-c", script], cwd=away, env=env)
    found = json.loads(done.stdout)
    # Then the three packages come from the venv, not from the checkout
    assert found["handlers"] >= 6
    for path in (
        found["payloadstore_controlplane"],
        found["payloadstore"],
        found["payloadstore_devstack"],
    ):
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
