"""Deployment constants and the context flags a user can set (`npx cdk deploy -c key=value`).

Kept in one module so the stack, the tests and the README agree on every name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from constructs import Construct

from payloadstore_controlplane import concurrency, grants

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
# What the layer needs (top-level pins), and every transitive dependency pinned with its hashes,
# generated from it by `make lock` (uv pip compile --universal --generate-hashes, for Lambda's
# python3.13 on x86_64 and arm64 alike). The layer is installed from the lock, --require-hashes.
REQUIREMENTS_FILE = FUNCTIONS_DIR / "requirements.txt"
LOCK_FILE = FUNCTIONS_DIR / "requirements.lock"

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
# What `-c payloadstore:logLevel` takes (POWERTOOLS_LOG_LEVEL of every function).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

REDIS_PORT = 6379

# Context flags (cdk.json "context" or `-c name=value`).
CTX_STAGE = "payloadstore:stage"  # default "dev"
CTX_REMOVAL_POLICY = "payloadstore:removalPolicy"  # "retain" (default) | "destroy"
CTX_ALARM_TOPIC_ARN = "payloadstore:alarmTopicArn"  # an existing SNS topic for the alarms
# "auto" (default): the app holds API_GATEWAY_ACCOUNT_STACK, every stage depends on it, and it
# sets its role only where the account has none; "replace": set it whatever is there;
# "existing": no such stack, the account's own setting is used as it is (infra/account.py).
CTX_API_GATEWAY_ACCOUNT = "payloadstore:apiGatewayAccount"
CTX_CACHE_NODE_TYPE = "payloadstore:cacheNodeType"
CTX_CACHE_SHARDS = "payloadstore:cacheShards"
# Replicas per shard: 2 for every stage but dev, 1 for dev (infra/cache.py says why); 1..5.
CTX_CACHE_REPLICAS = "payloadstore:cacheReplicas"
# UTC; "ddd:hh24:mi-ddd:hh24:mi" weekly and "hh24:mi-hh24:mi" daily, at least an hour each, apart.
CTX_CACHE_MAINTENANCE_WINDOW = "payloadstore:cacheMaintenanceWindow"
CTX_CACHE_SNAPSHOT_WINDOW = "payloadstore:cacheSnapshotWindow"
# "serverless" (ElastiCache Serverless; the default for the dev stage) | "nodes" (a replication
# group; the default for every other stage): infra/cache.py.
CTX_CACHE = "payloadstore:cache"
# "valkey" (default) | "redis": the engine of either shape.
CTX_CACHE_ENGINE = "payloadstore:cacheEngine"
# Serverless usage limits: the most data (GB) and ECPUs per second the cache may scale to.
CTX_CACHE_MAX_DATA_GB = "payloadstore:cacheMaxDataGb"
CTX_CACHE_MAX_ECPU_PER_SECOND = "payloadstore:cacheMaxEcpuPerSecond"
# Comma-separated AZ ids (use1-az1,use1-az2: the same zones in every account, unlike names);
# unset: the stack's account and region decide (looked up at synth when both are given).
CTX_AVAILABILITY_ZONES = "payloadstore:availabilityZones"
# "full" (every stage but dev): the dashboard, every alarm, the functions' EMF metrics;
# "minimal" (dev): the API 5xx and cache alarms only, no dashboard, no EMF metric series.
CTX_MONITORING = "payloadstore:monitoring"
CTX_ALARM_EMAIL = "payloadstore:alarmEmail"
CTX_THROTTLE_RATE = "payloadstore:throttleRateLimit"
CTX_THROTTLE_BURST = "payloadstore:throttleBurstLimit"
CTX_OLDEST_JOB_AGE_ALARM_S = "payloadstore:oldestJobAgeAlarmSeconds"
# "true": SnapStart on the functions behind the API (published versions, a `live` alias each);
# see docs/deploying.md ("Cold starts and SnapStart") for what it costs.
CTX_SNAP_START = "payloadstore:snapStart"
# Reserved concurrency of the long-poll functions (payloadstore_controlplane/concurrency.py):
# off (the default: a plain synth reserves nothing) | N (in all, daemon:jobs 4:3); `make deploy`
# passes auto, which its preflight (infra/preflight.py) decides from the account's settings.
CTX_RESERVED_CONCURRENCY = concurrency.FLAG_MODE
CTX_DAEMON_CONCURRENCY = concurrency.FLAG_OVERRIDES["daemon"]
CTX_JOBS_CONCURRENCY = concurrency.FLAG_OVERRIDES["jobs"]
# Comma-separated ARNs of KMS keys (beside the stack's own) a namespace policy may name; the
# functions' roles are granted on them.
CTX_KMS_KEYS = "payloadstore:kmsKeys"
CTX_ARCHITECTURE = "payloadstore:architecture"  # "x86_64" (default) | "arm64"
# "off" (default) | "on": API Gateway's per-method CloudWatch metrics (Count, 4XXError, 5XXError,
# Latency, IntegrationLatency for each of the ~23 methods: 5 custom metrics each, ~$34.50 a
# month; docs/cost.md). Off, the API still publishes the same five for the stage as a whole, free.
CTX_DETAILED_METRICS = "payloadstore:detailedMetrics"
# "INFO" (default): a job's enqueue and end lines (docs/operations.md); "WARNING" drops them.
CTX_LOG_LEVEL = "payloadstore:logLevel"
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
        # A deployment's tokens live one level below (token_parameter_path_of): a stage
        # destroyed and deployed again starts with none.
        return f"/payloadstore/{self.stage}/tokens"

    @property
    def metrics_namespace(self) -> str:
        return f"{METRICS_NAMESPACE_PREFIX}/{self.stage}"

    @property
    def replication_group_id(self) -> str:
        return f"payloadstore-{self.stage}"

    def alarm_name(self, what: str) -> str:
        return f"{self.stack_name}-{what}"


CACHE_SHAPES = ("serverless", "nodes")
CACHE_ENGINES = ("valkey", "redis")
MONITORING_LEVELS = ("full", "minimal")
# Serverless limits: AWS's ranges are 1..5,000 GB and 1,000..15,000,000 ECPU/s. The defaults keep
# a runaway client's bill bounded: 10 GB of data is ~$600/month at most; 5,000 ECPU/s is ~3,000
# small jobs a second, one shard's worth of this control plane (ARCHITECTURE.md).
DEFAULT_CACHE_MAX_DATA_GB = 10
DEFAULT_CACHE_MAX_ECPU_PER_SECOND = 5000
CACHE_DATA_GB_RANGE = (1, 5000)
CACHE_ECPU_RANGE = (1000, 15_000_000)
AZ_ID_PATTERN = re.compile(r"^[a-z]{2,4}[0-9]-az[0-9]+$")


def cache_shape_of(scope: Construct, stage: str) -> str:
    """-c payloadstore:cache: serverless for the dev stage, nodes for every other, by default."""
    default = "serverless" if stage == DEFAULT_STAGE else "nodes"
    return context_choice(scope, CTX_CACHE, default, CACHE_SHAPES)


def cache_engine_of(scope: Construct) -> str:
    return context_choice(scope, CTX_CACHE_ENGINE, "valkey", CACHE_ENGINES)


def monitoring_of(scope: Construct, stage: str) -> str:
    default = "minimal" if stage == DEFAULT_STAGE else "full"
    return context_choice(scope, CTX_MONITORING, default, MONITORING_LEVELS)


def serverless_limits_of(scope: Construct) -> tuple[int, int]:
    """(max data GB, max ECPU/s) of the serverless cache, checked against AWS's ranges."""
    data = context_int(scope, CTX_CACHE_MAX_DATA_GB, DEFAULT_CACHE_MAX_DATA_GB)
    ecpu = context_int(scope, CTX_CACHE_MAX_ECPU_PER_SECOND, DEFAULT_CACHE_MAX_ECPU_PER_SECOND)
    for key, value, (low, high) in (
        (CTX_CACHE_MAX_DATA_GB, data, CACHE_DATA_GB_RANGE),
        (CTX_CACHE_MAX_ECPU_PER_SECOND, ecpu, CACHE_ECPU_RANGE),
    ):
        if not low <= value <= high:
            raise ValueError(f"context {key} must be {low:,}..{high:,}, got {value:,}")
    return data, ecpu


