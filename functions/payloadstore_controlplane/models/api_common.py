"""What the API models (models/api.py) share: the field types (checksums, MIME types, leases,
names, blob lists, base64 bodies), the strict base of request bodies, and the error body every
error answer carries."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

import base64
import binascii
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field

from .domain import NAME_RE, WireModel

Sha256Hex = Annotated[
    str, Field(pattern=r"^[0-9a-fA-F]{64}$", description="sha256 of the bytes, hex")
]
# CRC64NVME as S3 shows it (x-amz-checksum-crc64nvme): base64 of its 8 big-endian bytes.
Crc64Nvme = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9+/]{10}[AEIMQUYcgkosw048]=$",
        description="CRC64NVME of the bytes: base64 of its 8 big-endian bytes, as S3 shows it",
    ),
]
ChecksumAlgorithm = Literal["CRC64NVME", "SHA256"]
# RFC 6838 type/subtype (restricted-name characters), optional `; name=value` parameters (value a
# token or a quoted string); nothing else, so no CR/LF can reach a signed header.
_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"
MIME_TYPE_PATTERN = (
    rf"^{_RESTRICTED_NAME}/{_RESTRICTED_NAME}"
    rf"(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\\r\n]*\"))*$"
)
Lease = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description="the delivery's lease, from the poll answer: only its holder may finish, "
        "fail or heartbeat the job (409 lease_mismatch otherwise)",
    ),
]

MimeType = Annotated[
    str,
    Field(
        max_length=255,
        pattern=MIME_TYPE_PATTERN,
        description="a MIME type (RFC 6838), e.g. application/msgpack",
    ),
]
Name = Annotated[str, Field(pattern=NAME_RE.pattern, description="[A-Za-z0-9_.-], 1-63 chars")]
# A blob is at most what one S3 PUT and one CopyObject (its renewal) take: 5 GiB.
MAX_BLOB_BYTES = 5 * 1024**3
# The most blobs one job (or one result) may reference.
MAX_BLOBS_PER_JOB = 16
BlobList = Annotated[
    list[Sha256Hex],
    Field(
        max_length=MAX_BLOBS_PER_JOB,
        description="sha256 (hex) of every blob the value references (the SDK fills it): "
        "409 unknown_blob when the namespace has no such blob",
    ),
]


class StrictModel(WireModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def b64_bytes(value: str) -> bytes:
    """Strict base64 (the alphabet and padding only) -> bytes; ValueError otherwise."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("not valid base64") from e


def _checked_b64(value: str) -> str:
    b64_bytes(value)
    return value


Base64Bytes = Annotated[
    str, AfterValidator(_checked_b64), Field(description="base64 of the msgpack bytes")
]


# -- errors --------------------------------------------------------------------------------


class ErrorBody(WireModel):
    """More fields may follow `code` and `message` (e.g. `reason`, `details`; `state`, the job's
    state, on a cancel's 409)."""

    code: str
    message: str


class ErrorResponse(WireModel):
    error: ErrorBody


class GatewayErrorResponse(WireModel):
    """What API Gateway itself answers (no token, unknown token, body over 10 MB)."""

    message: str | None
