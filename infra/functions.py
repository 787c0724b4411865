"""One Lambda per function group of `functions/payloadstore_controlplane/routes.py`, plus the shared layer."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.bundling import CodeBundling, LayerBundling, bundling_image
from infra.config import (
    ADMIN_FUNCTION,
    ARCHITECTURES,
    AUTHORIZER_FUNCTION,
    BLOB_OBJECT_ACTIONS,
    BUCKET_ACTIONS,
    CTX_SETTINGS_PREFIX,
    FUNCTION_TUNING,
    FUNCTIONS_DIR,
    LOCK_FILE,
    OBJECT_ACTIONS,
    PYTHON_VERSION,
    REDIS_FUNCTIONS,
    SERVICE_NAME,
    StageNames,
    architecture_of,
    log_level_of,
    memory_of,
    reserved_concurrency_of,
)
from infra.storage import BLOB_PREFIX, PAYLOAD_PREFIX
from payloadstore_controlplane.grants import KMS_ACTIONS
from payloadstore_controlplane.models.settings import SETTINGS_ENV, Settings
from payloadstore_controlplane.routes import (
    API_GATEWAY_TIMEOUT_S,
    COLD_START_ALLOWANCE_S,
    FUNCTIONS,
    LONG_POLL_ANSWER_MARGIN_S,
)

RUNTIME = lambda_.Runtime.PYTHON_3_13
assert RUNTIME.name == f"python{PYTHON_VERSION}", "runtime and layer python version must agree"

LAMBDA_ARCHITECTURES = {
    "x86_64": lambda_.Architecture.X86_64,
    "arm64": lambda_.Architecture.ARM_64,
}
assert set(LAMBDA_ARCHITECTURES) == set(ARCHITECTURES)

# Set on AWS by Lambda itself (AWS_REGION) or only meaningful against a local emulator.
NOT_ON_AWS = frozenset({"AWS_REGION", "S3_ENDPOINT_URL"})
# Declared empty so `sam local invoke --env-vars` can point a function at local services: SAM
# overrides only variables the template declares. Empty means AWS's own endpoints (the setting
# is unset for Settings; botocore ignores an empty AWS_ENDPOINT_URL_<SERVICE>).
LOCAL_ENDPOINT_ENV: dict[str, str] = {
    "S3_ENDPOINT_URL": "",
    "AWS_ENDPOINT_URL_SSM": "",
    "AWS_ENDPOINT_URL_SECRETS_MANAGER": "",
}
# Wired from resources of this stack, not from Settings defaults.
FROM_RESOURCES = frozenset(
    {
        "PAYLOAD_BUCKET",
        "REDIS_URL",
        "REDIS_CLUSTER",
        "REDIS_AUTH_SECRET",
        # IAM authentication to a serverless cache (its name and the functions' user id).
        "REDIS_IAM_USER",
        "REDIS_IAM_CACHE",
        "TOKEN_PARAMETER_PATH",
        # From the cache's shape: 1 when shards have replicas (issue 22), else 0.
        "REDIS_MIN_REPLICA_ACKS",
        # The stack's KMS key, and the other keys a namespace policy may name (context flag
        # payloadstore:kmsKeys).
        "KMS_KEY_ARN",
        "KMS_KEY_ARNS",
    }
)


OPTIONAL_RESOURCES = frozenset(
    {"KMS_KEY_ARN", "KMS_KEY_ARNS", "REDIS_AUTH_SECRET", "REDIS_IAM_USER", "REDIS_IAM_CACHE"}
)
# Outside the VPC: they call SSM (the token store) and nothing in the VPC, so they need no SSM
# interface endpoint there (network.py; docs/design.md "Where the tokens live").
OUTSIDE_VPC = frozenset({AUTHORIZER_FUNCTION, ADMIN_FUNCTION})


def deployment_token_path(scope: Construct, stage_path: str) -> str:
    """The token path of this deployment: the stage's path and the stack's own id (a UUID
    CloudFormation gives each stack it creates). A stage destroyed and deployed again gets a
    new id, so no token minted before honours the new stack (docs/deploying.md)."""
    stack_uuid = cdk.Fn.select(2, cdk.Fn.split("/", cdk.Aws.STACK_ID))
    return cdk.Fn.join("/", [stage_path, stack_uuid])


def settings_environment(scope: Construct, resources: dict[str, str]) -> dict[str, str]:
    """Every AWS-relevant setting of SETTINGS_ENV: defaults from the Settings model (overridable
    with `-c payloadstore:setting:NAME=value`), resource-derived ones from `resources`.
    """
    env: dict[str, str] = {}
    fields = Settings.model_fields
    for field, name in SETTINGS_ENV.items():
        if name in NOT_ON_AWS:
            continue
        if name in FROM_RESOURCES:
            # A stack without KMS keys given (a test's) has none: empty means unset.
            env[name] = (
                resources[name] if name not in OPTIONAL_RESOURCES else resources.get(name, "")
            )
            continue
        override = scope.node.try_get_context(CTX_SETTINGS_PREFIX + name)
        if override not in (None, ""):
            env[name] = str(override)
            continue
        default = fields[field].default
        if default is None and field == "queue_retention_s":
            # Unset means "same as RESULT_TTL_S"; spelled out so the console shows the value.
            default = env.get("RESULT_TTL_S", fields["result_ttl_s"].default)
        env[name] = str(getattr(default, "value", default))
    missing = set(resources) - set(env)
    if missing:
        raise ValueError(f"resources given for unknown settings: {sorted(missing)}")
    # Refuse at synth what every function would refuse at its first cold start.
    literal = {k: v for k, v in env.items() if k not in FROM_RESOURCES}
    Settings.from_env(
        {**literal, "PAYLOAD_BUCKET": "synth-check", "REDIS_URL": "rediss://synth-check:6379/0"}
    )
    check_wait_caps(env)
    return env


# The long-poll settings and the function group that serves each.
WAIT_CAPS = {"POLL_MAX_WAIT_S": "daemon", "RESULT_MAX_WAIT_S": "jobs"}


def check_wait_caps(env: dict[str, str]) -> None:
    """A wait cap must leave room to answer: cap + the answer margin within the function's
    timeout, and cap + the margin + a cold start within API Gateway's 29 s (the handlers also
    shorten each wait to the invocation's remaining time, handlers/_budget.py)."""
    for name, group in WAIT_CAPS.items():
        cap = float(env[name])
        timeout_s = FUNCTION_TUNING[group].timeout_s
        need_fn = cap + LONG_POLL_ANSWER_MARGIN_S
        need_api = need_fn + COLD_START_ALLOWANCE_S
        if need_fn > timeout_s or need_api > API_GATEWAY_TIMEOUT_S:
            most = min(timeout_s, API_GATEWAY_TIMEOUT_S - COLD_START_ALLOWANCE_S)
            raise ValueError(
                f"{name}={env[name]} leaves no room to answer: the {group} function times out "
                f"at {timeout_s} s and API Gateway at {API_GATEWAY_TIMEOUT_S} s, with "
                f"{LONG_POLL_ANSWER_MARGIN_S} s to answer and {COLD_START_ALLOWANCE_S} s for a "
                f"cold start; at most {most - LONG_POLL_ANSWER_MARGIN_S:g}"
            )


