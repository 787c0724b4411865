"""S3: presigned URLs (PUT, UploadPart, GET), HEAD checks, multipart uploads (create, list
parts, complete, abort), CopyObject and the bucket's configuration. The only module calling S3.

Presigned URLs are signed here, in-process, with SigV4 query signing (the same bytes botocore's
`generate_presigned_url` produces; tests/unit/test_presign_signer.py holds the two equal): no
network call, no botocore client, ~5x faster per URL than the client path and nothing to import
at cold start. The HEAD that verifies an uploaded reference is signed here too (SigV4 header
signing, tests/unit/test_s3_head.py checks it with botocore's signer) and sent over a kept-alive
connection; any answer it does not settle goes to the client. The botocore client (that fallback,
the multipart calls, CopyObject, health checks) is created on first use, once per container; boto3
is not needed at all.
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from ..models.errors import ServiceUnavailable, UpstreamError
from ..runtime.once import built_once
from . import sigv4
from .records import sha256_hex_to_b64


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


@dataclass(frozen=True)
class PresignedPut:
    url: str
    headers: dict[str, str]


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


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


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def sha256_b64_to_hex(b64_digest: str) -> str:
    return base64.b64decode(b64_digest).hex()


@built_once(maxsize=16)
def cached_s3_client(
    region: str,
    endpoint_url: str | None,
    credentials: sigv4.Credentials | None = None,
    read_timeout_s: int = 5,
):
    """botocore's S3 client (no boto3: its resource layer and s3transfer cost ~0.1 s to import
    and nothing here uses them). `credentials`: the invocation's own (sigv4.invocation_credentials,
    the local stack's per-function keys); None, as in Lambda, resolves them the usual way."""
    import botocore.session
    from botocore.config import Config

    config = Config(
        signature_version="s3v4",
        # A local emulator speaks path style; AWS gets virtual-hosted URLs on the regional endpoint.
        s3={"addressing_style": "path" if endpoint_url else "virtual"},
        # Two tries: a request must end well inside API Gateway's 29 s even when S3 is down.
        retries={"mode": "standard", "max_attempts": 2},
        connect_timeout=2,
        read_timeout=read_timeout_s,
    )
    keys: dict[str, Any] = {}
    if credentials is not None:
        keys = {
            "aws_access_key_id": credentials[0],
            "aws_secret_access_key": credentials[1],
            "aws_session_token": credentials[2],
        }
    return botocore.session.get_session().create_client(
        "s3", region_name=region, endpoint_url=endpoint_url, config=config, **keys
    )


class LazyS3Client:
    """Creates the S3 client on first attribute access: a function that only presigns (the
    payloads function) never pays for the client (~0.1-0.2 s: the S3 service model)."""

    def __init__(self, region: str, endpoint_url: str | None, read_timeout_s: int = 5):
        self.region = region
        self.endpoint_url = endpoint_url
        # 5 s on a request's path; the renewer's copies take longer (COPY_READ_TIMEOUT_S).
        self.read_timeout_s = read_timeout_s

    def __getattr__(self, name: str):
        client = cached_s3_client(
            self.region, self.endpoint_url, sigv4.invocation_credentials(), self.read_timeout_s
        )
        return getattr(client, name)


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


def direct_head_allowed(environ: dict[str, str] | None = None) -> bool:
    """Whether the HEAD may go out on a socket of its own: not behind a proxy (botocore honours
    the proxy variables), not on FIPS or dual-stack endpoints (botocore picks those hosts), and
    not opted out with PAYLOADSTORE_DIRECT_AWS=0 (as aws_http decides for its calls)."""
    from .aws_http import direct_calls_allowed

    return direct_calls_allowed(environ)


