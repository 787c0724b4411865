"""A namespace's policy: how long its payloads are kept, which KMS key encrypts them, and whether
any of its bytes may rest in Redis.

    retention  consume | 1d | 2d (default) | 7d | 30d
    kms_key    none (SSE-S3, default) | stack (the stack's own key) | the ARN of a key the stack's
               roles are granted on (KMS_KEY_ARNS)
    inline     allowed (default, up to INLINE_THRESHOLD) | never (every payload and result in S3)

The policy is kept beside the namespace's tokens (store/tokens.py) and reaches the handlers in
the authorizer's context, so it is read with the tokens' caching. S3 enforces it: every presigned
PUT and multipart upload signs the retention tag and the SSE headers in (`upload_headers`), and
the bucket has one lifecycle rule per retention class, filtered by that tag (infra/storage.py).

Nothing in this module may import boto3, redis, pydantic or Powertools: CDK synth, the
authorizer and the S3 emulator import it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from urllib.parse import quote

RETENTIONS = ("consume", "1d", "2d", "7d", "30d")
DEFAULT_RETENTION = "2d"
# Days a retention class's lifecycle rule keeps an object. `consume` is deleted by the control
# plane itself (minutes after use); its rule is the backstop, 2 days, the time a failed job's
# arguments are kept so it can be retried.
RETENTION_DAYS = {"consume": 2, "1d": 1, "2d": 2, "7d": 7, "30d": 30}
# The object tag each presigned upload signs in (x-amz-tagging), and the lifecycle rules filter on.
RETENTION_TAG = "payloadstore-retention"
# The prefix of each class's lifecycle rule id: `expire-retention-7d`.
RETENTION_RULE_PREFIX = "expire-retention-"

# The local stack's stand-in for the stack's own key (the S3 emulator stores the ARN it is given
# and judges who may use it by its KMS grants): the key `stack` means when KMS_KEY_ARN is unset
# and the control plane talks to a local S3 emulator (S3_ENDPOINT_URL). Never used on AWS.
LOCAL_KMS_KEY_ARN = "arn:aws:kms:us-east-1:000000000000:key/0a11ce00-5eed-4c0d-8e15-10ca1570ca1a"

KMS_NONE = "none"
KMS_STACK = "stack"
KMS_KEY_ARN_RE = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]{1,128}$")

INLINE_MODES = ("allowed", "never")
DEFAULT_INLINE = "allowed"

# SSM parameter name (beside the tokens, `<TOKEN_PARAMETER_PATH>/<POLICY_PARAMETER_PREFIX><ns>`).
POLICY_PARAMETER_PREFIX = "policy."

SSE_HEADER = "x-amz-server-side-encryption"
SSE_KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
TAGGING_HEADER = "x-amz-tagging"
SSE_KMS = "aws:kms"
SSE_S3 = "AES256"


class PolicyError(ValueError):
    """A policy value that is not one of the allowed ones: nothing is written."""


@dataclass(frozen=True)
class NamespacePolicy:
    retention: str = DEFAULT_RETENTION
    kms_key: str = KMS_NONE
    inline: str = DEFAULT_INLINE

    @property
    def retention_days(self) -> int:
        return RETENTION_DAYS[self.retention]

    @property
    def retention_s(self) -> int:
        return self.retention_days * 86_400

    @property
    def outlives_records(self) -> bool:
        """A class longer than the default's (`7d`, `30d`): a finished job's record is kept as
        long as its payloads (beyond RESULT_TTL_S)."""
        return self.retention_days > RETENTION_DAYS[DEFAULT_RETENTION]

    def finished_record_s(self, result_ttl_s: int) -> int:
        """How long a finished job's record (its status, result and the blobs they name) is
        kept: the class's days for `7d`/`30d`, else RESULT_TTL_S."""
        return self.retention_s if self.outlives_records else result_ttl_s

    def read_window_s(self, result_ttl_s: int) -> int:
        """How long after issue a payload key may be read through the control plane: the
        class's days for `7d`/`30d`, else the shorter of RESULT_TTL_S and the class."""
        if self.outlives_records:
            return self.retention_s
        return min(result_ttl_s, self.retention_s)

    @property
    def consume(self) -> bool:
        return self.retention == "consume"

    @property
    def inline_never(self) -> bool:
        return self.inline == "never"

    @property
    def tagging(self) -> str:
        """The x-amz-tagging value of an upload (URL-query encoded, as S3 reads it)."""
        return f"{quote(RETENTION_TAG, safe='')}={quote(self.retention, safe='')}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def to_context(self) -> dict[str, str]:
        """Flat scalars for the authorizer's context (API Gateway takes nothing nested); none
        for the default policy (the handlers read a missing policy as the defaults)."""
        if self == NamespacePolicy():
            return {}
        return {
            "policy_retention": self.retention,
            "policy_kms_key": self.kms_key,
            "policy_inline": self.inline,
        }

    @classmethod
    def from_context(cls, ctx: dict) -> NamespacePolicy:
        """The policy the authorizer put in the context; the defaults for anything missing or
        unknown (an authorizer of an older release, a hand-made event)."""
        retention = ctx.get("policy_retention")
        kms_key = ctx.get("policy_kms_key")
        inline = ctx.get("policy_inline")
        return cls(
            retention=retention if retention in RETENTIONS else DEFAULT_RETENTION,
            kms_key=kms_key if isinstance(kms_key, str) and kms_key else KMS_NONE,
            inline=inline if inline in INLINE_MODES else DEFAULT_INLINE,
        )

    @classmethod
    def from_stored(cls, value: dict) -> NamespacePolicy:
        """The policy as stored (SSM), defaults for missing or unknown fields."""
        return cls.from_context({f"policy_{k}": v for k, v in value.items()})


