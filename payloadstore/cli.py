"""`payloadstore`: the command line of the SDK.

Exit codes: 0 ok; 1 the job failed (remote error), was cancelled, or another error; 2 usage or configuration;
3 auth (bad, revoked or foreign token); 4 job not found; 5 still pending after --wait;
6 payload over the cap; 7 control plane unreachable or unhealthy; 8 payload corrupt or lost.
Errors are one line on stderr: `error: <what happened and what to do>`.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ._blobs import Blob
from ._client_core import (
    DEFAULT_NAMESPACE,
    ENV_ENDPOINT,
    ENV_NAMESPACE,
    ENV_TOKEN,
    find_devstack_file,
    read_devstack,
)
from ._payloads import write_into
from .client import Client
from .codec import CodecError
from .errors import ConfigError, JobFailed, PayloadStoreError

ENV_TOKEN_PARAMETER_PATH = "TOKEN_PARAMETER_PATH"


class Settings:
    def __init__(
        self,
        endpoint: str | None,
        token: str | None,
        namespace: str | None,
        devstack: str | None,
        verbose: bool,
    ):
        self.endpoint = endpoint
        self.token = token
        self.namespace = namespace
        self.devstack = devstack
        self.verbose = verbose

    def devstack_file(self) -> Path | None:
        return Path(self.devstack) if self.devstack else find_devstack_file()

    def client(self, role: str = "client", **kwargs: Any) -> Client:
        """Flags and PAYLOADSTORE_* variables, else the local stack's .devstack.json: the
        endpoint and the token from the same one (a given token never goes to a .devstack.json
        endpoint)."""
        namespace = self.namespace or DEFAULT_NAMESPACE
        endpoint, token = self.endpoint, self.token
        if not (endpoint and token):
            found = self.devstack_file()
            if found is None or not found.exists():
                missing = " and ".join(
                    n
                    for n, v in (
                        (f"--endpoint/{ENV_ENDPOINT}", endpoint),
                        (f"--token/{ENV_TOKEN}", token),
                    )
                    if not v
                )
                raise ConfigError(
                    f"set {missing}, or start the local stack (payloadstore dev) so .devstack.json exists"
                )
            _, stack = read_devstack(found)
            # A token goes only to an endpoint of its own source: a token given (flag or
            # environment) is never sent to the endpoint a .devstack.json names (any directory
            # above may hold one, e.g. a cloned repository's), and a .devstack.json token only
            # to its own stack.
            if token:
                raise ConfigError(
                    f"a token from --token/{ENV_TOKEN} needs its endpoint from the same place: "
                    f"set --endpoint/{ENV_ENDPOINT} (not taken from {found})"
                )
            if endpoint and endpoint.rstrip("/") != str(stack.get("endpoint") or "").rstrip("/"):
                raise ConfigError(
                    f"an endpoint from --endpoint/{ENV_ENDPOINT} needs its token from the same "
                    f"place: set --token/{ENV_TOKEN} ({found} holds tokens of "
                    f"{stack.get('endpoint')}, not {endpoint})"
                )
            endpoint = endpoint or stack.get("endpoint")
            try:
                token = stack["namespaces"][namespace][f"{role}_token"]
            except (KeyError, TypeError) as e:
                raise ConfigError(f"{found} has no {role} token for namespace {namespace!r}") from e
        if not endpoint:
            # A .devstack.json without an endpoint: Client's own refusal, before any other.
            raise ConfigError(f"no control-plane endpoint: pass endpoint= or set {ENV_ENDPOINT}")
        return Client(endpoint, token, namespace, **kwargs)

    def endpoint_only(self) -> str:
        if self.endpoint:
            return self.endpoint
        found = self.devstack_file()
        if found is None or not found.exists():
            raise ConfigError(
                f"set --endpoint/{ENV_ENDPOINT}, or start the local stack (payloadstore dev)"
            )
        return read_devstack(found)[1]["endpoint"]


def refuse_value(error: CodecError) -> None:
    """A value the codec refuses (an integer past 64 bits, ...): nothing was enqueued; exit 2."""
    click.echo(f"error: {error}; nothing was enqueued", err=True)
    sys.exit(2)


def fail(error: BaseException, verbose: bool = False) -> None:
    """Print one line (plus the remote traceback when verbose) and exit with the error's code."""
    if isinstance(error, JobFailed):
        click.echo(f"error: job {error.job_id} failed: {error.type}: {error.message}", err=True)
        if error.traceback:
            if verbose:
                click.echo(error.traceback.rstrip(), err=True)
            else:
                click.echo("  (run with -v for the remote traceback)", err=True)
    else:
        message = getattr(error, "message", None) or str(error)
        click.echo(
            f"error: {message.splitlines()[0] if message else type(error).__name__}", err=True
        )
    sys.exit(getattr(error, "exit_code", 1))


