"""A pinned aws-sam-cli in a virtualenv of its own under build/ (its dependencies pin boto3,
click and others differently from the project's, so it never shares the project's .venv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tools.sam_local.log import say

SAM_CLI_VERSION = "1.170.0"


def sam_env(home: Path) -> dict[str, str]:
    """Quiet and private: no telemetry, no update check, its own config dir."""
    home.mkdir(parents=True, exist_ok=True)
    # SAM asks PyPI for a newer version when its last check is a week old: it never is here.
    (home / "metadata.json").write_text(
        json.dumps({"telemetryEnabled": False, "lastVersionCheck": time.time()})
    )
    return {
        "SAM_CLI_TELEMETRY": "0",
        "SAM_CLI_CONTEXT": "payloadstore-sam-local",
        # SAM keeps metadata (and its weekly "newer version" check time) in this directory.
        "__SAM_CLI_APP_DIR": str(home),
    }


def ensure_sam(venv: Path) -> Path:
    """Path of the `sam` executable, installing the pinned version when missing."""
    sam = venv / "bin" / "sam"
    stamp = venv / f".aws-sam-cli-{SAM_CLI_VERSION}"
    if sam.exists() and stamp.exists():
        return sam
    base = getattr(sys, "_base_executable", sys.executable)
    say(f"installing aws-sam-cli=={SAM_CLI_VERSION} into {venv} (once, about 1-2 min)")
    if not (venv / "bin" / "python").exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    log = venv / "pip-install.log"
    with open(log, "wb") as out:
        r = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                f"aws-sam-cli=={SAM_CLI_VERSION}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
    if r.returncode != 0 or not sam.exists():
        raise RuntimeError(f"pip install aws-sam-cli=={SAM_CLI_VERSION} failed; see {log}")
    stamp.touch()
    return sam
