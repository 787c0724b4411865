"""One object: its HEAD (size, checksum, encryption, tag count), its tags, small reads and writes
of objects the control plane writes itself, and deletes.

The HEAD that verifies an uploaded reference and the GetObjectTagging are signed in-process
(signer.py) and sent over kept-alive connections (connections.py); any answer that path does
not settle goes to the client."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from botocore.exceptions import BotoCoreError, ClientError

from ._base import S3Base, upload_params
from .errors import error_code, head_denied, is_not_found, storage_error


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    sha256_b64: str | None
    content_type: str | None
    last_modified: float | None = None  # epoch seconds (HTTP date: whole seconds)
    # Server-side encryption as S3 answers it: AES256 or aws:kms (and the key's ARN).
    sse: str | None = None
    kms_key: str | None = None
    tag_count: int = 0
    crc64nvme_b64: str | None = None
    checksum_type: str | None = None  # FULL_OBJECT | COMPOSITE (HEAD with checksum mode)


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def sha256_b64_to_hex(b64_digest: str) -> str:
    return base64.b64decode(b64_digest).hex()


class ObjectAccess(S3Base):
    def head(self, key: str) -> ObjectInfo | None:
        """Size and stored checksum of an object, or None when it does not exist.

        Signed here and sent over a kept-alive connection (HeadConnections); what that path does
        not settle itself (an answer other than 200 with a length or 404, no answer at all) goes
        to the client, which tries again and maps the failure as it always has."""
        if self._presigner is not None and self._heads is not None:
            try:
                status, fields = self._heads.head(*self._presigner.head_request(self.bucket, key))
            except OSError:
                status, fields = 0, {}
            if status == 404:
                return None
            length = fields.get("content-length", "")
            if status == 200 and length.isdigit():
                return ObjectInfo(
                    size=int(length),
                    sha256_b64=fields.get("x-amz-checksum-sha256"),
                    content_type=fields.get("content-type"),
                    last_modified=_http_date(fields.get("last-modified")),
                    sse=fields.get("x-amz-server-side-encryption"),
                    kms_key=fields.get("x-amz-server-side-encryption-aws-kms-key-id"),
                    tag_count=_int(fields.get("x-amz-tagging-count")),
                    crc64nvme_b64=fields.get("x-amz-checksum-crc64nvme"),
                    checksum_type=fields.get("x-amz-checksum-type"),
                )
        return self._client_head(key)

    def _client_head(self, key: str) -> ObjectInfo | None:
        try:
            r = self._s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as e:
            if is_not_found(e):
                return None
            if error_code(e) in ("403", "AccessDenied", "Forbidden"):
                raise head_denied(key) from e
            raise storage_error(e, "head") from e
        except BotoCoreError as e:
            raise storage_error(e, "head") from e
        modified = r.get("LastModified")
        fields = r.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return ObjectInfo(
            size=int(r["ContentLength"]),
            sha256_b64=r.get("ChecksumSHA256"),
            content_type=r.get("ContentType"),
            last_modified=modified.timestamp() if modified is not None else None,
            sse=r.get("ServerSideEncryption"),
            kms_key=r.get("SSEKMSKeyId"),
            tag_count=_int(fields.get("x-amz-tagging-count")),
            crc64nvme_b64=r.get("ChecksumCRC64NVME"),
            checksum_type=r.get("ChecksumType"),
        )

    def tags(self, key: str) -> dict[str, str] | None:
        """The object's tags (GetObjectTagging), or None when it is gone. HEAD answers only how
        many tags an object has; the retention class needs their values.

        Signed here and sent over the HEAD's kept-alive connections, as head() is (~1 ms of CPU
        less than botocore's client, which a function that only verifies never creates); an
        answer that path does not settle goes to the client."""
        if self._presigner is not None and self._heads is not None:
            try:
                status, _, body = self._heads.get_small(
                    *self._presigner.tagging_request(self.bucket, key)
                )
            except OSError:
                status, body = 0, b""
            if status == 404:
                return None
            if status == 200:
                found = _tag_set(body)
                if found is not None:
                    return found
        try:
            r = self._s3.get_object_tagging(Bucket=self.bucket, Key=key)
        except ClientError as e:
            if is_not_found(e):
                return None
            raise storage_error(e, "get object tagging") from e
        except BotoCoreError as e:
            raise storage_error(e, "get object tagging") from e
        return {t["Key"]: t["Value"] for t in r.get("TagSet", [])}

    def put_small(
        self,
        key: str,
        body: bytes,
        content_type: str,
        policy_headers: dict[str, str] | None = None,
    ) -> None:
        """PutObject of a small body the control plane writes itself (an error of an
        `inline: never` namespace), with the namespace's tag and encryption (policy headers)."""
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType=content_type,
                **upload_params(policy_headers),
            )
        except (ClientError, BotoCoreError) as e:
            raise storage_error(e, "put object") from e

    def read_small(self, key: str) -> bytes | None:
        """GetObject of a small object the control plane wrote (put_small), or None when it is
        gone."""
        try:
            r = self._s3.get_object(Bucket=self.bucket, Key=key)
            return r["Body"].read()
        except ClientError as e:
            if is_not_found(e):
                return None
            raise storage_error(e, "get object") from e
        except BotoCoreError as e:
            raise storage_error(e, "get object") from e

    def delete_many(self, keys: list[str]) -> list[str]:
        """DeleteObjects (up to 1000 keys a call); the keys S3 could not delete. A key that is
        already gone counts as deleted, as S3 answers."""
        failed: list[str] = []
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            try:
                r = self._s3.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as e:
                raise storage_error(e, "delete objects") from e
            failed += [str(err.get("Key")) for err in r.get("Errors", [])]
        return failed


def _tag_set(body: bytes) -> dict[str, str] | None:
    """The tags of a GetObjectTagging answer (`<Tagging><TagSet><Tag><Key/><Value/>`), or None
    for a body that is not one."""
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    if root.tag.rpartition("}")[2] != "Tagging":
        return None
    tags: dict[str, str] = {}
    for element in root.iter():
        if element.tag.rpartition("}")[2] == "Tag":
            fields = {child.tag.rpartition("}")[2]: child.text or "" for child in element}
            tags[fields.get("Key", "")] = fields.get("Value", "")
    return tags