def json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    if isinstance(value, Blob):
        return {"blob": value.sha256, "size": value.size}
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return repr(value)


def json_safe(value: Any) -> Any:
    """A value JSON can hold, by the CLI's documented rule: NaN and the infinities as the strings
    "NaN", "Infinity", "-Infinity"; map keys as strings (bool and None as JSON writes them,
    numbers in their JSON form, bytes as their UTF-8 text or else `0x` + hex, anything else its
    repr; a key that would repeat one already there is its repr, and if that repeats one too,
    `<type>:<repr>`); bytes as `{"bytes": N}`,
    arrays as lists, other types as `json_default` has them."""
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or type(value) in (str, bool, int):
        return value
    if isinstance(value, (str, bool, int)):
        return json_safe_scalar(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[unique_key(out, k)] = json_safe(v)
        return out
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    converted = json_default(value)
    return converted if isinstance(converted, str) else json_safe(converted)


def unique_key(out: dict[str, Any], k: Any) -> str:
    """`k`'s JSON key, else (that one is taken) its repr, else (repr alike too: 1 after "1",
    1.5 after "1.5") `<type>:<repr>`, then a count: no entry printed over another."""
    for key in (json_key(k), repr(k)):
        if key not in out:
            return key
    key = base = f"{type(k).__name__}:{k!r}"
    n = 1
    while key in out:
        n += 1
        key = f"{base}#{n}"
    return key


def json_safe_scalar(value: Any) -> Any:
    """A subclass of str, int or bool (an enum, say) as its plain value."""
    for plain in (bool, int, str):
        if isinstance(value, plain):
            return plain(value)
    return value


def json_key(key: Any) -> str:
    if isinstance(key, str):
        return str(key)
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, (int, float)):
        safe = json_safe(key)
        return safe if isinstance(safe, str) else json.dumps(safe)
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    return repr(key)


def dumps_json(value: Any) -> str:
    """Strict JSON (no NaN, no non-string keys), whatever the value: see `json_safe`."""
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False)


