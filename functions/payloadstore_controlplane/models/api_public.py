"""API models of the public and settings answers: the client configuration (with the caller's
namespace policy) and health."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Literal

from pydantic import Field

from .api_common import ChecksumAlgorithm
from .domain import WireModel

# -- public --------------------------------------------------------------------------------


class PolicyModel(WireModel):
    """A namespace's policy (docs/operations.md, "Namespace policies")."""

    retention: Literal["consume", "1d", "2d", "7d", "30d"] = Field(
        "2d", description="how long payloads and results are kept"
    )
    kms_key: str = Field(
        "none", description="none (SSE-S3), stack (the stack's key) or a KMS key ARN"
    )
    inline: Literal["allowed", "never"] = Field(
        "allowed", description="never: every payload and result goes to S3"
    )


def _both_algorithms() -> list[ChecksumAlgorithm]:
    return ["CRC64NVME", "SHA256"]


class ConfigResponse(WireModel):
    inline_threshold: int
    max_payload_bytes: int
    presign_ttl_s: int
    result_ttl_s: int
    max_presigns_per_job: int
    multipart_threshold: int = Field(description="uploads above this size are multipart")
    multipart_part_bytes: int = Field(description="part size (grown for > 10,000 parts)")
    batch_max_jobs: int = Field(description="jobs per batch enqueue or status call")
    batch_max_bytes: int = Field(description="inline payload bytes per batch enqueue (decoded)")
    checksum_algorithms: list[ChecksumAlgorithm] = Field(
        default_factory=_both_algorithms,
        description="the upload checksums this control plane takes (presign `checksum_algorithm`)",
    )
    policy: PolicyModel = Field(
        default_factory=PolicyModel, description="the caller's namespace policy"
    )


class HealthCheck(WireModel):
    ok: bool
    detail: str


class HealthResponse(WireModel):
    """GET /v1/health/details (any token): each check with its detail."""

    status: Literal["ok", "failing"]
    failing: list[str]
    checks: dict[str, HealthCheck]


class PublicHealthResponse(WireModel):
    """GET /v1/health (no token): overall status and only ok/failing per check."""

    status: Literal["ok", "failing"]
    failing: list[str]
    checks: dict[str, Literal["ok", "failing"]]