def availability_zone_ids_of(scope: Construct) -> tuple[str, ...]:
    """-c payloadstore:availabilityZones=use1-az1,use1-az2 (AZ ids, at least two), or ()."""
    raw = context_str(scope, CTX_AVAILABILITY_ZONES, "")
    ids = tuple(part.strip().lower() for part in raw.split(",") if part.strip())
    bad = [i for i in ids if not AZ_ID_PATTERN.match(i)]
    if bad or (ids and len(set(ids)) < 2):
        raise ValueError(
            f"context {CTX_AVAILABILITY_ZONES} must be two or more distinct AZ ids "
            f"(e.g. use1-az1,use1-az2: `aws ec2 describe-availability-zones` lists them); got {raw!r}"
        )
    return ids


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


def context_choice(scope: Construct, key: str, default: str, choices: Iterable[str]) -> str:
    """One of `choices`, as spelled there, for a flag given in any case; refused otherwise."""
    spelled = {choice.lower(): choice for choice in choices}
    raw = context_str(scope, key, default)
    if raw.lower() not in spelled:
        raise ValueError(f"context {key} must be one of {', '.join(spelled.values())}, got {raw!r}")
    return spelled[raw.lower()]


def architecture_of(scope: Construct) -> str:
    """Lambda's architecture name from -c payloadstore:architecture (x86_64 or arm64)."""
    return context_choice(scope, CTX_ARCHITECTURE, DEFAULT_ARCHITECTURE, ARCHITECTURES)


