"""Builds the CDK app: used by app.py (`npx cdk synth`) and, in-process, by the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

# The route table and settings live in the Lambda code asset (functions/controlplane); synth
# imports them as the installed `controlplane` package (pyproject maps it to that directory).
from infra.config import REPO_ROOT, STACK_NAME
from infra.nag import acknowledge_findings
from infra.stack import PayloadStoreStack


def cdk_json_context() -> dict[str, Any]:
    """The context block of cdk.json (feature flags): the CLI passes it to app.py itself, an
    in-process App has to be given it."""
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def build_app(
    *,
    context: dict[str, Any] | None = None,
    outdir: str | Path | None = None,
    nag: bool = True,
    builtin_validation: bool | None = None,
) -> tuple[cdk.App, PayloadStoreStack]:
    kwargs: dict[str, Any] = {}
    if context is not None:
        kwargs["context"] = context
    if outdir is not None:
        kwargs["outdir"] = str(outdir)
    if builtin_validation is not None:
        kwargs["builtin_cloud_formation_validation"] = builtin_validation
    app = cdk.App(**kwargs)
    stack = PayloadStoreStack(
        app,
        STACK_NAME,
        description="payloadstore: job payload store control plane (API Gateway, Lambda, ElastiCache, S3)",
    )
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        acknowledge_findings(stack)
    return app, stack
