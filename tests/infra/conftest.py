"""Two syntheses per session, shared by every infra test.

- `template`: in-process, fast: asset staging and bundling off, CDK's built-in CloudFormation
  validation off, cdk-nag on (its report is read, synth is not failed by it here).
- `cli_synth`: the real `npx cdk synth` a user runs, with the layer built by pip and bytecode
  compiled, no AWS credentials in its environment; its template is linted and its staged assets
  serve the SAM-compatibility test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
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


@pytest.fixture(scope="session")
def synth(tmp_path_factory) -> InProcessSynth:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    started = time.monotonic()
    outdir = tmp_path_factory.mktemp("cdk-inprocess")
    context = {
        **cdk_json_context(),
        # No staging and no bundling: no pip, no copies; assets point at their sources.
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        # Write the cdk-nag report instead of raising, so the nag test can say what failed.
        "@aws-cdk/core:failSynthOnValidationErrors": False,
    }
    app, stack = build_app(context=context, outdir=outdir, builtin_validation=False)
    app.synth()
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    report = json.loads((outdir / "validation-report.json").read_text())
    return InProcessSynth(template, report, stack, outdir, time.monotonic() - started)


@pytest.fixture(scope="session")
def template(synth) -> dict:
    return synth.template


@dataclass
class StagesSynth:
    templates: dict[str, dict]  # stage -> template
    stacks: dict[str, object]


TWO_STAGES = ("dev", "prod")


@pytest.fixture(scope="session")
def two_stages(tmp_path_factory) -> StagesSynth:
    """dev and prod in one app, as a team deploys them, with -c payloadstore:removalPolicy=destroy
    (the single-stage `synth` covers the default, retain)."""
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context, stage_stacks
    from infra.config import CTX_ALARM_EMAIL, CTX_REMOVAL_POLICY

    outdir = tmp_path_factory.mktemp("cdk-stages")
    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        CTX_ALARM_EMAIL: "oncall@example.com",
        CTX_REMOVAL_POLICY: "destroy",
    }
    app, _ = build_app(
        context=context, outdir=outdir, nag=False, builtin_validation=False, stages=TWO_STAGES
    )
    app.synth()
    stacks = {s.names.stage: s for s in stage_stacks(app)}
    templates = {
        stage: json.loads((outdir / f"{s.stack_name}.template.json").read_text())
        for stage, s in stacks.items()
    }
    return StagesSynth(templates, stacks)


def ensure_cdk_cli() -> Path:
    """node_modules/.bin/cdk, installed from package-lock.json (`npm ci`) on a fresh clone."""
    cdk = REPO / "node_modules" / ".bin" / "cdk"
    if not cdk.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm not found: install Node.js 20+ to synthesize the stack with the pinned CDK CLI"
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


@pytest.fixture(scope="session")
def cli_synth(tmp_path_factory) -> CliSynth:
    cdk = ensure_cdk_cli()
    outdir = tmp_path_factory.mktemp("cdk-cli") / "cdk.out"
    args = [str(cdk), "synth", "--no-notices", "--quiet", "--output", str(outdir)]
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        # cdk.json runs the app with the project's venv; without one, use the test interpreter.
        args += ["--app", f"{sys.executable} app.py"]
    started = time.monotonic()
    result = subprocess.run(
        args,
        cwd=REPO,
        env=credential_free_env(tmp_path_factory.mktemp("home")),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,  # the assertion below shows the CLI's output
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"npx cdk synth failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )
    template_path = outdir / f"{STACK}.template.json"
    return CliSynth(
        outdir,
        template_path,
        json.loads(template_path.read_text()),
        result.stdout,
        result.stderr,
        seconds,
    )
