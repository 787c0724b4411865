"""API models of blobs: POST .../blobs (does the namespace have this content; where to upload
it)."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Literal

from pydantic import Field, model_validator

from .api_common import MAX_BLOB_BYTES, ChecksumAlgorithm, Crc64Nvme, Sha256Hex, StrictModel
from .api_uploads import PresignMultipart
from .domain import OmitsNull, WireModel

# -- blobs ---------------------------------------------------------------------------------


class BlobRequest(StrictModel):
    """POST .../blobs: does the namespace have this content? If not, where to upload it."""

    sha256: Sha256Hex
    size: int = Field(ge=1, le=MAX_BLOB_BYTES, description="exact byte size (at most 5 GiB)")
    checksum_algorithm: ChecksumAlgorithm | None = Field(
        None,
        description="above MULTIPART_THRESHOLD, the transfer checksum of a new upload in parts: "
        "CRC64NVME (FULL_OBJECT, its first part URLs in the answer) or SHA256 (COMPOSITE, the "
        "default: clients before CRC64NVME). The blob is named and verified by its sha256 "
        "either way; a single PUT always signs the sha256",
    )
    crc64nvme: Crc64Nvme | None = Field(
        None,
        description="the POST that completes a CRC64NVME upload in parts: the whole blob's "
        "CRC64NVME, which S3 checks against the parts at completion",
    )

    @model_validator(mode="after")
    def _lower(self):
        self.sha256 = self.sha256.lower()
        return self


class BlobUpload(WireModel):
    """A presigned PUT of the blob: size and sha256 are signed in (S3 refuses other bytes)."""

    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="send exactly these headers with the PUT")
    expires_at: str = Field(description="ISO 8601 UTC")


class BlobResponse(OmitsNull):
    sha256: str
    size: int
    exists: bool = Field(
        description="true: the namespace has the blob, verified; jobs may reference it now. "
        "false: upload it with `upload`, then POST again to have it verified"
    )
    key: str = Field(description="the blob's key: blobs/<namespace>/<sha256>")
    expires_at: str | None = Field(
        None, description="exists: when the blob expires unless a new job references it"
    )
    upload: BlobUpload | None = Field(None, description="a single PUT (up to MULTIPART_THRESHOLD)")
    multipart: PresignMultipart | None = Field(
        None,
        description="above MULTIPART_THRESHOLD, instead of upload: ask POST .../payloads/parts "
        '{"blob": sha256, "parts": [...]} for part URLs, upload them, then POST again to have '
        "the upload completed and verified",
    )
