"""Deployment constants and the context flags a user can set (`npx cdk deploy -c key=value`).

Kept in one module so the stack, the tests and the README agree on every name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from constructs import Construct

from payloadstore_controlplane import concurrency, grants

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
REQUIREMENTS_FILE = FUNCTIONS_DIR / "requirements.txt"

# One stack per stage: `PayloadStore-<stage>`. Everything that must be unique in an account and
# region carries the stage (see StageNames); CloudFormation-generated names carry the stack name.
STACK_PREFIX = "PayloadStore"
DEFAULT_STAGE = "dev"
# Lower case because ElastiCache ids are; one word or hyphen-joined words; short enough that
# `payloadstore-<stage>-0001-001` stays a valid cache cluster id.
STAGE_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
STAGE_MAX_LEN = 20
# The account-wide API Gateway CloudWatch role lives in a stack of its own, one per account and
# region, never in a stage (two stages would overwrite each other's account setting).
API_GATEWAY_ACCOUNT_STACK = "PayloadStoreApiGatewayAccount"

# The newest Lambda Python whose manylinux wheels (pydantic-core, hiredis, wrapt) pip can fetch
# here and whose interpreter is available to compile bytecode for the layer.
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_x86_64"
# `-c payloadstore:architecture=arm64` builds the layer for Graviton and runs every function on
# ARM_64 (20 % less per GB-second than x86_64; docs/deploying.md). Lambda's name -> pip's wheel tag.
ARCHITECTURES: dict[str, str] = {
    "x86_64": "manylinux2014_x86_64",
    "arm64": "manylinux2014_aarch64",
}
DEFAULT_ARCHITECTURE = "x86_64"

# Powertools: the custom-metric alarms watch the stage's namespace and this `service` dimension.
SERVICE_NAME = "payloadstore"
METRICS_NAMESPACE_PREFIX = "PayloadStore"
LOG_LEVEL = "INFO"

REDIS_PORT = 6379

# Context flags (cdk.json "context" or `-c name=value`).
CTX_STAGE = "payloadstore:stage"  # default "dev"
CTX_REMOVAL_POLICY = "payloadstore:removalPolicy"  # "retain" (default) | "destroy"
CTX_ALARM_TOPIC_ARN = "payloadstore:alarmTopicArn"  # an existing SNS topic for the alarms
# "create" (default): the app holds API_GATEWAY_ACCOUNT_STACK and every stage depends on it;
# "existing": the account already has an API Gateway CloudWatch role, leave it alone.
CTX_API_GATEWAY_ACCOUNT = "payloadstore:apiGatewayAccount"
CTX_CACHE_NODE_TYPE = "payloadstore:cacheNodeType"
CTX_CACHE_SHARDS = "payloadstore:cacheShards"
CTX_ALARM_EMAIL = "payloadstore:alarmEmail"
CTX_THROTTLE_RATE = "payloadstore:throttleRateLimit"
CTX_THROTTLE_BURST = "payloadstore:throttleBurstLimit"
CTX_OLDEST_JOB_AGE_ALARM_S = "payloadstore:oldestJobAgeAlarmSeconds"
# "true": SnapStart on the functions behind the API (published versions, a `live` alias each);
# see docs/deploying.md ("Cold starts and SnapStart") for what it costs.
CTX_SNAP_START = "payloadstore:snapStart"
# Reserved concurrency of the long-poll functions (payloadstore_controlplane/concurrency.py):
# defaults are 40 % (daemon) and 30 % (jobs) of the account limit; docs/deploying.md says why.
CTX_ACCOUNT_CONCURRENCY = "payloadstore:accountConcurrency"  # default 1000
CTX_DAEMON_CONCURRENCY = "payloadstore:daemonConcurrency"
CTX_JOBS_CONCURRENCY = "payloadstore:jobsConcurrency"
CTX_ARCHITECTURE = "payloadstore:architecture"  # "x86_64" (default) | "arm64"
# Memory of one function group in MB, e.g. -c payloadstore:memory:daemon=256 (FUNCTION_TUNING
# holds the defaults and why).
CTX_MEMORY_PREFIX = "payloadstore:memory:"
CTX_SETTINGS_PREFIX = (
    "payloadstore:setting:"  # e.g. -c payloadstore:setting:INLINE_THRESHOLD=131072
)


@dataclass(frozen=True)
class StageNames:
    """Every name of a stage that must not collide with another stage's in one account."""

    stage: str

    def __post_init__(self) -> None:
        check_stage(self.stage)

    @property
    def stack_name(self) -> str:
        return f"{STACK_PREFIX}-{self.stage}"

    @property
    def token_parameter_path(self) -> str:
        # Its own path per stage: the authorizer reads, and the admin role may write, only here.
        return f"/payloadstore/{self.stage}/tokens"

    @property
    def metrics_namespace(self) -> str:
        return f"{METRICS_NAMESPACE_PREFIX}/{self.stage}"

    @property
    def replication_group_id(self) -> str:
        return f"payloadstore-{self.stage}"

    def alarm_name(self, what: str) -> str:
        return f"{self.stack_name}-{what}"


