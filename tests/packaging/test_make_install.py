"""The pip install `make` runs for a set of extras resolves in a fresh venv (a fresh clone's
first `make dev`): no payloadstore installed yet, and the pip `python -m venv` brings."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A fresh venv and pip's resolution of the stack's packages (metadata only, from pip's cache when
# warm): tens of seconds, more on a loaded machine.
pytestmark = pytest.mark.timeout(900)


def make_pip_install(venv: Path, extras: str) -> list[str]:
    """The pip command of the Makefile's stamp for `extras`, as `make` would run it in `venv`."""
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", f"VENV={venv}", f"{venv}/.installed-{extras}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (line,) = [line for line in recipe.splitlines() if " -m pip install " in line]
    return shlex.split(line.split(" 2>&1")[0])


def test_a_fresh_venv_resolves_the_stack_extra_as_make_dev_installs_it(tmp_path):
    # Given a fresh venv, as a fresh clone's `make dev` creates it (nothing of payloadstore in it)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    command = make_pip_install(venv, "stack")
    assert command[0] == f"{venv}/bin/python" and "-e" in command
    # When pip resolves what `make dev` installs (the local stack's distribution requires the SDK)
    done = subprocess.run(
        [*command, "--dry-run", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=800,
    )
    # Then every requirement is met, the SDK's own included, by the checkout's projects
    assert done.returncode == 0, done.stderr[-3000:]
