"""What the infra tests share besides fixtures (those are in tests/infra/conftest.py): the stage
names, the CLI's quiet environment, the synth results' shapes and the pinned CDK CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The stage a plain `npx cdk synth` builds (payloadstore:stage defaults to dev).
STACK = "PayloadStore-dev"

# Quiet, private CLI runs: no telemetry, no notices, no Node end-of-life banner from jsii.
CDK_ENV = {
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}


@dataclass
class InProcessSynth:
    template: dict
    report: dict
    stack: object
    outdir: Path
    seconds: float

    def resources(self, type_: str) -> dict[str, dict]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}


@dataclass
class StagesSynth:
    templates: dict[str, dict]  # stage -> template
    stacks: dict[str, object]


TWO_STAGES = ("dev", "prod")


def ensure_cdk_cli() -> Path:
    """node_modules/.bin/cdk, installed from package-lock.json (`npm ci`) on a fresh clone."""
    cdk = REPO / "node_modules" / ".bin" / "cdk"
    if not cdk.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm not found: run the tests through make (its PATH has the venv's Node.js, .venv/node-bin)"
            )
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=REPO,
            check=True,
            timeout=600,
        )
    return cdk


def credential_free_env(home: Path) -> dict[str, str]:
    """The caller's environment minus anything that could hand AWS credentials to the CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(CDK_ENV)
    env.update(
        AWS_CONFIG_FILE=str(home / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


@dataclass
class CliSynth:
    outdir: Path
    template_path: Path
    template: dict
    stdout: str
    stderr: str
    seconds: float
