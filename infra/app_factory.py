"""Builds the CDK app: used by app.py (`npx cdk synth`) and, in-process, by the tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

# The route table and settings live in the Lambda code asset (functions/payloadstore_controlplane); synth
# imports them as the installed `payloadstore_controlplane` package (pyproject maps it to that directory).
from infra.account import ApiGatewayAccountStack
from infra.config import (
    API_GATEWAY_ACCOUNT_STACK,
    REPO_ROOT,
    api_gateway_account_mode,
    stage_of,
)
from infra.nag import acknowledge_account_findings, acknowledge_findings
from infra.stack import PayloadStoreStack


def cdk_json_context() -> dict[str, Any]:
    """The context block of cdk.json (feature flags): the CLI passes it to app.py itself, an
    in-process App has to be given it."""
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def deploy_environment() -> cdk.Environment | None:
    """The account and region the CDK CLI resolved from the caller's credentials, when it did
    (CDK_DEFAULT_ACCOUNT/REGION: `cdk deploy`, or `cdk synth` with credentials): the stacks are
    then bound to them, and synth looks up the account's AZs (cached in cdk.context.json).
    Without credentials the stacks stay environment-agnostic (the template picks its AZs with
    Fn::GetAZs at deploy). -c payloadstore:availabilityZones pins zone ids either way."""
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    return cdk.Environment(account=account, region=region) if account and region else None


def build_app(
    *,
    context: dict[str, Any] | None = None,
    outdir: str | Path | None = None,
    nag: bool = True,
    builtin_validation: bool | None = None,
    stages: list[str] | None = None,
) -> tuple[cdk.App, PayloadStoreStack]:
    """The app with the stage of `-c payloadstore:stage` (default dev), or each of `stages` (tests
    build several in one app); returns the first stage's stack. All stacks: `stage_stacks(app)`."""
    kwargs: dict[str, Any] = {}
    if context is not None:
        kwargs["context"] = context
    if outdir is not None:
        kwargs["outdir"] = str(outdir)
    if builtin_validation is not None:
        kwargs["builtin_cloud_formation_validation"] = builtin_validation
    app = cdk.App(**kwargs)
    env = deploy_environment()
    account = None
    account_mode = api_gateway_account_mode(app)
    if account_mode != "existing":
        account = ApiGatewayAccountStack(
            app,
            API_GATEWAY_ACCOUNT_STACK,
            replace=account_mode == "replace",
            description="payloadstore: the account's API Gateway CloudWatch role (once per region)",
            env=env,
        )
    stacks = []
    for stage in stages or [stage_of(app)]:
        stack = PayloadStoreStack(
            app,
            stage=stage,
            description=f"payloadstore {stage}: job payload store control plane "
            "(API Gateway, Lambda, ElastiCache, S3)",
            env=env,
        )
        if account is not None:
            # Execution logging needs the account setting first; `cdk deploy <stage>` deploys it.
            stack.add_stack_dependency(account)
        stacks.append(stack)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        for stack in stacks:
            acknowledge_findings(stack)
        if account is not None:
            acknowledge_account_findings(account)
    return app, stacks[0]


def stage_stacks(app: cdk.App) -> list[PayloadStoreStack]:
    return [c for c in app.node.children if isinstance(c, PayloadStoreStack)]
