"""The operator's commands of the command line: tokens (`token create|revoke|list`), a
namespace's policy (`namespace policy`) and the deployed stage's outputs (`stage-output`),
through SSM (the local stack's or AWS) or the deployed admin function."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import click

from ._cli_output import fail
from ._cli_root import Settings, cli
from ._client_core import read_devstack
from .errors import ConfigError, PayloadStoreError

ENV_TOKEN_PARAMETER_PATH = "TOKEN_PARAMETER_PATH"


@dataclass(frozen=True)
class TokenRecord:
    namespace: str
    role: str
    token_id: str


class LambdaTokenAdmin:
    """The deployed admin function (`payloadstore_controlplane.handlers.admin.lambda_handler`), invoked with
    boto3: for operators allowed lambda:InvokeFunction but not the SSM path, and for installs
    without the repository's functions/ directory."""

    def __init__(self, function_name: str, lambda_client: Any = None, region: str | None = None):
        if lambda_client is None:
            import boto3

            lambda_client = boto3.client("lambda", region_name=region)
        self._lambda = lambda_client
        self._function = function_name

    def _invoke(self, event: dict) -> dict:
        response = self._lambda.invoke(
            FunctionName=self._function, Payload=json.dumps(event).encode()
        )
        body = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError") or not isinstance(body, dict):
            raise ConfigError(f"admin function {self._function} failed: {body}")
        if body.get("error"):
            raise ConfigError(f"admin function refused: {body['error']}")
        return body

    def mint(self, namespace: str, role: str) -> tuple[str, TokenRecord]:
        body = self._invoke({"action": "mint", "namespace": namespace, "role": role})
        return body["token"], TokenRecord(body["namespace"], body["role"], body["token_id"])

    def revoke(self, token_or_id: str) -> int:
        key = "token" if token_or_id.startswith("pst_") else "token_id"
        return int(self._invoke({"action": "revoke", key: token_or_id})["revoked"])

    def list(self) -> list[TokenRecord]:
        return [
            TokenRecord(t["namespace"], t["role"], t["token_id"])
            for t in self._invoke({"action": "list"})["tokens"]
        ]

    def policy(self, namespace: str, changes: dict[str, str]) -> dict[str, str]:
        """The namespace's policy after `changes` (none: only read), as the function answers."""
        if changes:
            body = self._invoke({"action": "set_policy", "namespace": namespace, **changes})
        else:
            body = self._invoke({"action": "get_policy", "namespace": namespace})
        return dict(body["policy"])


STACK_PREFIX = "PayloadStore"


