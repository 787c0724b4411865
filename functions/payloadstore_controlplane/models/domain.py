"""Domain vocabulary shared by logic and store."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

import os
import re
import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class JobStatus(StrEnum):
    AWAITING_UPLOAD = "awaiting_upload"  # an S3-tier job presigned, not enqueued yet
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAYLOAD_LOST = "payload_lost"
    PAYLOAD_CORRUPT = "payload_corrupt"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.PAYLOAD_LOST,
        JobStatus.PAYLOAD_CORRUPT,
        JobStatus.CANCELLED,
    }
)


class Tier(StrEnum):
    INLINE = "inline"
    S3 = "s3"


class PayloadKind(StrEnum):
    ARGS = "args"
    RESULT = "result"


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

# Crockford base32: job ids sort by creation time as strings (ULID layout: 48-bit ms + 80 random bits).
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_INDEX = {c: i for i, c in enumerate(_CROCKFORD)}
JOB_ID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def new_job_id(now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def job_id_time_chars(ms: int) -> str:
    """The 10 characters a job id created at `ms` starts with (they sort as the times do)."""
    return "".join(_CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))


def job_id_time_s(job_id: str) -> float:
    """Creation time encoded in a job id (seconds since the epoch)."""
    value = 0
    for c in job_id:
        value = (value << 5) | _CROCKFORD_INDEX[c]
    return (value >> 80) / 1000.0


class WireModel(BaseModel):
    """Base of the wire models: each model's validator and serializer are built when first used,
    not at import (a function uses a few of the ~35 models on its first request)."""

    model_config = ConfigDict(defer_build=True)


class OmitsNull(WireModel):
    """An answer body that leaves out the fields whose value is null (None) instead of sending
    `"field": null`. Every such field is optional in the OpenAPI document, and readers take an
    absent key as null (docs/wire.md, "Absent fields")."""

    # No return annotation: pydantic then documents the model's own fields (with one, the
    # OpenAPI document would describe the answer as that annotation instead).
    @model_serializer(mode="wrap")
    def _omit_null(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class MultipartRef(OmitsNull):
    """How a multipart object was uploaded: its part size and count, and for a SHA256 upload
    its composite SHA-256 (sha256 of the concatenated binary sha256 of each part, S3's
    COMPOSITE checksum "<b64>-N" as hex), which readers check range by range. A CRC64NVME
    upload has none: the reference's `crc64nvme` is the whole object's (FULL_OBJECT)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    part_bytes: int
    part_count: int
    composite_sha256: str | None = None


class PayloadRef(OmitsNull):
    """Where a large payload lives. Field names follow the wire (camelCase contentType)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", defer_build=True)

    kind: str = "s3"
    bucket: str
    key: str
    size: int
    contentType: str | None = None
    # The checksum readers verify: one of the two (S3's base64 CRC64NVME, or sha256 hex).
    crc64nvme: str | None = None
    sha256: str | None = None
    multipart: MultipartRef | None = None


class IssueRecord(WireModel):
    """What the CP remembers about a key it minted."""

    namespace: str
    job_id: str
    kind: PayloadKind
    key: str
    bucket: str
    size: int
    content_type: str
    sha256: str | None = None
    # The CRC64NVME (base64) signed into a single PUT's URL, or a multipart upload's whole
    # object CRC once completed (FULL_OBJECT).
    crc64nvme: str | None = None
    presigns: int = 1
    issued_at: float
    # Multipart uploads: the part size, and the composite sha256 (hex) once completed.
    part_bytes: int | None = None
    composite_sha256: str | None = None
    # A result key: the attempt whose delivery issued it (the key is that attempt's).
    attempt: int | None = None

    @property
    def part_count(self) -> int:
        return -(-self.size // self.part_bytes) if self.part_bytes else 1
