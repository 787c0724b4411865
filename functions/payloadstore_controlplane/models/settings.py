"""Control-plane settings: environment variables, one value for the whole fleet."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

import os
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..runtime.once import built_once
from .blob_lifetime import BlobLifetime
from .policy import DEFAULT_RETENTION, RETENTION_DAYS

# A blob's lifecycle is its namespace's retention class; the default policy's, and the shortest.
DEFAULT_BLOB_DAYS = RETENTION_DAYS[DEFAULT_RETENTION]
SHORTEST_BLOB_DAYS = min(RETENTION_DAYS.values())
from .limits import DELIVERIES_BUDGET, LAMBDA_RESPONSE_LIMIT, largest_inline_threshold


class ReplicaAckPolicy(StrEnum):
    # min(REDIS_MIN_REPLICA_ACKS, the node's online replicas): a shard that lost its replica
    # keeps taking writes (alarmed), a connected but lagging replica is still waited for.
    CONNECTED = "connected"
    # always REDIS_MIN_REPLICA_ACKS: a shard without that many replicas answers 503.
    STRICT = "strict"


class PayloadLostPolicy(StrEnum):
    RETRY_ONCE = "retry_once"  # requeue once (attempt + 1), then fail
    FAIL = "fail"  # fail at the first report


# The longest presigned URL lifetime: a URL signed with the function role's temporary
# credentials stops working when that session ends, whatever its own expiry says, and Lambda
# does not promise a role session longer than an hour (docs/settings.md).
PRESIGN_TTL_MAX_S = 3600

# S3's most parts per multipart upload, and its largest part.
MULTIPART_MAX_PARTS = 10_000
MULTIPART_MAX_PART_BYTES = 5 * 1024**3
# S3's largest object: 10,000 parts of 5 GiB (50,000 GiB, about 48.8 TiB).
MAX_OBJECT_BYTES = MULTIPART_MAX_PARTS * MULTIPART_MAX_PART_BYTES


class SettingsError(RuntimeError):
    """A setting is missing or malformed: the function cannot start."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    # env var name -> field: the names are part of the deployment contract (CDK sets them).
    inline_threshold: int = Field(262_144, ge=1)
    # Up to S3's largest object (MAX_OBJECT_BYTES, ~48.8 TiB): sizes above MULTIPART_THRESHOLD
    # upload in parts, whose size grows so any size fits MULTIPART_MAX_PARTS parts.
    max_payload_bytes: int = Field(104_857_600, ge=1, le=MAX_OBJECT_BYTES)
    # Uploads above this size are multipart (a single PUT stays at most 5 GiB, S3's limit).
    multipart_threshold: int = Field(64 * 1024**2, ge=1, le=5 * 1024**3)
    # Part size of a multipart upload (S3: 5 MiB..5 GiB), grown for an upload that would need
    # more than MULTIPART_MAX_PARTS parts (multipart_part_bytes_for).
    multipart_part_bytes: int = Field(16 * 1024**2, ge=5 * 1024**2, le=MULTIPART_MAX_PART_BYTES)
    # At most PRESIGN_TTL_MAX_S (see _consistent: a URL dies with its signer's session).
    presign_ttl_s: int = Field(900, ge=1)
    # The bucket lifecycle deletes payloads after 2 days, so nothing may be promised for longer.
    result_ttl_s: int = Field(172_800, ge=60, le=172_800)
    max_presigns_per_job: int = Field(5, ge=1)
    visibility_timeout_s: int = Field(300, ge=1)
    # Past this many deliveries a job ends failed (DeliveryLimitExceeded) instead of running again.
    max_deliveries: int = Field(5, ge=1, le=1000)
    # Consumers of a queue's group idle this long with nothing pending are removed by poll.
    stale_consumer_idle_s: int = Field(3600, ge=1)
    payload_lost_policy: PayloadLostPolicy = PayloadLostPolicy.RETRY_ONCE
    # Long-poll caps: both stay well inside API Gateway's 29 s integration timeout.
    poll_max_wait_s: float = Field(20.0, ge=0, le=25)
    result_max_wait_s: float = Field(20.0, ge=0, le=25)
    # Queue streams are trimmed of entries older than this (MINID ~); defaults to result_ttl_s.
    queue_retention_s: int | None = Field(None, ge=60)
    # Blob lifetimes (models/blob_lifetime.py, docs/design.md "Blob lifetimes"): how far ahead of
    # its lifecycle expiry the renewer copies a blob still needed, the length of a lifecycle day
    # (86,400 s on AWS; the local S3 emulator's time scale in tests), and the part size of a
    # renewal's multipart copy (a blob above it is copied in parts, in parallel). A blob's
    # lifecycle days are its namespace's retention class (its object's tag).
    blob_renew_ahead_s: int = Field(21_600, ge=1)
    blob_day_s: int = Field(86_400, ge=1, le=86_400)
    copy_part_bytes: int = Field(512 * 1024**2, ge=5 * 1024**2, le=5 * 1024**3)
    # A repeated inline enqueue with the same Idempotency-Key finds the first job this long.
    idempotency_ttl_s: int = Field(3600, ge=60, le=21_600)
    # Redis memory guard, in percent of maxmemory (per node): past the high-water mark inline
    # payloads and results are refused (503 inline_unavailable, clients send them through S3);
    # past the hard mark S3-tier enqueues too (503 redis_memory_full).
    redis_memory_high_water_pct: int = Field(85, ge=1, le=100)
    redis_memory_hard_pct: int = Field(95, ge=1, le=100)

    # Many jobs per call (jobs:batch, jobs:status). 4 MiB of inline bytes is 5.6 MB as base64,
    # inside Lambda's 6 MB event (and so API Gateway's 10 MB body) with room for the JSON.
    batch_max_jobs: int = Field(100, ge=1, le=1000)
    batch_max_bytes: int = Field(4 * 1024 * 1024, ge=1, le=4 * 1024 * 1024)

    payload_bucket: str = Field(..., min_length=3)
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = False
    # Connections per container's pool (blocking long-polls hold one each).
    redis_max_connections: int = Field(64, ge=1, le=10_000)
    # Durability through a failover: every write the control plane reports done is followed by
    # WAIT for this many replicas of the node that took it (0: no WAIT, a single node), up to
    # REDIS_REPLICA_ACK_TIMEOUT_MS (fewer online: REDIS_REPLICA_ACK_POLICY); fewer acks in time
    # -> 503 redis_replication_lag. The timeout
    # stays under the fast client's reply timeout (store/redis_client.py, 1.5 s).
    redis_min_replica_acks: int = Field(0, ge=0, le=5)
    redis_replica_ack_timeout_ms: int = Field(100, ge=1, le=1000)
    # Whether a shard with fewer online replicas than REDIS_MIN_REPLICA_ACKS (its replica was
    # promoted, died or is still syncing) waits for the ones it has or refuses every write.
    redis_replica_ack_policy: ReplicaAckPolicy = ReplicaAckPolicy.CONNECTED
    # Secrets Manager ARN/name holding the ElastiCache AUTH token (deployed stacks only).
    redis_auth_secret: str | None = None
    # IAM authentication (ElastiCache Serverless; store/elasticache_iam.py): the ElastiCache
    # user id whose authentication mode is IAM, and the cache's name the token is signed for.
    # Both set: every connection presents a fresh IAM token, no password.
    redis_iam_user: str | None = None
    redis_iam_cache: str | None = None
    redis_iam_serverless: bool = True
    aws_region: str = "us-east-1"
    # Set locally (moto server); unset on AWS.
    s3_endpoint_url: str | None = None
    token_parameter_path: str = "/payloadstore/tokens"
    token_cache_s: int = Field(60, ge=0)
    # While SSM fails, the authorizer's last good token listing answers this long past
    # TOKEN_CACHE_S (store/tokens.py; docs/operations.md, "When SSM fails").
    token_stale_max_s: int = Field(900, ge=0, le=86_400)
    # Namespace policies (models/policy.py): the stack's own KMS key (kms_key `stack`), and the
    # other keys its roles are granted on (comma-separated ARNs, the payloadstore:kmsKeys flag).
    kms_key_arn: str | None = None
    kms_key_arns: str | None = None
    # retention `consume`: a succeeded job's arguments are deleted this long after its success,
    # a result this long after its first complete read (a re-read within it works).
    consume_args_grace_s: int = Field(0, ge=0, le=3600)
    consume_result_grace_s: int = Field(300, ge=0, le=86_400)

    @property
    def redis_iam(self) -> tuple[str, str, str, bool] | None:
        """(cache name, user id, region, serverless) when connections authenticate with IAM."""
        if not (self.redis_iam_user and self.redis_iam_cache):
            return None
        return (
            self.redis_iam_cache,
            self.redis_iam_user,
            self.aws_region,
            self.redis_iam_serverless,
        )

    @property
    def stack_kms_key(self) -> str | None:
        """The stack's own key (KMS_KEY_ARN; on a local S3 emulator, its stand-in)."""
        from .policy import stack_key_arn

        return stack_key_arn(self.kms_key_arn, self.s3_endpoint_url)

    @property
    def granted_kms_keys(self) -> tuple[str, ...]:
        from .policy import parse_key_list

        return parse_key_list(self.kms_key_arns)

    @property
    def retention_s(self) -> int:
        return self.queue_retention_s or self.result_ttl_s

    def blob_lifetime(self, lifecycle_days: int = DEFAULT_BLOB_DAYS) -> BlobLifetime:
        """The blob arithmetic for objects a lifecycle rule of `lifecycle_days` expires (the
        retention class of the namespace that uploaded them: models/policy.py)."""
        return BlobLifetime(
            queue_retention_s=self.retention_s,
            result_ttl_s=self.result_ttl_s,
            lifecycle_days=lifecycle_days,
            renew_ahead_s=self.blob_renew_ahead_s,
            day_s=self.blob_day_s,
        )

    def multipart(self, size: int) -> bool:
        """Whether an upload of `size` bytes is a multipart upload."""
        return size > self.multipart_threshold

    def multipart_part_bytes_for(self, size: int) -> int:
        """The part size of an upload of `size` bytes: MULTIPART_PART_BYTES, grown (in whole
        MiB) so the upload needs at most MULTIPART_MAX_PARTS parts (S3's limit)."""
        least = -(-size // MULTIPART_MAX_PARTS)
        if least <= self.multipart_part_bytes:
            return self.multipart_part_bytes
        mib = 1024**2
        return -(-least // mib) * mib

    @model_validator(mode="after")
    def _consistent(self) -> "Settings":
        """Refuse combinations that are valid one by one but break a promise together."""
        result_ttl = f"RESULT_TTL_S={self.result_ttl_s}"
        retention = (
            f"QUEUE_RETENTION_S={self.queue_retention_s}"
            if self.queue_retention_s
            else f"{result_ttl} (the retention, QUEUE_RETENTION_S being unset)"
        )
        problems = []
        if self.queue_retention_s and self.queue_retention_s > self.result_ttl_s:
            problems.append(
                f"QUEUE_RETENTION_S={self.queue_retention_s} is above {result_ttl}: an S3-tier "
                "job's record expires RESULT_TTL_S after its presign, so a job still queued "
                "then would be lost; set QUEUE_RETENTION_S <= RESULT_TTL_S (or leave it unset)"
            )
        if self.idempotency_ttl_s > self.retention_s:
            problems.append(
                f"IDEMPOTENCY_TTL_S={self.idempotency_ttl_s} is above {retention}: a repeated "
                "enqueue with the same Idempotency-Key after the first job's entry is gone "
                "would create a second job; set IDEMPOTENCY_TTL_S <= the retention"
            )
        if self.visibility_timeout_s >= self.retention_s:
            problems.append(
                f"VISIBILITY_TIMEOUT_S={self.visibility_timeout_s} is not below {retention}: a "
                "job whose daemon dies would be past the retention before it could be "
                "delivered again; set VISIBILITY_TIMEOUT_S < the retention"
            )
        # The shortest retention class must leave the renewer room (models/blob_lifetime.py).
        problems += self.blob_lifetime(SHORTEST_BLOB_DAYS).problems()
        if self.redis_memory_high_water_pct > self.redis_memory_hard_pct:
            problems.append(
                f"REDIS_MEMORY_HIGH_WATER_PCT={self.redis_memory_high_water_pct} is above "
                f"REDIS_MEMORY_HARD_PCT={self.redis_memory_hard_pct}: new jobs would be "
                "refused (redis_memory_full) before inline bytes are sent through S3 "
                "(inline_unavailable); set the high-water mark <= the hard mark"
            )
        if self.inline_threshold > largest_inline_threshold():
            problems.append(
                f"INLINE_THRESHOLD={self.inline_threshold} is above "
                f"{largest_inline_threshold()}: one inline job that large, base64 in a poll's "
                f"answer with its URLs, would not fit the {DELIVERIES_BUDGET} bytes a poll may "
                f"carry (Lambda's answer limit of {LAMBDA_RESPONSE_LIMIT} bytes less headroom), "
                "so a poll could never deliver it; send larger payloads through S3 (lower "
                "INLINE_THRESHOLD)"
            )
        if self.presign_ttl_s > PRESIGN_TTL_MAX_S:
            problems.append(
                f"PRESIGN_TTL_S={self.presign_ttl_s} is above {PRESIGN_TTL_MAX_S}: a presigned "
                "URL signed with the function role's temporary credentials stops working when "
                "that session ends, which Lambda does not promise beyond an hour, so clients "
                "would be told an expiry the URL does not keep; set PRESIGN_TTL_S <= 3600"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for field, env_name in SETTINGS_ENV.items():
            raw = env.get(env_name)
            if raw not in (None, ""):
                values[field] = raw
        try:
            return cls(**values)
        except ValidationError as e:
            raise SettingsError(f"invalid control-plane settings: {e}") from e


# field -> environment variable
SETTINGS_ENV: dict[str, str] = {
    "inline_threshold": "INLINE_THRESHOLD",
    "max_payload_bytes": "MAX_PAYLOAD_BYTES",
    "multipart_threshold": "MULTIPART_THRESHOLD",
    "multipart_part_bytes": "MULTIPART_PART_BYTES",
    "presign_ttl_s": "PRESIGN_TTL_S",
    "result_ttl_s": "RESULT_TTL_S",
    "max_presigns_per_job": "MAX_PRESIGNS_PER_JOB",
    "visibility_timeout_s": "VISIBILITY_TIMEOUT_S",
    "max_deliveries": "MAX_DELIVERIES",
    "stale_consumer_idle_s": "STALE_CONSUMER_IDLE_S",
    "payload_lost_policy": "PAYLOAD_LOST_POLICY",
    "poll_max_wait_s": "POLL_MAX_WAIT_S",
    "result_max_wait_s": "RESULT_MAX_WAIT_S",
    "queue_retention_s": "QUEUE_RETENTION_S",
    "batch_max_jobs": "BATCH_MAX_JOBS",
    "batch_max_bytes": "BATCH_MAX_BYTES",
    "idempotency_ttl_s": "IDEMPOTENCY_TTL_S",
    "blob_renew_ahead_s": "BLOB_RENEW_AHEAD_S",
    "blob_day_s": "BLOB_DAY_S",
    "copy_part_bytes": "COPY_PART_BYTES",
    "redis_memory_high_water_pct": "REDIS_MEMORY_HIGH_WATER_PCT",
    "redis_memory_hard_pct": "REDIS_MEMORY_HARD_PCT",
    "payload_bucket": "PAYLOAD_BUCKET",
    "redis_url": "REDIS_URL",
    "redis_cluster": "REDIS_CLUSTER",
    "redis_max_connections": "REDIS_MAX_CONNECTIONS",
    "redis_min_replica_acks": "REDIS_MIN_REPLICA_ACKS",
    "redis_replica_ack_timeout_ms": "REDIS_REPLICA_ACK_TIMEOUT_MS",
    "redis_replica_ack_policy": "REDIS_REPLICA_ACK_POLICY",
    "redis_auth_secret": "REDIS_AUTH_SECRET",
    "redis_iam_user": "REDIS_IAM_USER",
    "redis_iam_cache": "REDIS_IAM_CACHE",
    "redis_iam_serverless": "REDIS_IAM_SERVERLESS",
    "aws_region": "AWS_REGION",
    "s3_endpoint_url": "S3_ENDPOINT_URL",
    "token_parameter_path": "TOKEN_PARAMETER_PATH",
    "token_cache_s": "TOKEN_CACHE_S",
    "token_stale_max_s": "TOKEN_STALE_MAX_S",
    "kms_key_arn": "KMS_KEY_ARN",
    "kms_key_arns": "KMS_KEY_ARNS",
    "consume_args_grace_s": "CONSUME_ARGS_GRACE_S",
    "consume_result_grace_s": "CONSUME_RESULT_GRACE_S",
}


@built_once(maxsize=1)
def get_settings() -> Settings:
    """Settings of this container, read once (tests call `get_settings.cache_clear()`)."""
    return Settings.from_env()