def emit_value(value: Any, out: str | None) -> None:
    """bytes go out raw (to --out or stdout); anything else as JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if out:
            # Beside it, then renamed over it: a failed write leaves the old file whole.
            write_into(out, data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return
    text = dumps_json(value)
    if out:
        write_into(out, (text + "\n").encode())
    else:
        click.echo(text)


class Seconds(click.ParamType):
    """A duration in seconds: a number >= `min_s` (`inf`: no limit, where `finite` is not
    asked); NaN, infinities where a finite one is needed, and numbers below it are bad input
    (exit 2), refused before any call (click's FloatRange lets NaN through)."""

    name = "seconds"

    def __init__(self, min_s: float = 0.0, *, finite: bool = False):
        self.min_s, self.finite = min_s, finite

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if math.isnan(seconds) or seconds < self.min_s or (self.finite and math.isinf(seconds)):
            kind = "a finite number" if self.finite else "a number"
            self.fail(f"{value!r} is not {kind} of seconds >= {self.min_s:g}", param, ctx)
        return seconds


SECONDS = Seconds()


class OutPath(click.Path):
    """A file to write the result into: not a directory, in a directory that exists, refused
    before any call (else the job is enqueued and run, and its result lost at the end)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        path = super().convert(value, param, ctx)
        parent = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(parent):
            self.fail(f"{os.fspath(path)!r}: no directory {parent!r} to write it in", param, ctx)
        return path


OUT_PATH = OutPath()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--endpoint", envvar=ENV_ENDPOINT, help=f"control-plane URL [{ENV_ENDPOINT}]")
@click.option("--token", envvar=ENV_TOKEN, help=f"bearer token [{ENV_TOKEN}]")
@click.option(
    "--namespace",
    "-n",
    envvar=ENV_NAMESPACE,
    help=f"namespace [{ENV_NAMESPACE}, default {DEFAULT_NAMESPACE}]",
)
@click.option(
    "--devstack",
    type=click.Path(dir_okay=False),
    envvar="PAYLOADSTORE_DEVSTACK",
    help="the local stack's state file [default: .devstack.json here or above]",
)
@click.option("--verbose", "-v", is_flag=True, help="log requests and show remote tracebacks")
@click.pass_context
def cli(ctx: click.Context, endpoint, token, namespace, devstack, verbose) -> None:
    """Queue jobs whose payloads live inline in Redis or in S3, and run daemons for them."""
    from ._logtime import utc_handler

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        handlers=[
            utc_handler(
                logging.StreamHandler(sys.stderr), "%(asctime)s %(levelname)s %(name)s %(message)s"
            )
        ],
    )
    ctx.obj = Settings(endpoint, token, namespace, devstack, verbose)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def dev(ctx: click.Context) -> None:
    """Run the control plane locally (redis-server, S3 emulator, gateway); options pass through."""
    import importlib.util

    needed = (
        "payloadstore_controlplane",
        "pydantic",
        "redis",
        "boto3",
        "aws_lambda_powertools",
        "moto",
    )
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        fail(
            ConfigError(
                "payloadstore dev needs the local stack's packages: "
                f"pip install 'payloadstore[stack]' (missing: {', '.join(missing)})"
            )
        )
    from .devstack.stack import main as stack_main

    sys.exit(stack_main(list(ctx.args)))


# -- tokens ----------------------------------------------------------------------------------


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
    try:
        import boto3

        from .devstack.tokens import TokenStore
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
        from .devstack.services import local_aws_env
        from .devstack.stack import DEV_TOKEN_PATH

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
        from .devstack.s3_emulator import LOCAL_KMS_KEY_ARN

        stack_key = LOCAL_KMS_KEY_ARN
    granted = tuple(k.strip() for k in os.environ.get("KMS_KEY_ARNS", "").split(",") if k.strip())
    return {"stack_key_arn": stack_key, "granted_keys": granted}


# -- jobs ------------------------------------------------------------------------------------


@cli.command()
@click.argument("queue")
@click.option(
    "--file",
    "file_path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="pass this file's bytes as the one argument ('-' for stdin)",
)
@click.option("--json", "json_text", help="pass this JSON value as the one argument")
@click.option(
    "--jsonl",
    "jsonl_path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="one job per line of this JSON Lines file ('-' for stdin), through the batch route",
)
@click.option(
    "--blob",
    "blob_args",
    multiple=True,
    metavar="NAME=PATH",
    help="store the file once in the namespace (uploaded only if new) and pass it as the "
    "keyword argument NAME (a Blob); repeatable",
)
@click.option(
    "--wait", type=SECONDS, default=None, help="then wait up to S seconds and print the result"
)
@click.option("--out", type=OUT_PATH, help="with --wait: write the result here")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="progress bar (default: when stderr is a terminal)",
)
@click.pass_obj
def enqueue(
    settings: Settings, queue, file_path, json_text, jsonl_path, blob_args, wait, out, progress
) -> None:
    """Enqueue a job on QUEUE; prints the job id. The daemon's function is called with one
    argument: the file's bytes or the JSON value, and with each --blob NAME=PATH as a keyword
    argument (a Blob). With --jsonl, one job per line (printed one job id per line, in order),
    sent BATCH_MAX_JOBS at a time."""
    given = [x for x in (file_path, json_text, jsonl_path) if x is not None]
    if len(given) > 1 or (not given and not blob_args):
        raise click.UsageError("give exactly one of --file, --json or --jsonl (or --blob)")
    blob_paths = parse_blob_args(blob_args)
    if jsonl_path is not None:
        if wait is not None or out is not None or blob_paths:
            raise click.UsageError("--wait, --out and --blob take one job: not with --jsonl")
        enqueue_lines(settings, queue, read_jsonl(jsonl_path), progress)
        return
    args = one_value(file_path, json_text)
    try:
        with settings.client("client", progress=progress) as client:
            kwargs = {name: client.blob(path) for name, path in blob_paths.items()}
            job = client.queue(queue).submit(args, kwargs, progress=progress)
            click.echo(job.job_id)
            click.echo(f"enqueued job_id={job.job_id} queue={queue} tier={job.tier}", err=True)
            if wait is not None:
                emit_value(job.result(timeout=wait, progress=progress), out)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    except CodecError as e:
        refuse_value(e)


def one_value(file_path: str | None, json_text: str | None) -> tuple:
    """The job's one positional argument: the JSON value or the file's bytes (none: ())."""
    if json_text is not None:
        try:
            return (json.loads(json_text),)
        except ValueError as e:
            raise click.BadParameter(f"not JSON: {e}", param_hint="--json") from e
    if file_path == "-":
        return (sys.stdin.buffer.read(),)
    if file_path is not None:
        return (Path(file_path).read_bytes(),)
    return ()


def parse_blob_args(values: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name.isidentifier() or not path:
            raise click.BadParameter(f"{item!r} is not NAME=PATH", param_hint="--blob")
        if not Path(path).is_file():
            raise click.BadParameter(f"{path}: no such file", param_hint="--blob")
        out[name] = Path(path)
    return out


@cli.group()
def blob() -> None:
    """Blobs: content stored once per namespace, referenced by any number of jobs."""


@blob.command("put")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def blob_put(settings: Settings, path) -> None:
    """Store the file PATH once in the namespace (uploaded only if the namespace does not have
    it yet); prints its sha256."""
    try:
        with settings.client("client") as client:
            b = client.blob(Path(path))
            uploaded = client.blobs.bytes_uploaded
    except PayloadStoreError as e:
        fail(e, settings.verbose)
        return
    click.echo(b.sha256)
    click.echo(f"blob sha256={b.sha256} size={b.size} uploaded_bytes={uploaded}", err=True)


def read_jsonl(path: str) -> list[Any]:
    """Every value of a JSON Lines file, checked before anything is enqueued (blank lines skip)."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    values: list[Any] = []
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except ValueError as e:
                raise click.BadParameter(
                    f"line {number} is not JSON: {e}", param_hint="--jsonl"
                ) from e
    finally:
        if stream is not sys.stdin:
            stream.close()
    if not values:
        raise click.BadParameter("no JSON values in the file", param_hint="--jsonl")
    return values


def enqueue_lines(settings: Settings, queue: str, values: list[Any], progress) -> None:
    from .errors import BatchError

    try:
        with settings.client("client", progress=progress) as client:
            try:
                jobs = client.queue(queue).map(values, progress=progress)
            except BatchError as e:
                for job in e.jobs:
                    click.echo(job.job_id if job is not None else "-")
                for index, error in sorted(e.errors.items()):
                    message = getattr(error, "message", None) or str(error)
                    click.echo(f"error: line {index + 1}: {message}", err=True)
                first = e.errors[min(e.errors)]
                sys.exit(getattr(first, "exit_code", 1))
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    except CodecError as e:
        refuse_value(e)
    for job in jobs:
        click.echo(job.job_id)
    tiers = {t: sum(j.tier == t for j in jobs) for t in ("inline", "s3")}
    click.echo(
        f"enqueued {len(jobs)} jobs queue={queue} inline={tiers['inline']} s3={tiers['s3']}",
        err=True,
    )


@cli.command()
@click.argument("job_id")
@click.option(
    "--wait", type=SECONDS, default=0.0, show_default=True, help="seconds to wait for a pending job"
)
@click.option("--out", type=OUT_PATH, help="write the result here (bytes raw, else JSON)")
@click.option("--progress/--no-progress", default=None)
@click.pass_obj
def result(settings: Settings, job_id, wait, out, progress) -> None:
    """Print a job's result (JSON, or raw bytes); exit 5 while it is still pending."""
    try:
        with settings.client("client", progress=progress) as client:
            emit_value(client.job(job_id).result(timeout=wait, progress=progress), out)
    except PayloadStoreError as e:
        fail(e, settings.verbose)


@cli.command()
@click.argument("job_id")
@click.option(
    "--show-args",
    is_flag=True,
    help="also print the job's arguments (and result, once there is one): a decoded preview "
    "of inline values (S3 ones too, up to 1 MiB or their structure), the S3 reference of S3 ones",
)
@click.pass_obj
def status(settings: Settings, job_id, show_args: bool) -> None:
    """Print a job's status as JSON; with --show-args, then what it carried."""
    try:
        with settings.client("client") as client:
            job = client.job(job_id)
            click.echo(dumps_json(job.status().raw))
            if show_args:
                stored = job.payloads()
                show_payload("args", stored.args, client)
                if stored.result is not None:
                    show_payload("result", stored.result, client)
    except PayloadStoreError as e:
        fail(e, settings.verbose)


def show_payload(name: str, stored, client: Client) -> None:
    """`args: inline 12 B` or `args: s3 s3://bucket/key 5242880 B application/msgpack`, then the
    preview indented (never executes or unpickles anything: payloadstore._preview)."""
    from ._preview import describe

    facts = describe(stored, client.wire.http)
    line = [f"{name}:", str(facts["tier"] or "-")]
    if facts.get("key"):
        line.append(f"s3://{facts.get('bucket')}/{facts['key']}")
    if facts.get("size") is not None:
        line.append(f"{facts['size']} B")
    if facts.get("content_type"):
        line.append(str(facts["content_type"]))
    click.echo(" ".join(line))
    if facts.get("gone"):
        why = {
            "not_kept": "not kept (an inline job's arguments are freed when it succeeds)",
            "consumed": "consumed (retention consume deleted the object)",
            "answer_limit": "not shown (with the inline result it would pass the answer limit)",
        }
        click.echo("  " + why.get(facts["gone"], f"gone: {facts['gone']}"))
    elif facts.get("preview_error"):
        click.echo(f"  (no preview: {facts['preview_error']})")
    elif facts.get("preview") is not None:
        text = facts["preview"] + (" …(truncated)" if facts.get("truncated") else "")
        for row in text.splitlines() or [""]:
            click.echo("  " + row)


@cli.command()
@click.argument("job_id")
@click.pass_obj
def cancel(settings: Settings, job_id) -> None:
    """Cancel a job: a queued one ends cancelled and never runs; a running one is asked to stop
    (its daemon learns it from its next heartbeat). Prints the state; a finished job exits 1."""
    try:
        with settings.client("client") as client:
            answer = client.job(job_id).cancel()
            if answer.cancel_requested:
                click.echo(f"{job_id} running: cancel requested")
            else:
                click.echo(f"{job_id} {answer.state}")
    except PayloadStoreError as e:
        fail(e, settings.verbose)


LIST_STATES = ("queued", "running", "failed", "cancelled", "succeeded")
REDRIVE_STATES = ("failed", "payload_lost", "payload_corrupt", "cancelled")


@cli.command()
@click.argument("queue")
@click.option(
    "--state",
    type=click.Choice(LIST_STATES),
    default="queued",
    show_default=True,
    help="failed: every terminal state but succeeded and cancelled",
)
@click.option(
    "--limit", type=click.IntRange(1, 100), default=50, show_default=True, help="jobs per page"
)
@click.option("--cursor", help="start after this page (the `next` a previous listing printed)")
@click.option("--all", "every_page", is_flag=True, help="every page, not only the first")
@click.option("--json", "as_json", is_flag=True, help="one job status per line (JSON)")
@click.pass_obj
def jobs(settings: Settings, queue, state, limit, cursor, every_page, as_json) -> None:
    """A queue's jobs in one state, newest first: id, state, attempts, tier, age, error type.
    `payloadstore status JOB_ID` shows one job whole, with its remote traceback."""
    from ._jobs_table import jobs_table

    listed = []
    next_cursor = None
    try:
        with settings.client() as client:
            for page in client.queue(queue).jobs(state=state, limit=limit, cursor=cursor):
                listed.extend(page.jobs)
                next_cursor = page.next_cursor
                if not every_page:
                    break
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    if as_json:
        for job in listed:
            click.echo(dumps_json(job.raw))
    else:
        click.echo(jobs_table(listed))
    if next_cursor and not every_page:
        click.echo(f"more: --cursor {next_cursor} (or --all)", err=True)


@cli.command()
@click.argument("job_id")
@click.pass_obj
def retry(settings: Settings, job_id) -> None:
    """Queue a failed or cancelled job again, with the same id. A job that succeeded, is queued
    or running, or whose arguments are past the retention exits 1 saying why."""
    try:
        with settings.client() as client:
            answer = client.job(job_id).retry()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{answer.job_id} {answer.state} (next attempt {answer.attempt})")


@cli.command()
@click.argument("queue")
@click.option(
    "--state",
    "states",
    type=click.Choice(REDRIVE_STATES),
    multiple=True,
    help="retry jobs in this state (repeatable; default: failed, payload_lost, payload_corrupt)",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=None, help="at most this many [100]")
@click.pass_obj
def redrive(settings: Settings, queue, states, limit) -> None:
    """Retry the queue's failed jobs (newest first), e.g. once the bug that failed them is
    fixed. Prints how many were retried and skipped (arguments past the retention)."""
    try:
        with settings.client() as client:
            answer = client.queue(queue).redrive(states=states or None, limit=limit)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{queue}: retried {answer.retried}, skipped {answer.skipped}")


@cli.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@click.pass_obj
def purge(settings: Settings, queue, yes) -> None:
    """Cancel every queued job of QUEUE (running jobs go on). Asks first unless --yes."""
    if not yes:
        click.confirm(
            f"cancel every queued job of queue {queue} in namespace "
            f"{settings.namespace or DEFAULT_NAMESPACE}?",
            abort=True,
            err=True,
        )
    try:
        with settings.client() as client:
            answer = client.queue(queue).purge()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{queue}: cancelled {answer.cancelled}, {answer.remaining} still queued")


def load_function(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter("use MODULE:FUNCTION, e.g. tasks:resize", param_hint="MODULE:FUNC")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise click.BadParameter(
            f"cannot import {module_name}: {e}", param_hint="MODULE:FUNC"
        ) from e
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise click.BadParameter(f"{module_name} has no {attr}", param_hint="MODULE:FUNC")
    if not callable(target):
        raise click.BadParameter(f"{spec} is not callable", param_hint="MODULE:FUNC")
    return target


@cli.command()
@click.argument("function")
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    required=True,
    help="queue to take jobs from (repeatable)",
)
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--poll-wait",
    type=Seconds(0.0, finite=True),
    default=10.0,
    show_default=True,
    help="long-poll seconds",
)
@click.option(
    "--max-jobs", type=click.IntRange(min=1), default=None, help="stop after this many jobs"
)
@click.option("--exit-when-idle", is_flag=True, help="stop at the first empty poll")
@click.pass_obj
def daemon(
    settings: Settings, function, queues, concurrency, poll_wait, max_jobs, exit_when_idle
) -> None:
    """Run FUNCTION (module:function) for each job of the queues, until SIGTERM/SIGINT."""
    from .daemon import Daemon

    fn = load_function(function)
    if not settings.verbose:
        logging.getLogger("payloadstore").setLevel(logging.INFO)
    try:
        with settings.client("daemon", progress=False) as client:
            worker = Daemon(client, list(queues), concurrency=concurrency, wait_s=poll_wait)
            stats = worker.run(fn, max_jobs=max_jobs, stop_when_idle=exit_when_idle)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(" ".join(f"{k}={v}" for k, v in sorted(stats.items())) or "no jobs", err=True)