def reserved_concurrency_of(scope: Construct) -> dict[str, int]:
    """group -> ReservedConcurrentExecutions from the context flags; an absent group reserves
    nothing. Whether it fits the account is the preflight's to check (synth reads no account)."""
    mode = concurrency.parse_mode(scope.node.try_get_context(CTX_RESERVED_CONCURRENCY))
    overrides = {
        group: concurrency.parse_override(scope.node.try_get_context(flag), flag)
        for group, flag in concurrency.FLAG_OVERRIDES.items()
    }
    return concurrency.caps_for(mode, overrides)


def detailed_metrics_of(scope: Construct) -> bool:
    """-c payloadstore:detailedMetrics=on|off (default off)."""
    value = context_str(scope, CTX_DETAILED_METRICS, "off").lower()
    if value not in ("on", "off", "true", "false"):
        raise ValueError(f"context {CTX_DETAILED_METRICS} must be on or off, got {value!r}")
    return value in ("on", "true")


def log_level_of(scope: Construct) -> str:
    """-c payloadstore:logLevel=DEBUG|INFO|WARNING|ERROR (default INFO), case-insensitive."""
    return context_choice(scope, CTX_LOG_LEVEL, LOG_LEVEL, LOG_LEVELS)


def cache_replicas_of(scope: Construct, stage: str, production: int, dev: int) -> int:
    """Replicas per shard: -c payloadstore:cacheReplicas, else `dev` for the dev stage and
    `production` for every other."""
    return context_int(scope, CTX_CACHE_REPLICAS, dev if stage == DEFAULT_STAGE else production)


DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_HHMM = r"([01]\d|2[0-3]):([0-5]\d)"
MAINTENANCE_WINDOW_PATTERN = re.compile(rf"^({'|'.join(DAYS)}):{_HHMM}-({'|'.join(DAYS)}):{_HHMM}$")
SNAPSHOT_WINDOW_PATTERN = re.compile(rf"^{_HHMM}-{_HHMM}$")
WEEK_MIN = 7 * 24 * 60