def check_stage(stage: str) -> str:
    if not isinstance(stage, str) or not STAGE_PATTERN.match(stage) or len(stage) > STAGE_MAX_LEN:
        raise ValueError(
            f"context {CTX_STAGE} must be lower-case letters and digits, words joined by single "
            f"hyphens, starting with a letter, at most {STAGE_MAX_LEN} characters; got {stage!r}"
        )
    return stage


def stage_of(scope: Construct) -> str:
    return check_stage(context_str(scope, CTX_STAGE, DEFAULT_STAGE))


@dataclass(frozen=True)
class FunctionTuning:
    memory_mb: int
    timeout_s: int


# Memory: Lambda bills GB-seconds, and a waiting long-poll is billed for its whole wait, so the
# long-poll groups get the least memory their measured peak allows (bench/bench_function_cpu.py,
# bench/RESULTS.md "Function CPU and memory"): the daemon function peaks at ~91 MB RSS with the
# runtime client, serving a poll of 16 x 256 KiB inline jobs (~70 MB otherwise), so 128 MB; an
# idle daemon then costs ~$5.40 a month of GB-seconds instead of ~$21.60 at 512 MB (docs/cost.md).
# jobs peaks at ~96 MB on a 4 MiB batch enqueue and serves the clients' enqueues, so 256 MB: twice
# the CPU share of 128 MB (Lambda's CPU scales with memory, 1,769 MB = 1 vCPU) for the calls a
# user waits on, and room for the batch. A smaller share means a slower cold start: the trade-off
# is in docs/deploying.md ("Memory and architecture").
# Long-poll groups wait up to POLL_MAX_WAIT_S / RESULT_MAX_WAIT_S (20 s by default; synth refuses
# more than 29 - COLD_START_ALLOWANCE_S - LONG_POLL_ANSWER_MARGIN_S = 24.5 s, functions.check_wait_caps;
# each wait is also cut to the invocation's remaining time, handlers/_budget.py)
# and must still answer inside API Gateway's 29 s integration timeout; the rest answer in
# milliseconds and get a short timeout so a stuck dependency fails fast.
FUNCTION_TUNING: dict[str, FunctionTuning] = {
    "payloads": FunctionTuning(memory_mb=512, timeout_s=10),
    "jobs": FunctionTuning(memory_mb=256, timeout_s=28),
    "daemon": FunctionTuning(memory_mb=128, timeout_s=28),
    "public": FunctionTuning(memory_mb=512, timeout_s=10),
    "authorizer": FunctionTuning(memory_mb=512, timeout_s=10),
    "admin": FunctionTuning(memory_mb=256, timeout_s=30),
    # Scheduled every minute; reads a few keys per queue.
    "metrics": FunctionTuning(memory_mb=256, timeout_s=20),
    # Scheduled every RENEWAL_EVERY_MINUTES (5): copies due blobs inside S3 (no bytes through
    # it), a large one in parallel parts; stops starting copies 30 s before its timeout, and
    # ends before the next run starts.
    "renewals": FunctionTuning(memory_mb=256, timeout_s=240),
}

