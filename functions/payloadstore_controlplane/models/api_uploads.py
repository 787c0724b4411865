"""API models of transfers by presigned URL: POST .../payloads/presign (a PUT, a multipart
upload, a GET) and POST .../payloads/parts (the part URLs of a multipart upload)."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Literal

from pydantic import Field, model_validator

from .api_common import ChecksumAlgorithm, Crc64Nvme, Lease, MimeType, Sha256Hex, StrictModel
from .domain import OmitsNull, PayloadKind, WireModel

# -- presign -------------------------------------------------------------------------------


class PresignRequest(StrictModel):
    """Query parameters and/or JSON body of POST .../payloads/presign (query wins)."""

    op: Literal["put", "get"]
    size: int | None = Field(None, ge=1, description="exact byte size of the upload (op=put)")
    kind: PayloadKind = PayloadKind.ARGS
    job_id: str | None = Field(None, description="re-presign the key of this job (op=put)")
    content_type: MimeType = "application/msgpack"
    checksum_algorithm: ChecksumAlgorithm | None = Field(
        None,
        description="the upload's checksum (op=put): CRC64NVME (S3 verifies a multipart "
        "upload whole, FULL_OBJECT) or SHA256 (a multipart upload's parts each signed with "
        "their sha256, COMPOSITE). Absent: CRC64NVME when `crc64nvme` is given, else SHA256 "
        "(clients before CRC64NVME)",
    )
    crc64nvme: Crc64Nvme | None = Field(
        None,
        description="CRC64NVME of the upload (op=put, checksum_algorithm=CRC64NVME, required up "
        "to MULTIPART_THRESHOLD): signed into the URL, so S3 refuses other bytes. Above the "
        "threshold it is given with the reference instead, and S3 checks the whole object at "
        "completion",
    )
    sha256: Sha256Hex | None = Field(
        None,
        description="hex sha256 of the upload (op=put, checksum_algorithm=SHA256, required up "
        "to MULTIPART_THRESHOLD): signed into the URL, so S3 refuses other bytes, and checked "
        "again before the key is accepted. Not used above the threshold: each part's sha256 is "
        "signed into its URL",
    )
    lease: Lease | None = Field(
        None, description="kind=result: the lease of the delivery whose result this is"
    )
    key: str | None = Field(None, max_length=512, description="an issued key (op=get)")

    @model_validator(mode="after")
    def _fields_for_op(self):
        if self.op == "put" and self.size is None:
            raise ValueError("op=put needs size")
        # op=put without a checksum is refused by the logic up to MULTIPART_THRESHOLD (a setting).
        if self.op == "get" and not self.key:
            raise ValueError("op=get needs key")
        if self.sha256:
            self.sha256 = self.sha256.lower()
        if self.sha256 and self.crc64nvme:
            raise ValueError("give one checksum: sha256 or crc64nvme")
        if self.checksum_algorithm is None:
            self.checksum_algorithm = "CRC64NVME" if self.crc64nvme else "SHA256"
        if self.checksum_algorithm == "CRC64NVME" and self.sha256:
            raise ValueError("checksum_algorithm=CRC64NVME takes crc64nvme, not sha256")
        if self.checksum_algorithm == "SHA256" and self.crc64nvme:
            raise ValueError("checksum_algorithm=SHA256 takes sha256, not crc64nvme")
        return self


class PartUrl(WireModel):
    number: int
    url: str
    headers: dict[str, str] = Field(description="send exactly these headers with the part's PUT")


class PresignMultipart(OmitsNull):
    """A multipart upload created at presign. A CRC64NVME upload comes with the URLs of its
    first parts (`parts`, up to FIRST_PART_URLS): an upload of that many parts needs no
    `POST .../payloads/parts` call. A SHA256 upload asks for each part's URL with its sha256."""

    upload_id: str
    part_bytes: int = Field(description="every part but the last has exactly this many bytes")
    part_count: int
    checksum_type: Literal["FULL_OBJECT"] | None = Field(
        None,
        description="FULL_OBJECT (CRC64NVME: S3 checks the whole object against the "
        "reference's crc64nvme at completion); absent for a SHA256 upload (COMPOSITE)",
    )
    parts: list[PartUrl] | None = Field(
        None, description="CRC64NVME: the URLs of the first parts, their size signed in"
    )
    parts_expire_at: str | None = Field(None, description="ISO 8601 UTC, with `parts`")


class PresignPutResponse(OmitsNull):
    url: str | None = Field(None, description="the single PUT's URL (absent for a multipart)")
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="send exactly these headers with the PUT")
    bucket: str
    key: str
    job_id: str
    expires_at: str = Field(description="ISO 8601 UTC")
    multipart: PresignMultipart | None = Field(
        None, description="above MULTIPART_THRESHOLD: the multipart upload, instead of `url`"
    )
    checksum_algorithm: ChecksumAlgorithm = Field(
        "SHA256", description="the checksum the upload is verified with"
    )


# -- multipart parts -----------------------------------------------------------------------


class PartSpec(StrictModel):
    number: int = Field(ge=1, le=10_000, description="part number, 1..part_count")
    size: int = Field(ge=1, description="part_bytes, or what is left for the last part")
    sha256: Sha256Hex | None = Field(
        None, description="a SHA256 upload's part: required, signed into its URL"
    )
    crc64nvme: Crc64Nvme | None = Field(
        None, description="a CRC64NVME upload's part: optional; when given, signed into its URL"
    )

    @model_validator(mode="after")
    def _lower(self):
        if self.sha256:
            self.sha256 = self.sha256.lower()
        if self.sha256 and self.crc64nvme:
            raise ValueError("a part takes one checksum: sha256 or crc64nvme")
        return self


class PartsRequest(StrictModel):
    """POST .../payloads/parts: presigned UploadPart URLs for parts of a multipart upload: of a
    job's payload (`job_id`, `kind`, `lease`) or of a blob (`blob`: its sha256); exactly one."""

    job_id: str | None = Field(None, max_length=64, description="the job whose payload this is")
    blob: Sha256Hex | None = Field(
        None,
        description="instead of job_id: the sha256 of a blob whose multipart upload POST "
        ".../blobs opened (kind and lease are not read)",
    )
    kind: PayloadKind = PayloadKind.ARGS
    lease: Lease | None = Field(
        None, description="kind=result: the lease of the delivery (checked when given)"
    )
    parts: list[PartSpec] = Field(min_length=1, max_length=100, description="at most 100")

    @model_validator(mode="after")
    def _distinct(self):
        if (self.job_id is None) == (self.blob is None):
            raise ValueError("exactly one of job_id and blob")
        if self.blob is not None:
            if self.lease is not None:
                raise ValueError("a blob's parts take no lease")
            self.blob = self.blob.lower()
        numbers = [p.number for p in self.parts]
        if len(set(numbers)) != len(numbers):
            raise ValueError("each part number at most once per call")
        return self


class PartsResponse(OmitsNull):
    job_id: str | None = Field(None, description="the job asked for (absent for a blob)")
    blob: str | None = Field(None, description="the blob asked for (absent for a job)")
    key: str
    upload_id: str
    parts: list[PartUrl]
    expires_at: str = Field(description="ISO 8601 UTC")


class PresignGetResponse(WireModel):
    url: str
    method: Literal["GET"] = "GET"
    expires_at: str