def function_logical_id(group: str) -> str:
    return f"{group.capitalize()}Function"


def parameter_arn(scope: Construct, name: str) -> str:
    # A parameter whose name starts with "/" has an ARN of `...:parameter/a/b`, not `parameter//a/b`.
    return cdk.Stack.of(scope).format_arn(
        service="ssm", resource="parameter", resource_name=name.lstrip("/")
    )


class ControlPlaneFunctions(Construct):
    """Functions, their roles (written out, least privilege) and the dependency layer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: StageNames,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        bucket_arn: str,
        bucket_name: str,
        redis_url: str,
        redis_cluster: bool,
        redis_auth_secret_arn: str | None,
        destroy_on_removal: bool,
        redis_min_replica_acks: int = 0,
        kms_key_arn: str = "",
        extra_kms_keys: tuple[str, ...] = (),
        redis_iam: tuple[str, str] | None = None,
        metrics_enabled: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = (
            cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        )
        self.names = names

        self.architecture_name = architecture_of(self)
        architecture = LAMBDA_ARCHITECTURES[self.architecture_name]
        layer_bundling = LayerBundling(LOCK_FILE, platform=ARCHITECTURES[self.architecture_name])
        self.layer_bundling = layer_bundling
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            description=f"payloadstore control-plane dependencies (python {PYTHON_VERSION}, "
            f"{self.architecture_name})",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[architecture],
            # The layer source is the lock file alone; hashing the inputs ourselves means an
            # unchanged lock reuses the staged build instead of running pip again.
            code=lambda_.Code.from_asset(
                str(LOCK_FILE.parent),
                asset_hash_type=cdk.AssetHashType.CUSTOM,
                asset_hash=layer_bundling.asset_hash(),
                bundling=cdk.BundlingOptions(image=bundling_image(), local=layer_bundling),
            ),
            removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

        code = lambda_.Code.from_asset(
            str(FUNCTIONS_DIR),
            exclude=[
                "tests",
                "**/__pycache__",
                "**/*.pyc",
                "requirements.txt",
                "requirements.lock",
                "pyproject.toml",
                "*.egg-info",
                "build",
            ],
            asset_hash_type=cdk.AssetHashType.SOURCE,
            bundling=cdk.BundlingOptions(image=bundling_image(), local=CodeBundling(FUNCTIONS_DIR)),
        )

        self.token_path = deployment_token_path(self, names.token_parameter_path)
        resources = {
            "PAYLOAD_BUCKET": bucket_name,
            "REDIS_URL": redis_url,
            "REDIS_CLUSTER": "true" if redis_cluster else "false",
            "REDIS_AUTH_SECRET": redis_auth_secret_arn or "",
            "TOKEN_PARAMETER_PATH": self.token_path,
            "REDIS_MIN_REPLICA_ACKS": str(redis_min_replica_acks),
            "KMS_KEY_ARN": kms_key_arn,
            "KMS_KEY_ARNS": ",".join(extra_kms_keys),
        }
        if redis_iam is not None:
            resources["REDIS_IAM_CACHE"], resources["REDIS_IAM_USER"] = redis_iam
        settings_env = settings_environment(self, resources)
        powertools_env = {
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": names.metrics_namespace,
            "POWERTOOLS_LOG_LEVEL": log_level_of(self),
            # The layer holds no pydantic plugin: pydantic need not look for one (and so the
            # functions need not import importlib.metadata at cold start; lazyimport.py).
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
            # Traces never hold an answer or an error body (tokens, presigned URLs, inline
            # payloads); lambda_entry passes False to the tracer as well.
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
            "POWERTOOLS_TRACER_CAPTURE_ERROR": "false",
        }
        if not metrics_enabled:
            # payloadstore:monitoring=minimal (dev): no EMF metric series (each is a billed
            # custom metric); observability.py honours it for single metrics too.
            powertools_env["POWERTOOLS_METRICS_DISABLED"] = "true"

        # daemon and jobs: reserved (and capped) so long-polls cannot take the account's pool.
        reserved = reserved_concurrency_of(self)
        self.reserved_concurrency = reserved
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        for group, handler in FUNCTIONS.items():
            tuning = FUNCTION_TUNING[group]
            log_group = logs.LogGroup(
                self,
                f"{group.capitalize()}Logs",
                retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=removal,
            )
            role = iam.Role(
                self,
                f"{group.capitalize()}Role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"payloadstore {group} function",
            )
            # Written out instead of AWSLambdaBasicExecutionRole: logs to its own group only.
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn, f"{log_group.log_group_arn}:log-stream:*"],
                )
            )
            in_vpc = group not in OUTSIDE_VPC
            if in_vpc:
                # Written out instead of AWSLambdaVPCAccessExecutionRole: the ENI calls Lambda
                # makes for a VPC function. EC2 grants them on no narrower resource than "*".
                role.add_to_policy(
                    iam.PolicyStatement(
                        actions=[
                            "ec2:CreateNetworkInterface",
                            "ec2:DescribeNetworkInterfaces",
                            "ec2:DescribeSubnets",
                            "ec2:DeleteNetworkInterface",
                            "ec2:AssignPrivateIpAddresses",
                            "ec2:UnassignPrivateIpAddresses",
                        ],
                        resources=["*"],
                    )
                )
            fn = lambda_.Function(
                self,
                f"{group.capitalize()}Function",
                description=f"payloadstore control plane: {group} ({handler})",
                runtime=RUNTIME,
                architecture=architecture,
                handler=handler,
                code=code,
                layers=[self.layer],
                memory_size=memory_of(self, group),
                timeout=cdk.Duration.seconds(tuning.timeout_s),
                tracing=lambda_.Tracing.ACTIVE,
                role=role,
                log_group=log_group,
                vpc=vpc if in_vpc else None,
                vpc_subnets=subnets if in_vpc else None,
                security_groups=[security_group] if in_vpc else None,
                environment={**settings_env, **powertools_env, **LOCAL_ENDPOINT_ENV},
                reserved_concurrent_executions=reserved.get(group),
            )
            # Stable, readable logical ids: `sam local invoke -t
            # cdk.out/PayloadStore-dev.template.json PayloadsFunction` and the docs name these.
            fn.node.default_child.override_logical_id(function_logical_id(group))
            self.functions[group] = fn
            self.roles[group] = role
            self.log_groups[group] = log_group

        self._grant_s3(bucket_arn)
        self._grant_tokens()
        # The stack's own key by IAM as well: its key policy keeps the account statement only
        # (storage.py says why), so these statements are what lets the roles use it.
        self._grant_kms_keys(bucket_arn, ((kms_key_arn,) if kms_key_arn else ()) + extra_kms_keys)
        if redis_auth_secret_arn:
            for group in REDIS_FUNCTIONS:
                self.roles[group].add_to_policy(
                    iam.PolicyStatement(
                        actions=["secretsmanager:GetSecretValue"],
                        resources=[redis_auth_secret_arn],
                    )
                )

    def _grant_s3(self, bucket_arn: str) -> None:
        # The table the local S3 emulator enforces too (payloadstore_controlplane/grants.py).
        for group, actions in OBJECT_ACTIONS.items():
            self.roles[group].add_to_policy(
                iam.PolicyStatement(
                    actions=list(actions), resources=[f"{bucket_arn}/{PAYLOAD_PREFIX}*"]
                )
            )
        for group, actions in BLOB_OBJECT_ACTIONS.items():
            self.roles[group].add_to_policy(
                iam.PolicyStatement(
                    actions=list(actions), resources=[f"{bucket_arn}/{BLOB_PREFIX}*"]
                )
            )
        for group, actions in BUCKET_ACTIONS.items():
            self.roles[group].add_to_policy(
                iam.PolicyStatement(actions=list(actions), resources=[bucket_arn])
            )

    def _grant_kms_keys(self, bucket_arn: str, keys: tuple[str, ...]) -> None:
        """The stack's key and the other keys a namespace policy may name (payloadstore:kmsKeys),
        by IAM, for payload and blob objects only (the encryption-context condition); each key's
        own policy must let this account's IAM grant it (the stack's does: its account
        statement)."""
        if not keys:
            return
        from infra.storage import kms_condition

        for group, actions in KMS_ACTIONS.items():
            self.roles[group].add_to_policy(
                iam.PolicyStatement(
                    actions=list(actions),
                    resources=list(keys),
                    conditions=kms_condition(bucket_arn),
                )
            )

    def _grant_tokens(self) -> None:
        # This stage's path only: another stage's tokens are neither readable nor writable here.
        # The deployment's path is `<stage path>/<stack id>` (deployment_token_path), so the
        # grants are on what lies below the stage's path: GetParametersByPath is authorised on
        # the listed path itself, single tokens live beneath it. The authorizer lists the path
        # on its refresh interval and reads a token it does not know by name (GetParameter on
        # `<path>/<hash>`). The metrics function reads no token: its namespaces come from Redis.
        path_arn = parameter_arn(self, self.names.token_parameter_path)
        self.roles[AUTHORIZER_FUNCTION].add_to_policy(
            iam.PolicyStatement(
                actions=["ssm:GetParametersByPath", "ssm:GetParameter"],
                resources=[f"{path_arn}/*"],
            )
        )
        self.roles[ADMIN_FUNCTION].add_to_policy(
            iam.PolicyStatement(actions=["ssm:GetParametersByPath"], resources=[f"{path_arn}/*"])
        )
        # Namespace policies live beside the tokens (`<path>/policy.<namespace>`): the admin
        # function reads one (get_policy, and set_policy merges over it) and writes it.
        self.roles[ADMIN_FUNCTION].add_to_policy(
            iam.PolicyStatement(
                actions=["ssm:GetParameter", "ssm:PutParameter", "ssm:DeleteParameter"],
                resources=[f"{path_arn}/*"],
            )
        )


SNAP_START_ALIAS = "live"


def snap_start_entrypoints(
    owner: ControlPlaneFunctions, groups: list[str] | tuple[str, ...]
) -> dict[str, lambda_.IFunction]:
    """SnapStart on `groups`: each function snapshots its initialised state on every published
    version, and a `live` alias on the current version is what callers (the API, the
    authorizer) invoke; SnapStart never applies to $LATEST. Returns group -> alias."""
    out: dict[str, lambda_.IFunction] = {}
    for group in groups:
        fn = owner.functions[group]
        fn.node.default_child.add_property_override("SnapStart", {"ApplyOn": "PublishedVersions"})
        out[group] = lambda_.Alias(
            owner,
            f"{group.capitalize()}Live",
            alias_name=SNAP_START_ALIAS,
            version=fn.current_version,
        )
    return out
