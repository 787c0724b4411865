"""Multipart uploads: create, presigned part URLs, the parts uploaded so far, complete, abort."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..records import sha256_hex_to_b64
from ._base import S3Base, upload_params
from .errors import brief, error_code, storage_error
from .presigning import PresignedPut


class CompletionRefused(Exception):
    """S3 refused to complete a multipart upload with the parts named (InvalidPart, ...)."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


# S3's answers to a CompleteMultipartUpload whose parts cannot make the object.
_COMPLETION_REFUSALS = frozenset(
    {"InvalidPart", "InvalidPartOrder", "EntityTooSmall", "InvalidRequest", "BadDigest"}
)


@dataclass(frozen=True)
class UploadedPart:
    number: int
    size: int
    etag: str
    sha256_b64: str | None
    crc64nvme_b64: str | None = None


class Multipart(S3Base):
    def create_multipart(
        self,
        key: str,
        content_type: str,
        algorithm: str = "SHA256",
        policy_headers: dict[str, str] | None = None,
    ) -> str:
        """CreateMultipartUpload: the upload id. CRC64NVME is FULL_OBJECT (S3 checks the whole
        object against the CRC given at completion); SHA256 is COMPOSITE (each part's sha256).
        The namespace's retention tag and encryption are given here: the object S3 assembles
        carries them."""
        checksum = (
            {"ChecksumAlgorithm": "CRC64NVME", "ChecksumType": "FULL_OBJECT"}
            if algorithm == "CRC64NVME"
            else {"ChecksumAlgorithm": "SHA256"}
        )
        try:
            r = self._s3.create_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                ContentType=content_type,
                **checksum,
                **upload_params(policy_headers),
            )
        except (ClientError, BotoCoreError) as e:
            raise storage_error(e, "create multipart upload") from e
        return str(r["UploadId"])

    def presign_part(
        self,
        key: str,
        upload_id: str,
        number: int,
        size: int,
        sha256_hex: str | None,
        crc64nvme_b64: str | None = None,
    ) -> PresignedPut:
        """An UploadPart URL signing the part's content-length and, when given, its checksum
        (sha256: a COMPOSITE upload's, S3 refuses a part of other bytes; CRC64NVME: optional
        for a FULL_OBJECT upload, whose whole object S3 checks at completion)."""
        headers = {"Content-Length": str(size)}
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "PartNumber": number,
            "ContentLength": size,
        }
        if sha256_hex:
            headers["x-amz-checksum-sha256"] = params["ChecksumSHA256"] = sha256_hex_to_b64(
                sha256_hex
            )
        elif crc64nvme_b64:
            headers["x-amz-checksum-crc64nvme"] = params["ChecksumCRC64NVME"] = crc64nvme_b64
        if self._presigner is not None:
            query = {"partNumber": str(number), "uploadId": upload_id}
            url = self._presigner.url("PUT", self.bucket, key, self._ttl, headers, query=query)
        else:
            url = self._s3.generate_presigned_url(
                "upload_part", Params=params, ExpiresIn=self._ttl, HttpMethod="PUT"
            )
        return PresignedPut(url=url, headers=headers)

    def list_parts(self, key: str, upload_id: str) -> list[UploadedPart] | None:
        """Every part uploaded so far (number, size, ETag, sha256 b64), or None when the upload
        does not exist (completed or aborted)."""
        found: list[UploadedPart] = []
        marker = 0
        while True:
            try:
                r = self._s3.list_parts(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker
                )
            except ClientError as e:
                if error_code(e) == "NoSuchUpload":
                    return None
                raise storage_error(e, "list parts") from e
            except BotoCoreError as e:
                raise storage_error(e, "list parts") from e
            for part in r.get("Parts", []):
                found.append(
                    UploadedPart(
                        number=int(part["PartNumber"]),
                        size=int(part["Size"]),
                        etag=str(part["ETag"]),
                        sha256_b64=part.get("ChecksumSHA256"),
                        crc64nvme_b64=part.get("ChecksumCRC64NVME"),
                    )
                )
            if not r.get("IsTruncated") or not r.get("Parts"):
                return found
            marker = int(r["NextPartNumberMarker"])

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        parts: list[UploadedPart],
        crc64nvme_b64: str | None = None,
    ) -> bool:
        """CompleteMultipartUpload naming each part's ETag and checksum; False when the upload
        is gone (completed by a concurrent request, or aborted). `crc64nvme_b64`: a FULL_OBJECT
        upload's whole-object CRC, which S3 checks against the parts it holds (400 BadDigest,
        CompletionRefused, when a part is not the bytes the uploader meant)."""
        extra: dict[str, Any] = {}
        if crc64nvme_b64:
            extra = {"ChecksumCRC64NVME": crc64nvme_b64, "ChecksumType": "FULL_OBJECT"}
            named = [
                {"PartNumber": p.number, "ETag": p.etag}
                | ({"ChecksumCRC64NVME": p.crc64nvme_b64} if p.crc64nvme_b64 else {})
                for p in parts
            ]
        else:
            named = [
                {"PartNumber": p.number, "ETag": p.etag, "ChecksumSHA256": p.sha256_b64 or ""}
                for p in parts
            ]
        try:
            self._s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": named},
                **extra,
            )
        except ClientError as e:
            code = error_code(e)
            if code == "NoSuchUpload":
                return False
            if code in _COMPLETION_REFUSALS:
                raise CompletionRefused(code) from e
            raise storage_error(e, "complete multipart upload") from e
        except BotoCoreError as e:
            raise storage_error(e, "complete multipart upload") from e
        return True

    def abort_multipart(self, key: str, upload_id: str) -> str | None:
        """AbortMultipartUpload, best effort (the bucket's lifecycle aborts what remains): None,
        or why it failed."""
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as e:
            return brief(e)
        return None