def _span(start: int, end: int, period: int) -> set[int]:
    """Minutes of a window from start to end (exclusive), wrapping at `period`."""
    return {m % period for m in range(start, start + (end - start) % period)}


def cache_windows(maintenance: str, snapshot: str) -> tuple[str, str]:
    """Checks the ElastiCache windows as AWS does (format, at least 60 minutes each, no
    overlap), at synth instead of mid-deploy."""
    found = MAINTENANCE_WINDOW_PATTERN.match(maintenance.lower())
    if not found:
        raise ValueError(
            f"context {CTX_CACHE_MAINTENANCE_WINDOW} must be ddd:hh24:mi-ddd:hh24:mi (UTC, e.g. "
            f"sun:05:00-sun:06:00); got {maintenance!r}"
        )
    d1, h1, m1, d2, h2, m2 = found.groups()
    start = DAYS.index(d1) * 1440 + int(h1) * 60 + int(m1)
    weekly = _span(start, DAYS.index(d2) * 1440 + int(h2) * 60 + int(m2), WEEK_MIN)
    daily_found = SNAPSHOT_WINDOW_PATTERN.match(snapshot)
    if not daily_found:
        raise ValueError(
            f"context {CTX_CACHE_SNAPSHOT_WINDOW} must be hh24:mi-hh24:mi (UTC, e.g. 03:00-04:00); "
            f"got {snapshot!r}"
        )
    sh, sm, eh, em = (int(x) for x in daily_found.groups())
    daily = _span(sh * 60 + sm, eh * 60 + em, 1440)
    if len(weekly) < 60 or len(daily) < 60:
        raise ValueError(
            f"context {CTX_CACHE_MAINTENANCE_WINDOW} and {CTX_CACHE_SNAPSHOT_WINDOW} must each be "
            f"at least 60 minutes; got {maintenance!r} and {snapshot!r}"
        )
    if any(m % 1440 in daily for m in weekly):
        raise ValueError(
            f"the snapshot window {snapshot!r} overlaps the maintenance window {maintenance!r} "
            f"(context {CTX_CACHE_SNAPSHOT_WINDOW}, {CTX_CACHE_MAINTENANCE_WINDOW}); AWS refuses that"
        )
    return maintenance.lower(), snapshot


API_GATEWAY_ACCOUNT_MODES = ("auto", "replace", "existing")


def api_gateway_account_mode(scope: Construct) -> str:
    """auto (default): set the account's API Gateway CloudWatch role only where it has none;
    replace: set ours whatever is there; existing: leave the account alone (infra/account.py).
    `create`, the name of the old default, means auto."""
    value = context_str(scope, CTX_API_GATEWAY_ACCOUNT, "auto").lower()
    value = "auto" if value == "create" else value
    if value not in API_GATEWAY_ACCOUNT_MODES:
        raise ValueError(
            f"context {CTX_API_GATEWAY_ACCOUNT} must be one of "
            f"{', '.join(API_GATEWAY_ACCOUNT_MODES)}, got {value!r}"
        )
    return value


def destroy_on_removal(scope: Construct) -> bool:
    value = context_str(scope, CTX_REMOVAL_POLICY, "retain").lower()
    if value not in ("retain", "destroy"):
        raise ValueError(f"context {CTX_REMOVAL_POLICY} must be retain or destroy, got {value!r}")
    return value == "destroy"


def kms_keys_of(scope: Construct) -> tuple[str, ...]:
    """The KMS key ARNs of -c payloadstore:kmsKeys=arn1,arn2 (refused at synth unless each is a
    key ARN)."""
    from payloadstore_controlplane.models.policy import KMS_KEY_ARN_RE, parse_key_list

    keys = parse_key_list(context_str(scope, CTX_KMS_KEYS, ""))
    bad = [k for k in keys if not KMS_KEY_ARN_RE.match(k)]
    if bad:
        raise ValueError(
            f"context {CTX_KMS_KEYS}: not KMS key ARNs (arn:aws:kms:REGION:ACCOUNT:key/ID): "
            + ", ".join(bad)
        )
    return keys