# S3 grants per function group: one table, in the Lambda code asset, read by these roles and by
# the local S3 emulator alike (payloadstore_controlplane/grants.py says who needs what and why).
# OBJECT_ACTIONS are on `<bucket>/payloads/*`, BUCKET_ACTIONS on the bucket (s3:ListBucket for
# the functions that HEAD or presign GETs: a missing key then answers 404, not 403).
OBJECT_ACTIONS: dict[str, tuple[str, ...]] = grants.OBJECT_ACTIONS
# BLOB_OBJECT_ACTIONS are on `<bucket>/blobs/*` (presign, HEAD; the renewals function's copies).
BLOB_OBJECT_ACTIONS: dict[str, tuple[str, ...]] = grants.BLOB_OBJECT_ACTIONS
BUCKET_ACTIONS: dict[str, tuple[str, ...]] = grants.BUCKET_ACTIONS
HEALTH_FUNCTION = "public"
# Groups that talk to Redis (and so read the AUTH secret). The authorizer and admin only use SSM.
REDIS_FUNCTIONS: tuple[str, ...] = ("payloads", "jobs", "daemon", "public", "metrics", "renewals")
AUTHORIZER_FUNCTION = "authorizer"
ADMIN_FUNCTION = "admin"
METRICS_FUNCTION = "metrics"
# The oldest job waiting longer than this (seconds) raises an alarm: a queue stopped draining.
DEFAULT_OLDEST_JOB_AGE_ALARM_S = 15 * 60


def context_str(scope: Construct, key: str, default: str) -> str:
    value = scope.node.try_get_context(key)
    return default if value in (None, "") else str(value)


def context_int(scope: Construct, key: str, default: int) -> int:
    raw = context_str(scope, key, str(default))
    try:
        return int(raw)
    except ValueError as e:
        raise ValueError(f"context {key} must be an integer, got {raw!r}") from e


def context_bool(scope: Construct, key: str, default: bool = False) -> bool:
    raw = context_str(scope, key, "true" if default else "false").lower()
    if raw not in ("true", "false"):
        raise ValueError(f"context {key} must be true or false, got {raw!r}")
    return raw == "true"


LAMBDA_MIN_MEMORY_MB, LAMBDA_MAX_MEMORY_MB = 128, 10_240


def memory_of(scope: Construct, group: str) -> int:
    """MemorySize of a function group: FUNCTION_TUNING, or -c payloadstore:memory:<group>=MB."""
    memory = context_int(scope, CTX_MEMORY_PREFIX + group, FUNCTION_TUNING[group].memory_mb)
    if not LAMBDA_MIN_MEMORY_MB <= memory <= LAMBDA_MAX_MEMORY_MB:
        raise ValueError(
            f"context {CTX_MEMORY_PREFIX}{group} must be {LAMBDA_MIN_MEMORY_MB}.."
            f"{LAMBDA_MAX_MEMORY_MB} (MB), got {memory}"
        )
    return memory


def architecture_of(scope: Construct) -> str:
    """Lambda's architecture name from -c payloadstore:architecture (x86_64 or arm64)."""
    value = context_str(scope, CTX_ARCHITECTURE, DEFAULT_ARCHITECTURE).lower()
    if value not in ARCHITECTURES:
        raise ValueError(
            f"context {CTX_ARCHITECTURE} must be one of {', '.join(ARCHITECTURES)}, got {value!r}"
        )
    return value


def reserved_concurrency_of(scope: Construct) -> dict[str, int]:
    """group -> ReservedConcurrentExecutions from the context flags (refuses a split that leaves
    fewer than concurrency.MIN_UNRESERVED executions of the account unreserved)."""
    account = context_int(scope, CTX_ACCOUNT_CONCURRENCY, concurrency.DEFAULT_ACCOUNT_CONCURRENCY)
    flags = {"daemon": CTX_DAEMON_CONCURRENCY, "jobs": CTX_JOBS_CONCURRENCY}
    overrides: dict[str, int | None] = {
        group: (context_int(scope, key, 0) if context_str(scope, key, "") else None)
        for group, key in flags.items()
    }
    try:
        return concurrency.reserved_concurrency(account, overrides)
    except ValueError as e:
        raise ValueError(
            f"{e} (context {CTX_ACCOUNT_CONCURRENCY}, {CTX_DAEMON_CONCURRENCY}, "
            f"{CTX_JOBS_CONCURRENCY})"
        ) from e


def api_gateway_account_mode(scope: Construct) -> str:
    value = context_str(scope, CTX_API_GATEWAY_ACCOUNT, "create").lower()
    if value not in ("create", "existing"):
        raise ValueError(
            f"context {CTX_API_GATEWAY_ACCOUNT} must be create or existing, got {value!r}"
        )
    return value


def destroy_on_removal(scope: Construct) -> bool:
    value = context_str(scope, CTX_REMOVAL_POLICY, "retain").lower()
    if value not in ("retain", "destroy"):
        raise ValueError(f"context {CTX_REMOVAL_POLICY} must be retain or destroy, got {value!r}")
    return value == "destroy"
