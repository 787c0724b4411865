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
import subprocess
import sys
import time

import pytest

from tests.support.infra import (
    CDK_ENV,
    REPO,
    STACK,
    TWO_STAGES,
    CliSynth,
    InProcessSynth,
    StagesSynth,
    credential_free_env,
    ensure_cdk_cli,
)

# The shape most template tests read: the dev stage on nodes with full monitoring, i.e. every
# resource the production shape has (replication group, AUTH secret, alarms, dashboard) under
# the dev stage's names. The default dev stage (serverless, minimal) is `dev_default`.
NODES_FULL = {"payloadstore:cache": "nodes", "payloadstore:monitoring": "full"}


def _in_process(tmp_path_factory, extra: dict) -> InProcessSynth:
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
        **extra,
    }
    app, stack = build_app(context=context, outdir=outdir, builtin_validation=False)
    app.synth()
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    report = json.loads((outdir / "validation-report.json").read_text())
    return InProcessSynth(template, report, stack, outdir, time.monotonic() - started)


def synth_template(
    outdir, extra: dict, *, stage_stack: str | None = None, nag_report: list | None = None
) -> dict:
    """One more in-process synth with `extra` context: its first stage's template. With
    `nag_report` (a list), cdk-nag runs too and its open findings are appended to it."""
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        **extra,
    }
    app, stack = build_app(
        context=context, outdir=outdir, nag=nag_report is not None, builtin_validation=False
    )
    app.synth()
    if nag_report is not None:
        report = json.loads((outdir / "validation-report.json").read_text())
        nag_report.extend(
            v["ruleName"] for p in report["pluginReports"] for v in p.get("violations", [])
        )
    return json.loads((outdir / f"{stage_stack or stack.stack_name}.template.json").read_text())


@pytest.fixture(scope="session")
def synth(tmp_path_factory) -> InProcessSynth:
    return _in_process(tmp_path_factory, NODES_FULL)


@pytest.fixture(scope="session")
def dev_default(tmp_path_factory) -> InProcessSynth:
    """The dev stage exactly as `make synth` makes it: no flags."""
    return _in_process(tmp_path_factory, {})


@pytest.fixture(scope="session")
def template(synth) -> dict:
    return synth.template


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
        **NODES_FULL,
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