@cli.command()
@click.pass_obj
def health(settings: Settings) -> None:
    """Check the control plane's Redis and bucket; exit 7 when a check fails."""
    try:
        endpoint = settings.endpoint_only()
        with Client(endpoint, "-", settings.namespace or DEFAULT_NAMESPACE) as client:
            healthy, body = client.health()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    for name, check in sorted((body.get("checks") or {}).items()):
        ok = check.get("ok") if isinstance(check, dict) else bool(check)
        detail = check.get("detail", "") if isinstance(check, dict) else str(check)
        click.echo(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    click.echo(f"status: {body.get('status')}")
    sys.exit(0 if healthy else 7)


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
@click.pass_obj
def queues(settings: Settings, queue: str | None, as_json: bool) -> None:
    """Queued, in flight and oldest queued age of every queue (or of QUEUE); 4 if unknown."""
    from dataclasses import asdict

    from ._top import queue_table

    try:
        with settings.client() as client:
            found = [client.queue(queue).stats()] if queue else client.queues()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    rows = [asdict(q) for q in found]
    click.echo(json.dumps({"queues": rows}) if as_json else queue_table(rows))


@cli.command()
@click.option(
    "--interval",
    type=Seconds(0.1, finite=True),
    default=2.0,
    show_default=True,
    help="seconds between refreshes",
)
@click.pass_obj
def top(settings: Settings, interval: float) -> None:
    """A refreshing view of every queue: depth, in flight, oldest age, depth trend. Ctrl-C quits."""
    from dataclasses import asdict

    from ._top import run_top

    try:
        with settings.client() as client:
            run_top(
                lambda: [asdict(q) for q in client.queues()],
                title=f"payloadstore top: namespace {client.namespace} at {client.wire.endpoint}",
                interval_s=interval,
            )
    except PayloadStoreError as e:
        fail(e, settings.verbose)


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="port to serve on (0: any free port)",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="address to serve on: anyone who reaches it acts with this process's token",
)
@click.option(
    "--refresh",
    type=Seconds(0.5, finite=True),
    default=3.0,
    show_default=True,
    help="seconds between the page's refreshes",
)
@click.pass_obj
def dashboard(settings: Settings, port: int, host: str, refresh: float) -> None:
    """Serve a web page of the namespace's queues and jobs (retry, cancel, redrive, purge) on
    http://127.0.0.1:PORT/. The token stays in this process; Ctrl-C stops it."""
    from .dashboard import ClientBackend, Dashboard

    try:
        client = settings.client("client", progress=False)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    try:
        server = Dashboard(
            ClientBackend(client),
            host,
            port,
            secrets_to_hide=ClientBackend.secrets(client),
            refresh_s=refresh,
        )
    except (ValueError, OSError) as e:
        client.close()
        fail(ConfigError(f"cannot serve the dashboard on {host}:{port}: {e}"))
    if not ipaddress_is_loopback(host):
        click.echo(
            f"warning: serving on {host}: anyone who reaches it acts with this token", err=True
        )
    click.echo(
        f"dashboard url={server.url} namespace={client.namespace} "
        f"endpoint={client.wire.endpoint} (Ctrl-C to stop)",
        err=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        client.close()


def ipaddress_is_loopback(host: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(host).is_loopback


def terminate_as_interrupt() -> None:
    """SIGTERM ends the command as Ctrl-C does (exit 143): a transfer in hand stops within a
    round and removes its temporary files, where the default action would kill the process
    with them left behind. `payloadstore daemon` installs its own handlers while it runs."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)


def main(argv: list[str] | None = None) -> None:
    """The console script: whatever goes wrong is one `error:` line (exit 1 for an error no
    command anticipated; `-v` adds its traceback), never a bare traceback."""
    terminate_as_interrupt()
    try:
        code = cli.main(args=argv, prog_name="payloadstore", standalone_mode=False)
    except click.UsageError as e:
        # A bad option or argument: one line, as every other error (exit 2).
        hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        click.echo(f"error: {e.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        # A confirmation answered no, or Ctrl-C at a prompt (as click itself: exit 1).
        click.echo("error: aborted", err=True)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - the CLI's contract: one line, whatever it was
        if "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:]):
            import traceback

            traceback.print_exc()
        click.echo(
            f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", err=True
        )
        sys.exit(1)
    # --help, a command's ctx.exit(code): its code (0 when the command returned).
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
