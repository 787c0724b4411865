"""Copies of an object onto itself, which renew it (its Last-Modified becomes now, so the
bucket's lifecycle counts its days from now): one CopyObject, or UploadPartCopy ranges at once
for a large object."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .errors import is_not_found, storage_error
from .multipart import Multipart
from .objects import ObjectAccess, ObjectInfo


class Copies(Multipart, ObjectAccess):
    def copy_onto_itself(self, key: str, content_type: str) -> bool:
        """Copy an object onto itself (S3 CopyObject, no bytes through the caller): its
        Last-Modified becomes now, so the bucket's lifecycle counts its days from now. S3 takes a
        copy onto itself only when something changes: the metadata is replaced (x-amz-meta-
        renewed-at), and the sha256 checksum is computed again for the new object. False when
        the object is gone (404).

        A copy takes the bucket's default encryption (SSE-S3) unless told otherwise, so an
        SSE-KMS object (a namespace policy's key) is copied under its own key again, read from
        a HEAD first; its tags (the retention class) are copied as they are."""
        current = self.head(key)
        if current is None:
            return False
        keep_key = _same_encryption(current)
        try:
            self._s3.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                MetadataDirective="REPLACE",
                Metadata={"renewed-at": str(int(time.time()))},
                ContentType=content_type,
                ChecksumAlgorithm="SHA256",
                **keep_key,
            )
        except ClientError as e:
            if is_not_found(e):
                return False
            raise storage_error(e, "copy") from e
        except BotoCoreError as e:
            raise storage_error(e, "copy") from e
        return True

    def copy_in_parts(
        self, key: str, size: int, part_bytes: int, content_type: str, concurrency: int = 8
    ) -> bool:
        """Copy an object onto itself as a multipart upload of UploadPartCopy ranges, `concurrency`
        at once (no bytes through the caller; S3's CopyObject stops at 5 GiB, this does not): a
        large object is renewed in a fraction of one copy's time. The upload asks for SHA-256
        checksums, so the new object has S3's COMPOSITE checksum of the parts. False when the
        object is gone (404); the upload is aborted on any failure."""
        from concurrent.futures import ThreadPoolExecutor
        from urllib.parse import urlencode

        # As copy_onto_itself: the copy keeps the object's SSE-KMS key and its tags (the
        # retention class), which a multipart upload would not carry over by itself.
        current = self.head(key)
        if current is None:
            return False
        keep: dict[str, Any] = dict(_same_encryption(current))
        tags = self.tags(key) if current.tag_count else {}
        if tags:
            keep["Tagging"] = urlencode(tags)
        try:
            upload_id = self._s3.create_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                ContentType=content_type,
                ChecksumAlgorithm="SHA256",
                Metadata={"renewed-at": str(int(time.time()))},
                **keep,
            )["UploadId"]
        except (ClientError, BotoCoreError) as e:
            raise storage_error(e, "create multipart copy") from e
        ranges = [
            (n + 1, start, min(start + part_bytes, size) - 1)
            for n, start in enumerate(range(0, size, part_bytes))
        ]

        def copy_part(spec: tuple[int, int, int]) -> dict:
            number, first, last = spec
            r = self._s3.upload_part_copy(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": self.bucket, "Key": key},
                CopySourceRange=f"bytes={first}-{last}",
            )
            result = r.get("CopyPartResult", {})
            part = {"PartNumber": number, "ETag": result["ETag"]}
            if result.get("ChecksumSHA256"):
                part["ChecksumSHA256"] = result["ChecksumSHA256"]
            return part

        try:
            with ThreadPoolExecutor(max(1, min(concurrency, len(ranges)))) as pool:
                parts = list(pool.map(copy_part, ranges))
            self._s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except ClientError as e:
            self.abort_multipart(key, upload_id)
            if is_not_found(e):
                return False
            raise storage_error(e, "multipart copy") from e
        except BotoCoreError as e:
            self.abort_multipart(key, upload_id)
            raise storage_error(e, "multipart copy") from e
        return True


def _same_encryption(current: ObjectInfo) -> dict[str, str]:
    """What a copy of `current` onto itself must ask for to keep its SSE-KMS key (a copy takes
    the bucket's default, SSE-S3, otherwise); nothing for an SSE-S3 object."""
    if current.sse == "aws:kms" and current.kms_key:
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": current.kms_key}
    return {}
