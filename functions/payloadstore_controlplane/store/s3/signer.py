"""SigV4 signing for S3, in-process: presigned URLs (query signing, the same bytes botocore's
`generate_presigned_url` produces; tests/unit/test_presign_signer.py holds the two equal) and
the HEAD and GetObjectTagging signed in the Authorization header (tests/unit/test_s3_head.py
checks them with botocore's signer). No network call, no botocore client, ~5x faster per URL
than the client path and nothing to import at cold start."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from ...models.errors import ServiceUnavailable
from .. import sigv4

# Bucket names a virtual-hosted https URL can carry (no dots: they would break the certificate).
_VIRTUAL_HOST_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_UNRESERVED = "-_.~"


class SigV4Presigner:
    """SigV4 query-string presigning for S3 (AWS4-HMAC-SHA256, UNSIGNED-PAYLOAD), as botocore's
    S3SigV4QueryAuth does it. Credentials come from the environment (Lambda puts the role's
    keys there), else from botocore's provider chain; the daily signing key is cached."""

    def __init__(self, region: str, endpoint_url: str | None, credentials: Any = None):
        self.region = region
        self.endpoint_url = endpoint_url.rstrip("/") if endpoint_url else None
        self._credentials = credentials

    def usable_for(self, bucket: str) -> bool:
        if self.endpoint_url:
            return True
        return bool(_VIRTUAL_HOST_BUCKET.match(bucket) and sigv4.STANDARD_REGION.match(self.region))

    def _current_credentials(self) -> tuple[str, str, str | None]:
        if self._credentials is not None:
            c = self._credentials.get_frozen_credentials()
            return c.access_key, c.secret_key, c.token
        found = sigv4.environment_credentials()
        if found is not None:
            return found
        import botocore.session

        self._credentials = botocore.session.get_session().get_credentials()
        if self._credentials is None:
            raise ServiceUnavailable("no AWS credentials to sign with")
        return self._current_credentials()

    def url(
        self,
        method: str,
        bucket: str,
        key: str,
        expires_s: int,
        headers: dict[str, str] | None = None,
        now: float | None = None,
        query: dict[str, str] | None = None,
    ) -> str:
        """A presigned URL for `method` on bucket/key that also signs `headers` (the uploader
        must send exactly those) and the sub-resource `query` (partNumber, uploadId)."""
        access_key, secret, token = self._current_credentials()
        scheme, netloc, path = self.target(bucket, key)
        stamp = sigv4.amz_date(now)
        block, signed_headers = sigv4.canonical_headers({"host": netloc, **(headers or {})})
        params = [
            ("X-Amz-Algorithm", sigv4.ALGORITHM),
            ("X-Amz-Credential", f"{access_key}/{sigv4.scope(stamp, self.region, 's3')}"),
            ("X-Amz-Date", stamp),
            ("X-Amz-Expires", str(expires_s)),
            ("X-Amz-SignedHeaders", signed_headers),
        ]
        if token:
            params.append(("X-Amz-Security-Token", token))
        params = list((query or {}).items()) + params
        encoded = [(quote(k, safe=_UNRESERVED), quote(v, safe=_UNRESERVED)) for k, v in params]
        query_string = "&".join(f"{k}={v}" for k, v in encoded)
        canonical_query = "&".join(f"{k}={v}" for k, v in sorted(encoded))
        canonical_request = (
            f"{method}\n{path}\n{canonical_query}\n{block}\n{signed_headers}\nUNSIGNED-PAYLOAD"
        )
        signature = sigv4.signature(secret, stamp, self.region, "s3", canonical_request)
        return f"{scheme}://{netloc}{path}?{query_string}&X-Amz-Signature={signature}"

    def target(self, bucket: str, key: str) -> tuple[str, str, str]:
        """(scheme, host as signed, path) of bucket/key: path style on a configured endpoint,
        virtual-hosted on AWS (as the client's addressing_style decides)."""
        path_key = quote(key, safe="/~")
        if self.endpoint_url:
            scheme, _, netloc = self.endpoint_url.partition("://")
            netloc, _, prefix = netloc.partition("/")
            default_port = {"http": ":80", "https": ":443"}.get(scheme)
            if default_port and netloc.endswith(default_port):
                netloc = netloc[: -len(default_port)]
            return scheme, netloc, f"/{prefix + '/' if prefix else ''}{bucket}/{path_key}"
        # botocore keeps the global endpoint for us-east-1.
        host = "s3" if self.region == "us-east-1" else f"s3.{self.region}"
        return "https", f"{bucket}.{host}.amazonaws.com", f"/{path_key}"

    def head_request(
        self, bucket: str, key: str, now: float | None = None
    ) -> tuple[str, str, str, dict[str, str]]:
        """(scheme, host, path, headers) of a HeadObject with checksum mode, SigV4-signed in the
        Authorization header as botocore's S3SigV4Auth signs it (every header sent is signed;
        the payload hash is the empty body's)."""
        return self._signed_bodiless_request(
            "HEAD", bucket, key, now, extra_headers={"x-amz-checksum-mode": "ENABLED"}
        )

    def tagging_request(
        self, bucket: str, key: str, now: float | None = None
    ) -> tuple[str, str, str, dict[str, str]]:
        """(scheme, host, path with `?tagging`, headers) of a GetObjectTagging, SigV4-signed in
        the Authorization header as head_request is."""
        scheme, netloc, path, headers = self._signed_bodiless_request(
            "GET", bucket, key, now, query="tagging="
        )
        return scheme, netloc, f"{path}?tagging", headers

    def _signed_bodiless_request(
        self,
        method: str,
        bucket: str,
        key: str,
        now: float | None,
        *,
        extra_headers: dict[str, str] | None = None,
        query: str = "",
    ) -> tuple[str, str, str, dict[str, str]]:
        """(scheme, host, path, headers) of an empty-bodied request on one object, every header
        sent signed into the Authorization header as botocore's S3SigV4Auth signs it."""
        access_key, secret, token = self._current_credentials()
        scheme, netloc, path = self.target(bucket, key)
        stamp = sigv4.amz_date(now)
        headers = {
            "host": netloc,
            **(extra_headers or {}),
            "x-amz-content-sha256": sigv4.EMPTY_SHA256,
            "x-amz-date": stamp,
        }
        if token:
            headers["x-amz-security-token"] = token
        headers["authorization"] = sigv4.authorization(
            method,
            path,
            headers,
            sigv4.EMPTY_SHA256,
            credentials=(access_key, secret),
            stamp=stamp,
            region=self.region,
            service="s3",
            query=query,
        )
        return scheme, netloc, path, headers