def stack_outputs(stage: str, region: str | None = None, cloudformation: Any = None) -> dict:
    """The outputs of the deployed stage `PayloadStore-<stage>` (ApiUrl, AdminFunctionName, ...),
    read with boto3: no AWS CLI, no jq."""
    if cloudformation is None:
        import boto3

        cloudformation = boto3.client("cloudformation", region_name=region)
    name = f"{STACK_PREFIX}-{stage}"
    try:
        (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except Exception as e:
        raise ConfigError(f"cannot read the stack {name}: {e}") from e
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def admin_function_of(stage: str, region: str | None = None, cloudformation: Any = None) -> str:
    outputs = stack_outputs(stage, region, cloudformation)
    if "AdminFunctionName" not in outputs:
        raise ConfigError(f"the stack {STACK_PREFIX}-{stage} has no AdminFunctionName output")
    return outputs["AdminFunctionName"]


def token_store(
    settings: Settings,
    path: str | None,
    ssm_endpoint: str | None,
    region: str | None,
    admin_function: str | None = None,
    stage: str | None = None,
):
    """The token store over SSM (the local stack's emulator when .devstack.json is found, or
    --ssm-endpoint; else AWS with TOKEN_PARAMETER_PATH), through the local stack's package (the
    client SDK imports nothing of the control plane); or the deployed admin function when one is
    named, or the admin function of the deployed `stage`: both need nothing but boto3."""
    if stage and not admin_function:
        admin_function = admin_function_of(stage, region)
    if admin_function:
        return LambdaTokenAdmin(admin_function, region=region)
    # The deployed store needs the control plane alone (`payloadstore[controlplane]`); the local
    # stack's emulator needs the local stack too (its credentials and token path, below).
    try:
        import boto3

        from payloadstore_controlplane.store.tokens import TokenStore
    except ImportError as e:
        raise ConfigError(
            "token commands need the control plane's packages "
            f"(pip install 'payloadstore[stack]'): {e}"
        ) from e
    endpoint = ssm_endpoint
    if endpoint is None and not os.environ.get(ENV_TOKEN_PARAMETER_PATH):
        found = settings.devstack_file()
        if found is not None and found.exists():
            # moto's server answers SSM on the same endpoint as S3.
            endpoint = read_devstack(found)[1]["s3_endpoint"]
    if endpoint:
        try:
            from payloadstore_devstack.services import local_aws_env
            from payloadstore_devstack.stack import DEV_TOKEN_PATH
        except ImportError as e:
            raise ConfigError(
                "the local stack's token store needs the local stack's packages "
                f"(pip install 'payloadstore[stack]'): {e}"
            ) from e

        for name, value in local_aws_env(endpoint, region or "us-east-1").items():
            os.environ.setdefault(name, value)
        path = path or DEV_TOKEN_PATH
    path = path or os.environ.get(ENV_TOKEN_PARAMETER_PATH)
    if not path:
        raise ConfigError(
            f"no token store: start the local stack, or set {ENV_TOKEN_PARAMETER_PATH} (and AWS credentials) "
            "for the deployed one"
        )
    ssm = boto3.client(
        "ssm", endpoint_url=endpoint, region_name=region or os.environ.get("AWS_REGION") or None
    )
    # An operator's command may wait on SSM longer than the authorizer's 0.8 s (a cold client).
    return TokenStore(ssm, path, cache_s=0, ssm_wait_s=30.0)


_token_options = [
    click.option("--path", "param_path", help=f"SSM parameter path [{ENV_TOKEN_PARAMETER_PATH}]"),
    click.option("--ssm-endpoint", help="SSM endpoint URL (default: the local stack's, else AWS)"),
    click.option("--region", help="AWS region (default: the environment's)"),
    click.option(
        "--admin-function",
        envvar="PAYLOADSTORE_ADMIN_FUNCTION",
        help="invoke this deployed admin Lambda instead of writing SSM [PAYLOADSTORE_ADMIN_FUNCTION]",
    ),
    click.option(
        "--stage",
        envvar="PAYLOADSTORE_STAGE",
        help="the deployed stage (stack PayloadStore-<stage>) whose admin Lambda to invoke "
        "[PAYLOADSTORE_STAGE]",
    ),
]


def with_token_options(fn):
    for option in reversed(_token_options):
        fn = option(fn)
    return fn


@cli.group()
def token() -> None:
    """Mint and revoke bearer tokens (shown once, stored as sha256 hashes in SSM)."""


@cli.command("stage-output")
@click.argument("output", default="ApiUrl")
@click.option("--stage", envvar="PAYLOADSTORE_STAGE", required=True, help="the deployed stage")
@click.option("--region", help="AWS region (default: the environment's)")
def stage_output(output: str, stage: str, region: str | None) -> None:
    """Print one output of the deployed stage's stack (ApiUrl by default; AdminFunctionName,
    PayloadBucketName, TokenParameterPath, ...): what `make smoke ENDPOINT=...` needs."""
    try:
        outputs = stack_outputs(stage, region)
    except PayloadStoreError as e:
        fail(e)
    if output not in outputs:
        fail(ConfigError(f"no output {output!r}; the stack has {', '.join(sorted(outputs))}"))
    click.echo(outputs[output])


@token.command("create")
@click.option("--namespace", "-n", "token_namespace", required=True, help="the token's namespace")
@click.option("--role", type=click.Choice(["client", "daemon"]), required=True)
@with_token_options
@click.pass_obj
def token_create(
    settings: Settings,
    token_namespace,
    role,
    param_path,
    ssm_endpoint,
    region,
    admin_function,
    stage,
) -> None:
    """Print a new token on stdout (it is not stored anywhere in plain text)."""
    try:
        store = token_store(settings, param_path, ssm_endpoint, region, admin_function, stage)
        plain, info = store.mint(token_namespace, role)
    except PayloadStoreError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001 - boto/validation errors become one line
        fail(ConfigError(f"cannot create token: {e}"))
    click.echo(plain)
    click.echo(
        f"created token_id={info.token_id} namespace={info.namespace} role={info.role}", err=True
    )


@token.command("revoke")
@click.argument("token_or_id")
@with_token_options
@click.pass_obj
def token_revoke(
    settings: Settings, token_or_id, param_path, ssm_endpoint, region, admin_function, stage
) -> None:
    """Revoke a token, given the token or its id (the hash prefix `token create` printed)."""
    try:
        store = token_store(settings, param_path, ssm_endpoint, region, admin_function, stage)
        removed = store.revoke(token_or_id)
    except PayloadStoreError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001
        fail(ConfigError(f"cannot revoke token: {e}"))
    if not removed:
        click.echo("error: no such token", err=True)
        sys.exit(4)
    click.echo(f"revoked count={removed}", err=True)


@token.command("list")
@with_token_options
@click.pass_obj
def token_list(settings: Settings, param_path, ssm_endpoint, region, admin_function, stage) -> None:
    """List token ids with their namespace and role."""
    try:
        store = token_store(settings, param_path, ssm_endpoint, region, admin_function, stage)
        infos = store.list()
    except PayloadStoreError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001
        fail(ConfigError(f"cannot list tokens: {e}"))
    for info in sorted(infos, key=lambda i: (i.namespace, i.role, i.token_id)):
        click.echo(f"{info.token_id}\t{info.namespace}\t{info.role}")


# -- namespaces ------------------------------------------------------------------------------


@cli.group()
def namespace() -> None:
    """Namespace settings kept beside its tokens: the policy (retention, KMS key, inline)."""


@namespace.command("policy")
@click.argument("ns")
@click.option(
    "--retention",
    type=click.Choice(["consume", "1d", "2d", "7d", "30d"]),
    help="how long payloads and results are kept (default 2d)",
)
@click.option(
    "--kms-key", help="none (SSE-S3, default), stack (the stack's key) or a granted key's ARN"
)
@click.option(
    "--inline",
    type=click.Choice(["allowed", "never"]),
    help="never: every payload and result goes to S3, nothing rests in Redis",
)
@with_token_options
@click.pass_obj
def namespace_policy(
    settings: Settings,
    ns,
    retention,
    kms_key,
    inline,
    param_path,
    ssm_endpoint,
    region,
    admin_function,
    stage,
) -> None:
    """Print the namespace's policy as JSON; with an option, change it first (the options left
    out keep their values). It applies to uploads presigned from then on (docs/operations.md)."""
    changes = {
        k: v
        for k, v in (("retention", retention), ("kms_key", kms_key), ("inline", inline))
        if v is not None
    }
    try:
        store = token_store(settings, param_path, ssm_endpoint, region, admin_function, stage)
        if isinstance(store, LambdaTokenAdmin):
            policy = store.policy(ns, changes)
        elif changes:
            policy = store.set_policy(ns, **changes, **_kms_keys(settings, ssm_endpoint)).as_dict()
        else:
            policy = store.read_policy(ns).as_dict()
    except PayloadStoreError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001 - validation and AWS errors become one line
        fail(ConfigError(f"cannot {'set' if changes else 'read'} the policy of {ns}: {e}"))
    click.echo(json.dumps(policy))


def _kms_keys(settings: Settings, ssm_endpoint: str | None) -> dict:
    """The stack's key and the other granted keys a policy may name, for a store written here:
    KMS_KEY_ARN / KMS_KEY_ARNS (as the deployed functions have them), else the local stack's
    key when the store is the local stack's (its state file found, or an endpoint given)."""
    stack_key = os.environ.get("KMS_KEY_ARN") or None
    found = settings.devstack_file()
    if stack_key is None and (ssm_endpoint or (found is not None and found.exists())):
        from payloadstore_controlplane.models.policy import LOCAL_KMS_KEY_ARN

        stack_key = LOCAL_KMS_KEY_ARN
    granted = tuple(k.strip() for k in os.environ.get("KMS_KEY_ARNS", "").split(",") if k.strip())
    return {"stack_key_arn": stack_key, "granted_keys": granted}
