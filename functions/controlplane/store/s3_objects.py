"""S3: presigned URLs, HEAD checks and the bucket's configuration. The only module calling S3.

URLs are signed locally by botocore (no network call); the client is created once per container.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from ..models.errors import ServiceUnavailable, UpstreamError


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    sha256_b64: str | None
    content_type: str | None


@dataclass(frozen=True)
class PresignedPut:
    url: str
    headers: dict[str, str]


def sha256_hex_to_b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def sha256_b64_to_hex(b64_digest: str) -> str:
    return base64.b64decode(b64_digest).hex()


@lru_cache(maxsize=4)
def cached_s3_client(region: str, endpoint_url: str | None):
    config = Config(
        signature_version="s3v4",
        # A local emulator speaks path style; AWS gets virtual-hosted URLs on the regional endpoint.
        s3={"addressing_style": "path" if endpoint_url else "virtual"},
        # Two tries: a request must end well inside API Gateway's 29 s even when S3 is down.
        retries={"mode": "standard", "max_attempts": 2},
        connect_timeout=2,
        read_timeout=5,
    )
    return boto3.client("s3", region_name=region, endpoint_url=endpoint_url, config=config)


def _storage_error(e: Exception, action: str) -> Exception:
    if isinstance(e, (EndpointConnectionError, BotoCoreError)) and not isinstance(e, ClientError):
        return ServiceUnavailable(f"object storage unreachable during {action}; retry shortly")
    code = e.response.get("Error", {}).get("Code", "") if isinstance(e, ClientError) else ""
    if code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"):
        return ServiceUnavailable(f"object storage busy during {action} ({code}); retry shortly")
    return UpstreamError(f"object storage refused {action}: {code or type(e).__name__}")


class S3Objects:
    def __init__(self, client: Any, bucket: str, presign_ttl_s: int):
        self._s3 = client
        self.bucket = bucket
        self._ttl = presign_ttl_s

    def presign_put(
        self, key: str, size: int, content_type: str, sha256_hex: str | None
    ) -> PresignedPut:
        """A PUT URL that signs content-length, content-type and (when given) the sha256 checksum,
        so S3 refuses a body of another size, type or digest."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "ContentLength": size,
            "ContentType": content_type,
        }
        headers = {"Content-Length": str(size), "Content-Type": content_type}
        if sha256_hex:
            b64 = sha256_hex_to_b64(sha256_hex)
            params["ChecksumSHA256"] = b64
            # Naming the algorithm makes S3 (and emulators) store the checksum for HEAD to return.
            params["ChecksumAlgorithm"] = "SHA256"
            headers["x-amz-checksum-sha256"] = b64
            headers["x-amz-sdk-checksum-algorithm"] = "SHA256"
        url = self._s3.generate_presigned_url(
            "put_object", Params=params, ExpiresIn=self._ttl, HttpMethod="PUT"
        )
        return PresignedPut(url=url, headers=headers)

    def presign_get(self, key: str) -> str:
        return self._s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=self._ttl,
            HttpMethod="GET",
        )

    def head(self, key: str) -> ObjectInfo | None:
        """Size and stored checksum of an object, or None when it does not exist."""
        try:
            r = self._s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise _storage_error(e, "head") from e
        except BotoCoreError as e:
            raise _storage_error(e, "head") from e
        return ObjectInfo(
            size=int(r["ContentLength"]),
            sha256_b64=r.get("ChecksumSHA256"),
            content_type=r.get("ContentType"),
        )

    # -- health checks: each returns (ok, detail) and never raises -----------------------

    def check_reachable(self) -> tuple[bool, str]:
        try:
            self._s3.head_bucket(Bucket=self.bucket)
            return True, f"bucket {self.bucket} reachable"
        except (ClientError, BotoCoreError) as e:
            return False, f"bucket {self.bucket} not reachable: {_brief(e)}"

    def check_region(self, expected_region: str) -> tuple[bool, str]:
        try:
            loc = self._s3.get_bucket_location(Bucket=self.bucket).get("LocationConstraint")
        except (ClientError, BotoCoreError) as e:
            return False, f"cannot read bucket region: {_brief(e)}"
        region = loc or "us-east-1"  # S3 reports us-east-1 as an empty constraint
        if region != expected_region:
            return False, f"bucket is in {region}, control plane configured for {expected_region}"
        return True, f"bucket in {region}"

    def check_encryption(self) -> tuple[bool, str]:
        try:
            rules = self._s3.get_bucket_encryption(Bucket=self.bucket)[
                "ServerSideEncryptionConfiguration"
            ]["Rules"]
        except (ClientError, BotoCoreError) as e:
            return False, f"cannot read default encryption: {_brief(e)}"
        algos = [r.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules]
        if "AES256" in algos:
            return True, "default encryption AES256 (SSE-S3)"
        return False, f"default encryption is {algos or 'none'}, expected AES256"

    def check_lifecycle(self, prefix: str, max_days: int) -> tuple[bool, str]:
        try:
            rules = self._s3.get_bucket_lifecycle_configuration(Bucket=self.bucket)["Rules"]
        except (ClientError, BotoCoreError) as e:
            return False, f"no lifecycle configuration: {_brief(e)}"
        for rule in rules:
            rule_prefix = rule.get("Filter", {}).get("Prefix", rule.get("Prefix"))
            days = rule.get("Expiration", {}).get("Days")
            if (
                rule.get("Status") == "Enabled"
                and rule_prefix == prefix
                and days
                and days <= max_days
            ):
                return True, f"lifecycle expires {prefix} after {days} days"
        return False, f"no enabled lifecycle rule expiring {prefix} within {max_days} days"


def _brief(e: Exception) -> str:
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', 'error')}"
    return type(e).__name__