def _has_input(sock: Any) -> bool:
    """Whether an idle connection has something to read: the server closed or reset it (or
    sent what no request asked for). Either way it is not reused."""
    import select

    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class HeadConnections:
    """HEAD requests over kept-alive connections, one idle list per endpoint.

    A HEAD answer has no body, so the exchange is a request written by hand and a header block
    read back: no botocore request pipeline (~2 ms of CPU per HEAD through the client: events,
    the service model, the parser) and no new connection per call where the server keeps them.
    A connection is reused only after a complete answer that did not ask to close it, within
    MAX_IDLE_S of its last answer (S3 drops idle connections after ~20 s, and a frozen Lambda
    sandbox may hold one for minutes) and when nothing is waiting on it (a close or reset from
    the server); a reused one that fails before answering is replaced at once."""

    MAX_IDLE = 8
    MAX_IDLE_S = 10.0
    MAX_HEADER_BYTES = 64 << 10

    def __init__(self, connect_timeout_s: float = 2.0, read_timeout_s: float = 5.0):
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: dict[tuple[str, str], list[tuple[Any, float]]] = {}

    def head(
        self, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str]]:
        """(status, header fields with lower-case names); OSError when no answer came."""
        status, fields, _ = self.exchange("HEAD", scheme, netloc, path, headers)
        return status, fields

    def get_small(
        self, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """A GET whose answer is a small body with a Content-Length (GetObjectTagging's XML):
        (status, header fields, body); OSError when no such answer came."""
        return self.exchange("GET", scheme, netloc, path, headers)

    def exchange(
        self, method: str, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        request = (
            f"{method} {path} HTTP/1.1\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + "\r\n"
        ).encode("latin-1")
        idle = self._idle.setdefault((scheme, netloc), [])
        while True:
            try:
                sock, since = idle.pop()
                reused = True
            except IndexError:
                sock, reused = self._connect(scheme, netloc), False
            if reused and (time.monotonic() - since > self.MAX_IDLE_S or _has_input(sock)):
                sock.close()
                continue
            try:
                sock.sendall(request)
                status, fields, keep, body = self._read_answer(sock, with_body=method != "HEAD")
            except OSError:
                sock.close()
                if reused:
                    continue
                raise
            if keep and len(idle) < self.MAX_IDLE:
                idle.append((sock, time.monotonic()))
            else:
                sock.close()
            return status, fields, body

    def _connect(self, scheme: str, netloc: str):
        import socket

        from .aws_http import _host_port, _tls_context

        host, port = _host_port(netloc, 443 if scheme == "https" else 80)
        sock = socket.create_connection((host, port), timeout=self.connect_timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.read_timeout_s)
            if scheme == "https":
                context = _tls_context(os.environ.get("AWS_CA_BUNDLE") or None)
                sock = context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return sock

    def _read_answer(
        self, sock: Any, with_body: bool = False
    ) -> tuple[int, dict[str, str], bool, bytes]:
        received = b""
        while (end := received.find(b"\r\n\r\n")) < 0:
            chunk = sock.recv(16384)
            if not chunk:
                raise ConnectionResetError("connection closed before the answer's headers")
            received += chunk
            if len(received) > self.MAX_HEADER_BYTES:
                raise OSError("answer headers too large")
        lines = received[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise OSError("malformed HTTP answer")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        body = b""
        rest = received[end + 4 :]
        if with_body:
            length = fields.get("content-length", "")
            if not length.isdigit() or int(length) > self.MAX_HEADER_BYTES:
                # Chunked or large: not an answer this reader takes (the caller falls back).
                raise OSError("answer without a small content-length")
            while len(rest) < int(length):
                chunk = sock.recv(16384)
                if not chunk:
                    raise ConnectionResetError("connection closed before the answer's body")
                rest += chunk
            body, rest = rest[: int(length)], rest[int(length) :]
        # Bytes past the answer: not an answer to this request; the connection is not reused.
        keep = (
            parts[0] == "HTTP/1.1" and fields.get("connection", "").lower() != "close" and not rest
        )
        return int(parts[1]), fields, keep, body


def _storage_error(e: Exception, action: str) -> Exception:
    if isinstance(e, (EndpointConnectionError, BotoCoreError)) and not isinstance(e, ClientError):
        return ServiceUnavailable(f"object storage unreachable during {action}; retry shortly")
    code = e.response.get("Error", {}).get("Code", "") if isinstance(e, ClientError) else ""
    if code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"):
        return ServiceUnavailable(f"object storage busy during {action} ({code}); retry shortly")
    return UpstreamError(f"object storage refused {action}: {code or type(e).__name__}")


def _head_denied(key: str) -> UpstreamError:
    """A HEAD answered 403: a grant is missing, never a client's fault. Without s3:ListBucket S3
    answers 403 for a key that is not there, so this names both grants it takes (see
    grants.py); with them, a missing key answers 404 and the caller says `not_uploaded`. (A 403
    on the signed fast path goes to the client like any unsettled answer: a signing fault of
    ours would be a 403 too, and the client's answer decides.)"""
    return UpstreamError(
        "object storage denied HEAD of the reference (403 AccessDenied): this function's role "
        "needs s3:GetObject on payloads/* and s3:ListBucket on the bucket",
        key=key,
    )


class S3Objects:
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

    @classmethod
    def for_region(
        cls, region: str, endpoint_url: str | None, bucket: str, presign_ttl_s: int
    ) -> S3Objects:
        """What a function uses: local signing, and a client created on its first S3 call."""
        return cls(
            LazyS3Client(region, endpoint_url),
            bucket,
            presign_ttl_s,
            SigV4Presigner(region, endpoint_url),
        )

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

    # -- multipart ------------------------------------------------------------------------

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
            raise _storage_error(e, "create multipart upload") from e
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
                if e.response.get("Error", {}).get("Code") == "NoSuchUpload":
                    return None
                raise _storage_error(e, "list parts") from e
            except BotoCoreError as e:
                raise _storage_error(e, "list parts") from e
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
            code = e.response.get("Error", {}).get("Code") or ""
            if code == "NoSuchUpload":
                return False
            if code in _COMPLETION_REFUSALS:
                raise CompletionRefused(code) from e
            raise _storage_error(e, "complete multipart upload") from e
        except BotoCoreError as e:
            raise _storage_error(e, "complete multipart upload") from e
        return True

    def abort_multipart(self, key: str, upload_id: str) -> str | None:
        """AbortMultipartUpload, best effort (the bucket's lifecycle aborts what remains): None,
        or why it failed."""
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as e:
            return _brief(e)
        return None

    def presign_get(self, key: str) -> str:
        if self._presigner is not None:
            return self._presigner.url("GET", self.bucket, key, self._ttl)
        return self._s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=self._ttl,
            HttpMethod="GET",
        )

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
            code = e.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _storage_error(e, "copy") from e
        except BotoCoreError as e:
            raise _storage_error(e, "copy") from e
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
            raise _storage_error(e, "create multipart copy") from e
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
            code = e.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _storage_error(e, "multipart copy") from e
        except BotoCoreError as e:
            self.abort_multipart(key, upload_id)
            raise _storage_error(e, "multipart copy") from e
        return True

    def _client_head(self, key: str) -> ObjectInfo | None:
        try:
            r = self._s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            if code in ("403", "AccessDenied", "Forbidden"):
                raise _head_denied(key) from e
            raise _storage_error(e, "head") from e
        except BotoCoreError as e:
            raise _storage_error(e, "head") from e
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
            code = e.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise _storage_error(e, "get object tagging") from e
        except BotoCoreError as e:
            raise _storage_error(e, "get object tagging") from e
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
            raise _storage_error(e, "put object") from e

    def read_small(self, key: str) -> bytes | None:
        """GetObject of a small object the control plane wrote (put_small), or None when it is
        gone."""
        try:
            r = self._s3.get_object(Bucket=self.bucket, Key=key)
            return r["Body"].read()
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise _storage_error(e, "get object") from e
        except BotoCoreError as e:
            raise _storage_error(e, "get object") from e

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
                raise _storage_error(e, "delete objects") from e
            failed += [str(err.get("Key")) for err in r.get("Errors", [])]
        return failed

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
        missing = retention_rules_missing(rules)
        if missing:
            return False, (
                "no enabled lifecycle rule (by the retention tag) for retention class "
                + ", ".join(missing)
            )
        for rule in rules:
            rule_prefix = rule.get("Filter", {}).get("Prefix", rule.get("Prefix"))
            days = rule.get("Expiration", {}).get("Days")
            if (
                rule.get("Status") == "Enabled"
                and rule_prefix == prefix
                and days
                and days <= max_days
            ):
                return True, (
                    f"lifecycle expires each retention class by its tag, and {prefix} after "
                    f"{days} days"
                )
        return False, f"no enabled lifecycle rule expiring {prefix} within {max_days} days"


def retention_rules_missing(rules: list[dict]) -> list[str]:
    """The retention classes (models/policy.py) without an enabled lifecycle rule expiring
    objects tagged with their class within its days."""
    from ..models.policy import RETENTION_DAYS, RETENTION_TAG

    found: dict[str, int] = {}
    for rule in rules:
        if rule.get("Status") != "Enabled":
            continue
        tag = rule.get("Filter", {}).get("Tag") or {}
        days = rule.get("Expiration", {}).get("Days")
        if tag.get("Key") == RETENTION_TAG and days:
            found[tag.get("Value", "")] = int(days)
    return [
        retention
        for retention, days in RETENTION_DAYS.items()
        if retention not in found or found[retention] > days
    ]


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


def _brief(e: Exception) -> str:
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', 'error')}"
    return type(e).__name__


def _same_encryption(current: ObjectInfo) -> dict[str, str]:
    """What a copy of `current` onto itself must ask for to keep its SSE-KMS key (a copy takes
    the bucket's default, SSE-S3, otherwise); nothing for an SSE-S3 object."""
    if current.sse == "aws:kms" and current.kms_key:
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": current.kms_key}
    return {}
