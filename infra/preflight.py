"""`make deploy`'s preflight: AWS credentials, then the stage's reserved concurrency decided from the
account's settings, before CloudFormation starts (issue 32).

    python -m infra.preflight --stage dev --write build/deploy-dev.args -- <CDK_ARGS...>

It reads `payloadstore:reservedConcurrency` (default here: auto) and the per-function flags from
the CDK arguments, asks Lambda for the account's limit and unreserved concurrency
(GetAccountSettings) and CloudFormation and Lambda for what this stage's own functions reserve now
(a redeploy replaces that), decides (payloadstore_controlplane/concurrency.py), prints ONE line
saying what the stage reserves and why, and writes the context that makes the template reserve
exactly that (`-c payloadstore:reservedConcurrency=... ...`), which `make deploy` passes to
`cdk deploy` after CDK_ARGS. A setting AWS would refuse stops here, with the numbers, instead of
failing CloudFormation after ElastiCache was created.

boto3, not the aws CLI (which a user may not have): boto3 comes with the `infra` extra (the
control plane's pin), and credentials, profile and region resolve as for the CDK CLI (a
`--profile` in CDK_ARGS is used too). Nothing here imports aws_cdk: it answers in about a second.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from payloadstore_controlplane import concurrency

# Fixed logical ids of the long-poll functions (infra/functions.py, function_logical_id).
OWN_FUNCTIONS = {"daemon": "DaemonFunction", "jobs": "JobsFunction"}
STACK_PREFIX = "PayloadStore"
# infra/config.py DEFAULT_STAGE (not imported: the preflight runs before any CDK import).
DEFAULT_STAGE = "dev"
CREDENTIALS_HELP = (
    "configure credentials for the target account as for any `cdk deploy`: `aws configure`, "
    'AWS_PROFILE=<profile> (or CDK_ARGS="--profile <profile>"), or AWS_ACCESS_KEY_ID and '
    "AWS_SECRET_ACCESS_KEY; docs/deploying.md"
)


class PreflightError(Exception):
    """Stops the deploy before CloudFormation starts; the message is the whole explanation."""


def cdk_context(args: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """The `-c key=value` / `--context key=value` pairs of CLI arguments (the last one of a key
    wins, as in the CDK CLI) and a `--profile`."""
    context: dict[str, str] = {}
    profile = None
    items = list(args)
    for i, arg in enumerate(items):
        value = None
        if arg in ("-c", "--context") and i + 1 < len(items):
            value = items[i + 1]
        elif arg.startswith("--context="):
            value = arg.split("=", 1)[1]
        elif arg == "--profile" and i + 1 < len(items):
            profile = items[i + 1]
        elif arg.startswith("--profile="):
            profile = arg.split("=", 1)[1]
        if value is not None and "=" in value:
            key, val = value.split("=", 1)
            context[key] = val
    return context, profile


def wanted(context: dict[str, str]) -> tuple[concurrency.Mode, dict[str, int | None]]:
    mode = concurrency.parse_mode(
        context.get(concurrency.FLAG_MODE, concurrency.AUTO), concurrency.FLAG_MODE
    )
    overrides = {
        group: concurrency.parse_override(context.get(flag), flag)
        for group, flag in concurrency.FLAG_OVERRIDES.items()
    }
    return mode, overrides


AccountReader = Callable[[str], concurrency.AccountConcurrency]


def session_for(profile: str | None) -> Any:
    """A boto3 session with working credentials and a region, or PreflightError saying what is
    missing."""
    import boto3
    from botocore import exceptions

    # As the CDK CLI: AWS_REGION first (botocore itself reads only AWS_DEFAULT_REGION), then
    # AWS_DEFAULT_REGION, then the profile's region.
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except exceptions.ProfileNotFound as e:
        raise PreflightError(f"error: {e}; {CREDENTIALS_HELP}") from None
    if session.get_credentials() is None:
        raise PreflightError(
            f"error: no AWS credentials found: `make deploy` deploys to an AWS account and needs "
            f"its credentials; {CREDENTIALS_HELP}"
        )
    if not session.region_name:
        raise PreflightError(
            "error: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or the profile's "
            "region with `aws configure`) to the region to deploy to"
        )
    try:
        session.client("sts").get_caller_identity()
    except (exceptions.ClientError, exceptions.BotoCoreError) as e:
        raise PreflightError(f"error: AWS refused the credentials: {e}; {CREDENTIALS_HELP}") from e
    return session


def aws_reader(session: Any) -> AccountReader:
    """Reads the account's Lambda concurrency and what the stage's own functions reserve now."""
    from botocore import exceptions

    def read(stage: str) -> concurrency.AccountConcurrency:
        lam = session.client("lambda")
        cfn = session.client("cloudformation")
        limits = lam.get_account_settings()["AccountLimit"]
        own = 0
        for logical_id in OWN_FUNCTIONS.values():
            try:
                resource = cfn.describe_stack_resource(
                    StackName=f"{STACK_PREFIX}-{stage}", LogicalResourceId=logical_id
                )["StackResourceDetail"]
                reserved = lam.get_function_concurrency(
                    FunctionName=resource["PhysicalResourceId"]
                ).get("ReservedConcurrentExecutions")
            except exceptions.ClientError:  # no stack yet, or no such function in it
                continue
            own += int(reserved or 0)
        return concurrency.AccountConcurrency(
            limit=int(limits["ConcurrentExecutions"]),
            unreserved=int(limits["UnreservedConcurrentExecutions"]),
            own_reserved=own,
        )

    return read


def preflight(
    stage: str, cdk_args: Sequence[str], reader: AccountReader | None
) -> concurrency.Decision:
    """The stage's reservation. `reader` reads the account (None: nothing may be read, as when
    every setting is explicit and reserves nothing)."""
    context, _ = cdk_context(cdk_args)
    try:
        mode, overrides = wanted(context)
    except ValueError as e:
        raise PreflightError(f"error: {e}") from None
    if (
        mode == concurrency.AUTO
        and stage == DEFAULT_STAGE
        and not any(c is not None for c in overrides.values())
    ):
        # A dev stage is for trying things: reserving 70 % of the account for its long polls
        # would starve every other function there (issue 45). An explicit N still reserves.
        return concurrency.Decision(
            reason=f"auto reserves nothing for the {DEFAULT_STAGE} stage; "
            f"-c {concurrency.FLAG_MODE}=N reserves N"
        )
    needs_account = mode != concurrency.OFF or any(c is not None for c in overrides.values())
    account = reader(stage) if (needs_account and reader is not None) else None
    try:
        return concurrency.resolve(mode, overrides, account)
    except ValueError as e:
        advice = f"; {concurrency.quota_advice(account.limit)}" if account else ""
        raise PreflightError(f"error: {e}{advice}") from None


def main(argv: Sequence[str] | None = None, reader: AccountReader | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.preflight", description=__doc__)
    parser.add_argument("--stage", required=True)
    parser.add_argument("--write", type=Path, help="write the decided CDK context arguments here")
    parser.add_argument("cdk_args", nargs=argparse.REMAINDER, help="-- then CDK_ARGS as given")
    args = parser.parse_args(argv)
    cdk_args = [a for a in args.cdk_args if a != "--"]
    try:
        if reader is None:
            _, profile = cdk_context(cdk_args)
            reader = aws_reader(session_for(profile))
        decision = preflight(args.stage, cdk_args, reader)
    except PreflightError as e:
        print(e, file=sys.stderr)
        return 1
    print(decision.line())
    if decision.advice:
        print(f"warning: {decision.advice}")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(" ".join(f"-c {k}={v}" for k, v in decision.context().items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
