"""Presigned PUT and GET URLs of whole objects (a multipart upload's part URLs: multipart.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records import sha256_hex_to_b64
from ._base import S3Base, upload_params


@dataclass(frozen=True)
class PresignedPut:
    url: str
    headers: dict[str, str]


class Presigning(S3Base):
    def presign_put(
        self,
        key: str,
        size: int,
        content_type: str,
        sha256_hex: str | None,
        crc64nvme_b64: str | None = None,
        policy_headers: dict[str, str] | None = None,
    ) -> PresignedPut:
        """A PUT URL that signs content-length, content-type, (when given) the checksum
        (CRC64NVME or sha256) and the namespace's policy headers (retention tag, SSE), so S3
        refuses a body of another size, type or checksum, and an upload without the tag or the
        encryption."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "ContentLength": size,
            "ContentType": content_type,
            **upload_params(policy_headers),
        }
        headers = {"Content-Length": str(size), "Content-Type": content_type}
        headers.update(policy_headers or {})
        if crc64nvme_b64:
            params["ChecksumCRC64NVME"] = crc64nvme_b64
            params["ChecksumAlgorithm"] = "CRC64NVME"
            headers["x-amz-checksum-crc64nvme"] = crc64nvme_b64
            headers["x-amz-sdk-checksum-algorithm"] = "CRC64NVME"
        elif sha256_hex:
            b64 = sha256_hex_to_b64(sha256_hex)
            params["ChecksumSHA256"] = b64
            # Naming the algorithm makes S3 (and emulators) store the checksum for HEAD to return.
            params["ChecksumAlgorithm"] = "SHA256"
            headers["x-amz-checksum-sha256"] = b64
            headers["x-amz-sdk-checksum-algorithm"] = "SHA256"
        if self._presigner is not None:
            url = self._presigner.url("PUT", self.bucket, key, self._ttl, headers)
        else:
            url = self._s3.generate_presigned_url(
                "put_object", Params=params, ExpiresIn=self._ttl, HttpMethod="PUT"
            )
        return PresignedPut(url=url, headers=headers)

    def presign_get(self, key: str) -> str:
        if self._presigner is not None:
            return self._presigner.url("GET", self.bucket, key, self._ttl)
        return self._s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=self._ttl,
            HttpMethod="GET",
        )
