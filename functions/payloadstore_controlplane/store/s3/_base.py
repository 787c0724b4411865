"""What every part of `S3Objects` shares: the client, the bucket, the presigner and the
kept-alive connections of the signed HEAD, and the URLs' lifetime."""

from __future__ import annotations

from typing import Any

from .connections import HeadConnections, direct_head_allowed
from .signer import SigV4Presigner

# Signed upload headers (models/policy.py: upload_headers) -> botocore's parameter names.
_HEADER_PARAMS = {
    "x-amz-tagging": "Tagging",
    "x-amz-server-side-encryption": "ServerSideEncryption",
    "x-amz-server-side-encryption-aws-kms-key-id": "SSEKMSKeyId",
}


def upload_params(headers: dict[str, str] | None) -> dict[str, str]:
    """The botocore parameters of signed upload headers (tagging, SSE)."""
    return {
        _HEADER_PARAMS[k.lower()]: v
        for k, v in (headers or {}).items()
        if k.lower() in _HEADER_PARAMS
    }


class S3Base:
    def __init__(
        self,
        client: Any,
        bucket: str,
        presign_ttl_s: int,
        presigner: SigV4Presigner | None = None,
    ):
        self._s3 = client
        self.bucket = bucket
        self._ttl = presign_ttl_s
        # Without a presigner (or for a bucket name only path style can carry) the client signs.
        self._presigner = presigner if presigner and presigner.usable_for(bucket) else None
        self._heads = (
            HeadConnections() if self._presigner is not None and direct_head_allowed() else None
        )