def stack_key_arn(configured: str | None, s3_endpoint_url: str | None) -> str | None:
    """The stack's own key: KMS_KEY_ARN, else the local stack's stand-in when S3 is a local
    emulator, else none (kms_key `stack` is then refused)."""
    if configured:
        return configured
    return LOCAL_KMS_KEY_ARN if s3_endpoint_url else None


def resolve_kms_key(policy: NamespacePolicy, stack_key_arn: str | None) -> str | None:
    """The KMS key ARN a namespace's objects are encrypted with, or None for SSE-S3."""
    if policy.kms_key == KMS_NONE:
        return None
    if policy.kms_key == KMS_STACK:
        return stack_key_arn or None
    return policy.kms_key


def encryption_fingerprint(kms_key_arn: str | None) -> str:
    """A short name of an object's encryption (a KMS key's ARN, None: SSE-S3), kept in a blob's
    record: a reference to a blob verified under another encryption than its namespace's now
    is refused, as a payload uploaded before the policy changed is. Four hex digits keep a
    record within 128 B; a change of key is told apart but for one chance in 65,536, and the
    POST .../blobs that verifies an upload checks the object itself."""
    return hashlib.sha256((kms_key_arn or SSE_S3).encode()).hexdigest()[:4]


def upload_headers(policy: NamespacePolicy, stack_key_arn: str | None) -> dict[str, str]:
    """The headers a presigned PUT signs in for this namespace: the retention tag and the
    server-side encryption (an uploader that leaves one out or changes it gets S3's 403)."""
    headers = {TAGGING_HEADER: policy.tagging}
    key = resolve_kms_key(policy, stack_key_arn)
    if key is None:
        headers[SSE_HEADER] = SSE_S3
    else:
        headers[SSE_HEADER] = SSE_KMS
        headers[SSE_KEY_HEADER] = key
    return headers


def validate_policy(
    retention: object,
    kms_key: object,
    inline: object,
    *,
    granted_keys: tuple[str, ...] = (),
    stack_key_arn: str | None = None,
) -> NamespacePolicy:
    """The policy these values make, or PolicyError naming what is wrong (None keeps nothing:
    the caller merges with the current policy first)."""
    problems = []
    if retention not in RETENTIONS:
        problems.append(f"retention {retention!r} must be one of {', '.join(RETENTIONS)}")
    if inline not in INLINE_MODES:
        problems.append(f"inline {inline!r} must be one of {', '.join(INLINE_MODES)}")
    if not isinstance(kms_key, str) or not kms_key:
        problems.append(f"kms_key {kms_key!r} must be none, stack or a KMS key ARN")
    elif kms_key == KMS_STACK and not stack_key_arn:
        problems.append("kms_key stack: this stack has no KMS key configured (KMS_KEY_ARN)")
    elif kms_key not in (KMS_NONE, KMS_STACK):
        if not KMS_KEY_ARN_RE.match(kms_key):
            problems.append(
                f"kms_key {kms_key!r} must be none, stack or a KMS key ARN "
                "(arn:aws:kms:REGION:ACCOUNT:key/ID)"
            )
        elif kms_key not in granted_keys and kms_key != stack_key_arn:
            problems.append(
                f"kms_key {kms_key} is not granted to this stack's roles: list it in the "
                "payloadstore:kmsKeys context flag and deploy (KMS_KEY_ARNS)"
            )
    if problems:
        raise PolicyError("; ".join(problems))
    return NamespacePolicy(str(retention), str(kms_key), str(inline))


def parse_key_list(text: str | None) -> tuple[str, ...]:
    """`arn1,arn2` (KMS_KEY_ARNS, the payloadstore:kmsKeys context flag) -> (arn1, arn2)."""
    return tuple(k.strip() for k in (text or "").split(",") if k.strip())
