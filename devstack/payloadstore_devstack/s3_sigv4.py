"""The emulator's front door: presigned URLs checked as S3 checks them (the SigV4 query signature
recomputed by botocore's signer over the request as received, the expiry, the auth parameters),
a request with no signature refused, a PUT's body checked against its checksum, then the
signer's grants (s3_grants)."""

from __future__ import annotations

import hmac
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

from payloadstore_devstack.s3_checksums import verify_put_body
from payloadstore_devstack.s3_credentials import known_credentials
from payloadstore_devstack.s3_grants import as_granted, grants_in_force
from payloadstore_devstack.s3_kms import kms_keys_in_force
from payloadstore_devstack.s3_wsgi import raw_target, s3_error, wsgi_header

MAX_EXPIRES_S = 7 * 24 * 3600
AUTH_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders")


def expected_signature(
    *,
    method: str,
    host: str,
    path: str,
    query_without_signature: str,
    headers: dict[str, str],
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    timestamp: str,
) -> str:
    """The SigV4 query signature S3 computes for this request, by botocore's own signer."""
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signer = S3SigV4QueryAuth(Credentials(access_key, secret_key), service, region)
    url = f"http://{host}{path}" + (
        f"?{query_without_signature}" if query_without_signature else ""
    )
    request = AWSRequest(method=method, url=url, headers=headers)
    request.context["timestamp"] = timestamp
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def _header_credential(environ: dict) -> tuple[str, str] | None:
    """(access key, service) of a request signed in the Authorization header."""
    m = re.search(
        r"Credential=([^/,\s]+)/[^/]+/[^/]+/([^/]+)/", environ.get("HTTP_AUTHORIZATION", "")
    )
    return (m.group(1), m.group(2)) if m else None


class PresignedUrlRules:
    def __init__(
        self,
        app,
        clock=None,
        credentials: dict[str, str] | None = None,
        grants=None,
        kms_keys: frozenset[str] | None = None,
    ):
        self.app = app
        self.clock = clock or (lambda: datetime.now(UTC))
        self.credentials = credentials if credentials is not None else known_credentials()
        self.grants = grants if grants is not None else grants_in_force()
        self.kms_keys = kms_keys if kms_keys is not None else kms_keys_in_force()

    def __call__(self, environ, start_response):
        path, raw_query = raw_target(environ)
        query = parse_qs(raw_query, keep_blank_values=True)
        if "X-Amz-Signature" not in query:
            if "X-Amz-Credential" in query:
                return s3_error(
                    start_response,
                    "400 Bad Request",
                    "AuthorizationQueryParametersError",
                    "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                    "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                    "and X-Amz-Expires parameters.",
                )
            if not environ.get("HTTP_AUTHORIZATION"):
                return s3_error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
            refused = verify_put_body(environ)
            if refused is not None:
                return s3_error(start_response, *refused)
            signed = _header_credential(environ)
            if signed is not None and signed[1] == "s3":
                return self._as_granted(signed[0], query, environ, start_response)
            return self.app(environ, start_response)
        refused = self._verify(environ, path, raw_query, query)
        if refused is not None:
            status, code, message = refused
            return s3_error(start_response, status, code, message)
        refused = verify_put_body(environ)
        if refused is not None:
            return s3_error(start_response, *refused)
        signer = query["X-Amz-Credential"][0].split("/", 1)[0]
        return self._as_granted(signer, query, environ, start_response)

    def _as_granted(self, access_key: str, query: dict, environ, start_response):
        return as_granted(
            self.app, self.grants, self.kms_keys, access_key, query, environ, start_response
        )

    def _verify(self, environ, path: str, raw_query: str, query: dict) -> tuple | None:  # noqa: C901 - S3's checks of a presigned PUT, in the order S3 applies them
        """(status, code, message) as S3 would refuse this presigned request, or None."""
        try:
            for name in AUTH_PARAMS + ("X-Amz-Expires",):
                if not query.get(name, [""])[0]:
                    raise KeyError(name)
            if query["X-Amz-Algorithm"][0] != "AWS4-HMAC-SHA256":
                raise ValueError("X-Amz-Algorithm only supports AWS4-HMAC-SHA256")
            access_key, date, region, service, terminal = query["X-Amz-Credential"][0].split("/")
            timestamp = query["X-Amz-Date"][0]
            signed_at = datetime.strptime(timestamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            expires_s = int(query["X-Amz-Expires"][0])
            if terminal != "aws4_request" or date != timestamp[:8]:
                raise ValueError("the credential scope does not match the date")
        except (KeyError, ValueError) as e:
            return (
                "400 Bad Request",
                "AuthorizationQueryParametersError",
                f"Error parsing the X-Amz-Credential, X-Amz-Date or X-Amz-Expires parameter: {e}",
            )
        if not 0 < expires_s <= MAX_EXPIRES_S:
            return (
                "400 Bad Request",
                "AuthorizationQueryParametersError",
                "X-Amz-Expires must be less than a week (in seconds) that is; 604800",
            )
        secret = self.credentials.get(access_key)
        if secret is None:
            return (
                "403 Forbidden",
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        signed_names = [h for h in query["X-Amz-SignedHeaders"][0].lower().split(";") if h]
        headers = {}
        for name in signed_names:
            value = wsgi_header(environ, name)
            if value is not None:
                headers[name] = value
        if "host" not in signed_names or set(headers) != set(signed_names):
            # A signed header the request does not carry: S3 computes another signature.
            return self._mismatch()
        unsigned = "&".join(
            pair for pair in raw_query.split("&") if pair.partition("=")[0] != "X-Amz-Signature"
        )
        expected = expected_signature(
            method=environ.get("REQUEST_METHOD", "GET"),
            host=headers["host"],
            path=path,
            query_without_signature=unsigned,
            headers=headers,
            access_key=access_key,
            secret_key=secret,
            region=region,
            service=service,
            timestamp=timestamp,
        )
        if not hmac.compare_digest(expected, query["X-Amz-Signature"][0]):
            return self._mismatch()
        if self.clock() > signed_at + timedelta(seconds=expires_s):
            return ("403 Forbidden", "AccessDenied", "Request has expired")
        return None

    @staticmethod
    def _mismatch() -> tuple[str, str, str]:
        return (
            "403 Forbidden",
            "SignatureDoesNotMatch",
            (
                "The request signature we calculated does not match the signature you provided. "
                "Check your key and signing method."
            ),
        )
