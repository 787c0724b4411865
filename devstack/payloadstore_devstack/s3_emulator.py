"""moto's S3/SSM server, as strict about presigned URLs as S3 is.

moto checks no signature at all: it accepts a presigned URL whose key, signed headers or
`X-Amz-Expires` were edited, one past its expiry, a request with no signature, and stores a body
whose sha256 differs from the signed `x-amz-checksum-sha256`. Real S3 refuses each. Clients of
the local stack (the SDK's uploads and re-presign on expiry, the CP's checksum checks) must meet
S3's answers here, or the local stack could not show a signing bug. This WSGI middleware, in
front of moto, answers like S3:

- a presigned request (`X-Amz-Signature` in the query) is verified by recomputing its SigV4
  query signature with botocore's own signer over the request as received (method, path as sent,
  query without the signature, the signed headers' values, host): a mismatch is 403
  `SignatureDoesNotMatch`, an access key the emulator does not know 403 `InvalidAccessKeyId`,
  incomplete auth parameters 400 `AuthorizationQueryParametersError`;
- past `X-Amz-Date + X-Amz-Expires`: 403 `AccessDenied` "Request has expired";
- no signature at all (no `Authorization` header, no `X-Amz-Signature`): 403 `AccessDenied`
  (the bucket blocks public access, as the deployed one does);
- a PUT body whose sha256 or CRC64NVME differs from the checksum it carries: 400 `BadDigest`
  (checked for header-signed PUTs too; the checksum is kept for HEAD, as S3 keeps it).

It also enforces the template's S3 grants (payloadstore_controlplane/grants.py, the table the
CDK roles are written from). Each function signs with local keys of its own
(`function_credentials(group)`: the local gateway and the integration tests run each invocation
under them), and a request signed with a function's key, in the `Authorization` header or as the
signer of a presigned URL, may do what that function's role may do:

- an action the function lacks (PutObject by `jobs`, any object outside `payloads/`, ...) is 403
  `AccessDenied`;
- a GET or HEAD of a missing key is 403 `AccessDenied`, not 404, when the function lacks
  s3:ListBucket on the bucket, as S3 answers.

- an upload that signs an x-amz-tagging header (a namespace policy's retention tag) needs
  s3:PutObjectTagging as well, as S3 judges PutObject with tags;
- KMS, by the key grants of grants.py (`KMS_ACTIONS`, on the keys listed in
  PAYLOADSTORE_KMS_KEYS, default the local stack's key `LOCAL_KMS_KEY_ARN`): an SSE-KMS upload
  (PutObject, CreateMultipartUpload, CopyObject, and UploadPart/CompleteMultipartUpload of such
  an upload) signed by a function without kms:GenerateDataKey on the key, or a GET of an
  SSE-KMS object signed by one without kms:Decrypt, is 403 AccessDenied, as S3 answers when
  the signer's role may not use the key. A key outside `payloads/` and `blobs/` is refused too
  (the key policy's encryption-context condition).

Any other key (`local`, the operator's: the stack's setup, the tests' own checks) is not limited.
PAYLOADSTORE_S3_GRANTS (grants.table_to_json) replaces the table, for tests that show what a
missing grant does. Only path-style S3 requests are judged (the local stack's); every bucket
stands for the payload bucket.

Multipart uploads follow S3's checksum rules, which moto leaves out (`MultipartChecksums`, behind
the checks above):

- an UploadPart whose body's sha256 differs from its `x-amz-checksum-sha256` is 400 `BadDigest`
  (presigned or header-signed); a part without one, to an upload created with
  `ChecksumAlgorithm=SHA256`, is 400 `InvalidRequest` (checksum type mismatch);
- ListParts answers each part's `ChecksumSHA256`;
- CompleteMultipartUpload of a SHA256 upload must name each part's checksum as it was uploaded:
  a missing or different one is 400 `InvalidPart`; its answer carries the object's composite
  `ChecksumSHA256` ("<base64 of sha256 of the parts' binary sha256s>-<part count>"), which
  HeadObject with checksum mode answers too (moto computes that one);
- CRC64NVME uploads are FULL_OBJECT (COMPOSITE with CRC64NVME, or FULL_OBJECT with SHA256, is
  400 `InvalidRequest` at CreateMultipartUpload, as S3 answers); a part may carry its CRC (400
  `BadDigest` when it differs) or none; CompleteMultipartUpload's `x-amz-checksum-crc64nvme` is
  checked against the parts' CRCs combined (400 `BadDigest`: a part swapped for other bytes of
  the same length is caught), and HeadObject answers the whole object's CRC, FULL_OBJECT;
- a completion moto takes longer than a second to assemble answers as S3 does: 200 at once, a
  space every second to keep the connection alive, then the result (or an `<Error>`, which
  botocore reads as the error); requests on that key or upload wait until the object is stored,
  as S3's completion is atomic (moto drops the upload before it stores the object).

A ranged GET (`Range: bytes=a-b`) of an object is answered from moto's stored bytes at that
offset: moto itself reads the whole object for every range, which made a parallel ranged
download of 1 GiB cost ~64 GiB of copying.

UploadPartCopy into an upload created with `ChecksumAlgorithm=SHA256` answers the copied range's
`ChecksumSHA256` in its CopyPartResult, as S3 does, and the completion takes it.

The bucket's lifecycle Expiration rules are applied (`LifecycleExpiry`: moto stores rules and
never acts on them): an object is gone once its rule's days have passed since its last write,
rounded up to the next midnight, and PAYLOADSTORE_S3_DAY_S makes a day that many seconds, so a
test can watch a blob expire, or outlive the jobs that reference it through its renewals.

Requests signed in the `Authorization` header otherwise go to moto as they are (their signature
is not checked). The log line of each request carries its path only: query strings (signatures,
credentials) never reach the log.

Run: python -m payloadstore_devstack.s3_emulator -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import io
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, quote
from xml.etree import ElementTree

from payloadstore_controlplane.models.policy import LOCAL_KMS_KEY_ARN

# The credentials the local stack hands its handlers (services.local_aws_env); more pairs may be
# given as PAYLOADSTORE_S3_CREDENTIALS="KEYID:SECRET,KEYID2:SECRET2".
LOCAL_ACCESS_KEY_ID = "local"
LOCAL_SECRET_ACCESS_KEY = "local-secret"
MAX_EXPIRES_S = 7 * 24 * 3600
AUTH_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders")
# The local stack's own KMS key (kms_key `stack`, models/policy.py LOCAL_KMS_KEY_ARN): moto stores
# the ARN it is given and checks no key; the emulator's KMS grants judge who may use it
# (PAYLOADSTORE_KMS_KEYS lists the keys the functions are granted on, comma-separated; default
# that one).
KMS_KEYS_ENV = "PAYLOADSTORE_KMS_KEYS"
# Each function's local keys: `local-<group>` / `local-<group>-secret`.
FUNCTION_KEY_PREFIX = "local-"
GRANTS_ENV = "PAYLOADSTORE_S3_GRANTS"
# (algorithm, base64 checksum) of a PUT's body once it was checked: not computed a second time.
VERIFIED_CHECKSUM = "payloadstore.verified_checksum"


def function_groups() -> tuple[str, ...]:
    from payloadstore_controlplane.routes import FUNCTIONS

    return tuple(FUNCTIONS)


def function_credentials(group: str) -> tuple[str, str, None]:
    """The local keys function `group` signs with (its role's, in the local stack)."""
    return f"{FUNCTION_KEY_PREFIX}{group}", f"{FUNCTION_KEY_PREFIX}{group}-secret", None


def function_of(access_key: str) -> str | None:
    """The function whose local key this is, or None (the operator's, or a key of a test)."""
    if not access_key.startswith(FUNCTION_KEY_PREFIX):
        return None
    group = access_key[len(FUNCTION_KEY_PREFIX) :]
    return group if group in function_groups() else None


def grants_in_force(environ: dict[str, str] | None = None):
    """The grant table this emulator enforces: PAYLOADSTORE_S3_GRANTS, else the template's."""
    from payloadstore_controlplane import grants

    env = os.environ if environ is None else environ
    if env.get(GRANTS_ENV):
        return grants.table_from_json(env[GRANTS_ENV])
    return grants.grant_table()


def kms_keys_in_force(environ: dict[str, str] | None = None) -> frozenset[str]:
    """The KMS keys the functions are granted on: PAYLOADSTORE_KMS_KEYS, else the local key."""
    env = os.environ if environ is None else environ
    listed = [k.strip() for k in (env.get(KMS_KEYS_ENV) or "").split(",") if k.strip()]
    return frozenset(listed or [LOCAL_KMS_KEY_ARN])


def _multipart_of(bucket: str, upload_id: str):
    """moto's multipart upload in progress (a FakeMultipart), or None."""
    try:
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket]
        return s3_backends[account][partition].get_bucket(bucket).multiparts.get(upload_id)
    except Exception:  # noqa: BLE001 - whatever moto says, it answers itself
        return None


def _kms_use(environ, bucket: str, key: str, query: dict) -> tuple[str | None, list[str]]:
    """(KMS key, actions S3 needs on it) of a request: an SSE-KMS upload (PutObject,
    CreateMultipartUpload, CopyObject) or a part or completion of an SSE-KMS multipart upload
    generates data keys; a GET of an SSE-KMS object decrypts. ([], nothing) otherwise."""
    method = environ.get("REQUEST_METHOD", "GET")
    if method in ("PUT", "POST") and "uploadId" in query:
        upload = _multipart_of(bucket, query["uploadId"][0])
        if upload is None or getattr(upload, "sse_encryption", None) != "aws:kms":
            return None, []
        needs = ["kms:GenerateDataKey", "kms:Decrypt"] if method == "POST" else []
        return getattr(upload, "kms_key_id", None), needs or ["kms:GenerateDataKey"]
    if method in ("PUT", "POST"):
        if (_wsgi_header(environ, "x-amz-server-side-encryption") or "") != "aws:kms":
            return None, []
        kms_key = _wsgi_header(environ, "x-amz-server-side-encryption-aws-kms-key-id")
        return kms_key, ["kms:GenerateDataKey"]
    if method == "GET" and "tagging" not in query:
        stored = _stored(bucket, key)
        if stored is not None and getattr(stored, "encryption", None) == "aws:kms":
            return getattr(stored, "kms_key_id", None), ["kms:Decrypt"]
    return None, []


def known_credentials(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    creds = {LOCAL_ACCESS_KEY_ID: LOCAL_SECRET_ACCESS_KEY}
    for group in function_groups():
        key_id, secret, _ = function_credentials(group)
        creds[key_id] = secret
    for pair in (env.get("PAYLOADSTORE_S3_CREDENTIALS") or "").split(","):
        key_id, sep, secret = pair.strip().partition(":")
        if sep and key_id and secret:
            creds[key_id] = secret
    return creds


def _error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()


def _error(start_response, status: str, code: str, message: str):
    body = _error_body(code, message)
    start_response(
        status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [body]


def _wsgi_header(environ: dict, name: str) -> str | None:
    if name == "content-type":
        return environ.get("CONTENT_TYPE") or None
    if name == "content-length":
        return environ.get("CONTENT_LENGTH") or None
    if name == "host":
        return environ.get("HTTP_HOST") or None
    return environ.get("HTTP_" + name.upper().replace("-", "_"))


def _raw_target(environ: dict) -> tuple[str, str]:
    """The path and query exactly as the client sent them (the signature covers the bytes)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        path, _, query = raw.partition("?")
        return path, query
    return quote(environ.get("PATH_INFO", ""), safe="/~!$&'()*+,;=:@%"), environ.get(
        "QUERY_STRING", ""
    )


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


# Bucket sub-resources (query names) -> the IAM action of a GET or HEAD on the bucket.
_BUCKET_READS = {
    "location": "s3:GetBucketLocation",
    "encryption": "s3:GetEncryptionConfiguration",
    "lifecycle": "s3:GetLifecycleConfiguration",
    "uploads": "s3:ListBucketMultipartUploads",
    "versions": "s3:ListBucketVersions",
    "policy": "s3:GetBucketPolicy",
    "acl": "s3:GetBucketAcl",
    "tagging": "s3:GetBucketTagging",
    "versioning": "s3:GetBucketVersioning",
    "cors": "s3:GetBucketCORS",
}


def s3_action(method: str, key: str | None, query: dict) -> str:
    """The IAM action S3 authorises a path-style request by (key None: the bucket itself)."""
    if key is None:
        if method in ("GET", "HEAD"):
            return next((a for q, a in _BUCKET_READS.items() if q in query), "s3:ListBucket")
        if method == "POST" and "delete" in query:
            return "s3:DeleteObject"
        return {"PUT": "s3:CreateBucket", "DELETE": "s3:DeleteBucket"}.get(
            method, "s3:UnknownBucketAction"
        )
    if method in ("GET", "HEAD"):
        if "uploadId" in query:
            return "s3:ListMultipartUploadParts"
        return "s3:GetObjectTagging" if "tagging" in query else "s3:GetObject"
    if method in ("PUT", "POST"):  # PutObject, UploadPart, Create/CompleteMultipartUpload
        return "s3:PutObjectTagging" if "tagging" in query else "s3:PutObject"
    if method == "DELETE":
        return "s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject"
    return "s3:UnknownObjectAction"


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
        path, raw_query = _raw_target(environ)
        query = parse_qs(raw_query, keep_blank_values=True)
        if "X-Amz-Signature" not in query:
            if "X-Amz-Credential" in query:
                return _error(
                    start_response,
                    "400 Bad Request",
                    "AuthorizationQueryParametersError",
                    "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                    "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                    "and X-Amz-Expires parameters.",
                )
            if not environ.get("HTTP_AUTHORIZATION"):
                return _error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
            refused = verify_put_body(environ)
            if refused is not None:
                return _error(start_response, *refused)
            signed = _header_credential(environ)
            if signed is not None and signed[1] == "s3":
                return self._as_granted(signed[0], query, environ, start_response)
            return self.app(environ, start_response)
        refused = self._verify(environ, path, raw_query, query)
        if refused is not None:
            status, code, message = refused
            return _error(start_response, status, code, message)
        refused = verify_put_body(environ)
        if refused is not None:
            return _error(start_response, *refused)
        signer = query["X-Amz-Credential"][0].split("/", 1)[0]
        return self._as_granted(signer, query, environ, start_response)

    def _as_granted(self, access_key: str, query: dict, environ, start_response):
        """Pass the request to moto if the signer's function may make it, as S3 would judge it:
        AccessDenied for an action not granted, and for a missing key read without
        s3:ListBucket."""
        group = function_of(access_key)
        if group is None:
            return self.app(environ, start_response)
        granted = self.grants.get(group)
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        action = s3_action(environ.get("REQUEST_METHOD", "GET"), key or None, query)
        if not bucket or granted is None or not granted.allows(action, key or None):
            return _error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
        source = _copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
        if source is not None and not granted.allows("s3:GetObject", source[1]):
            # A copy (CopyObject, UploadPartCopy) also reads its source.
            return _error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
        if (
            key
            and action == "s3:PutObject"
            and _wsgi_header(environ, "x-amz-tagging") is not None
            and not granted.allows("s3:PutObjectTagging", key)
        ):
            return _error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
        refused = self._kms_refusal(group, environ, bucket, key, query) if key else None
        if refused is not None:
            return _error(start_response, "403 Forbidden", "AccessDenied", refused)
        if action != "s3:GetObject" or granted.lists_bucket:
            return self.app(environ, start_response)
        # A read without s3:ListBucket: S3 does not say whether the key exists.
        answer: dict = {}

        def capture(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return lambda _data: None

        chunks = self.app(environ, capture)
        try:
            body = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        if answer.get("status", "").startswith("404"):
            if environ.get("REQUEST_METHOD") == "HEAD":
                start_response("403 Forbidden", [("Content-Length", "0")])
                return [b""]
            return _error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
        start_response(answer["status"], answer["headers"])
        return [body]

    def _kms_refusal(self, group: str, environ, bucket: str, key: str, query: dict) -> str | None:
        """Why S3 would refuse this request for the KMS key it uses, or None: an SSE-KMS write
        needs kms:GenerateDataKey on the key, an SSE-KMS read (GET) kms:Decrypt, each granted
        to the signer's function on that key, for payload and blob objects only."""
        from payloadstore_controlplane.grants import kms_allows

        kms_key, needs = _kms_use(environ, bucket, key, query)
        if not needs:
            return None
        if not kms_key or kms_key not in self.kms_keys:
            return f"User local-{group} is not authorized to use KMS key {kms_key or 'aws/s3'}"
        for action in needs:
            if not kms_allows(group, action, key):
                return f"User local-{group} is not authorized to perform: {action} on {kms_key}"
        return None

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
            value = _wsgi_header(environ, name)
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


# The checksums a PUT (object or part) may carry, checked against its body as S3 checks them:
# header name (WSGI form) -> (algorithm as S3 names it, function of the body -> base64).
def _sha256_b64(data) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _crc64nvme_b64(data) -> str:
    from awscrt import checksums

    return base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


CHECKED_ALGORITHMS = {
    "HTTP_X_AMZ_CHECKSUM_SHA256": "SHA256",
    "HTTP_X_AMZ_CHECKSUM_CRC64NVME": "CRC64NVME",
}


def claimed_checksum(environ) -> tuple[str, str] | None:
    """(algorithm, base64 value) of the checksum header a request carries, or None."""
    for header, algorithm in CHECKED_ALGORITHMS.items():
        value = environ.get(header)
        if value:
            return algorithm, value
    return None


def verify_put_body(environ) -> tuple[str, str, str] | None:
    """A PUT carrying x-amz-checksum-sha256 or -crc64nvme: its body is read (checksummed as it
    is read, kept in a spooled file: a multi-GiB blob is not held in memory twice) and refused
    as S3 refuses it, 400 BadDigest, when the checksum differs. The body is handed on with the
    computed value (VERIFIED_CHECKSUM), so it is not computed a second time."""
    claimed = claimed_checksum(environ)
    if environ.get("REQUEST_METHOD") != "PUT" or claimed is None:
        return None
    if (environ.get("HTTP_X_AMZ_CONTENT_SHA256") or "").startswith("STREAMING") or (
        "aws-chunked" in (environ.get("HTTP_CONTENT_ENCODING") or "")
    ):
        return None  # a chunked body with a trailing checksum: moto decodes it
    algorithm, value = claimed
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115 - handed to moto as its input
    digest = hashlib.sha256()
    crc = [0]

    def feed(chunk: bytes) -> None:
        if algorithm == "SHA256":
            digest.update(chunk)
        else:
            from awscrt import checksums

            crc[0] = checksums.crc64nvme(chunk, crc[0])

    left = length
    while left > 0:
        chunk = environ["wsgi.input"].read(min(left, 8 * 1024 * 1024))
        if not chunk:
            break
        feed(chunk)
        body.write(chunk)
        left -= len(chunk)
    raw = digest.digest() if algorithm == "SHA256" else crc[0].to_bytes(8, "big")
    actual = base64.b64encode(raw).decode()
    if actual != value:
        body.close()
        return (
            "400 Bad Request",
            "BadDigest",
            f"The {algorithm} you specified did not match the calculated checksum.",
        )
    body.seek(0)
    environ["wsgi.input"] = body
    environ[VERIFIED_CHECKSUM] = (algorithm, actual)
    # S3 keeps the checksum of any PUT that carried one; moto only when the SDK's algorithm
    # header names it.
    environ.setdefault("HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM", algorithm)
    return None


def _captured(app, environ) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status, headers, body) of `app`'s answer to `environ`."""
    answer: dict = {}

    def capture(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, list(headers)
        return lambda _data: None

    chunks = app(environ, capture)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return answer["status"], answer["headers"], body


def _answer(start_response, status: str, headers: list[tuple[str, str]], body: bytes):
    kept = [(n, v) for n, v in headers if n.lower() != "content-length"]
    start_response(status, [*kept, ("Content-Length", str(len(body)))])
    return [body]


def _read_body(environ) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _local_tag(element) -> str:
    return element.tag.rpartition("}")[2]


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_XML_DECLARATION = re.compile(rb"^\s*<\?xml[^>]*\?>\s*")
# A completion answers at once when moto is done this soon; otherwise it keeps the connection
# alive with a space this often (S3 does the same for a CompleteMultipartUpload that takes long).
KEEPALIVE_S = 1.0
# How long a HEAD/GET/ListParts waits for a completion in progress before answering anyway.
COMPLETION_WAIT_S = 300.0
_PART_NUMBER = re.compile(rb"<Part>(\s*)<PartNumber>(\d+)</PartNumber>")


def _stored(bucket: str, key: str):
    """moto's stored object (a FakeKey), or None."""
    try:
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket]
        return s3_backends[account][partition].get_object(bucket, key)
    except Exception:  # noqa: BLE001 - whatever moto says, it answers itself
        return None


# upload id -> {part number: base64 checksum} of the parts the emulator took (and checked).
_PART_DIGESTS: dict[str, dict[int, str]] = {}


def _complete_reading_each_part_once(self, body):
    """moto's FakeMultipart.complete, reading each part once (moto reads it twice, and copies
    the whole object twice more for a FULL_OBJECT checksum) and taking each part's checksum
    from what the emulator computed when the part arrived: a SHA256 upload's COMPOSITE checksum
    from the parts' sha256s, a CRC64NVME upload's FULL_OBJECT checksum by combining the parts'
    CRCs (no byte read again). The same object and ETag; any other checksum goes to moto's own."""
    from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML
    from moto.s3.models import S3_UPLOAD_PART_MIN_SIZE

    algorithm = (self.metadata.get("x-amz-checksum-algorithm") or "").upper()
    kind = self.metadata.get("x-amz-checksum-type") or (
        "FULL_OBJECT" if algorithm == "CRC64NVME" else "COMPOSITE"
    )
    if (algorithm, kind) not in (("SHA256", "COMPOSITE"), ("CRC64NVME", "FULL_OBJECT")):
        return _MOTO_COMPLETE[0](self, body)
    known = _PART_DIGESTS.get(self.id, {})
    total, md5s, digests = bytearray(), bytearray(), bytearray()
    crc = 0
    last = None
    for number, etag in body:
        part = self.parts.get(number)
        if part is None or part.etag.replace('"', "") != etag.replace('"', ""):
            raise InvalidPart()
        if last is not None and last.contentsize < S3_UPLOAD_PART_MIN_SIZE:
            raise EntityTooSmall()
        value = part.value
        md5s.extend(bytes.fromhex(part.etag.replace('"', "")))
        total.extend(value)
        digest = known.get(number)
        if algorithm == "SHA256":
            digests.extend(base64.b64decode(digest) if digest else hashlib.sha256(value).digest())
        else:
            part_crc = base64.b64decode(digest if digest else _crc64nvme_b64(value))
            crc = _crc_combine(crc, int.from_bytes(part_crc, "big"), len(value))
        last = part
    count = len(md5s) // 16
    if not count:
        raise MalformedXML
    etag = f"{hashlib.md5(bytes(md5s)).hexdigest()}-{count}"
    # The bytearray itself (moto's FakeKey writes it to its buffer): no copy into bytes first.
    if algorithm == "CRC64NVME":
        full = base64.b64encode(crc.to_bytes(8, "big")).decode()
        return total, etag, ("FULL_OBJECT", full, 1)
    composite = base64.b64encode(hashlib.sha256(bytes(digests)).digest()).decode()
    return total, etag, ("COMPOSITE", composite, count)


def _crc_combine(first: int, second: int, second_length: int) -> int:
    from awscrt import checksums

    return checksums.combine_crc64nvme(first, second, second_length) if second_length else first


_MOTO_COMPLETE: list = []


def _install_fast_complete() -> None:
    from moto.s3.models import FakeMultipart

    if not _MOTO_COMPLETE:
        _MOTO_COMPLETE.append(FakeMultipart.complete)
        FakeMultipart.complete = _complete_reading_each_part_once


@dataclass
class _Upload:
    """What the emulator keeps of a multipart upload in progress."""

    algorithm: str = ""  # SHA256 | CRC64NVME | "" (none named)
    kind: str = ""  # COMPOSITE | FULL_OBJECT | ""
    parts: dict[int, tuple[str, int]] = field(default_factory=dict)  # number -> (b64, size)


def _invalid_request(message: str) -> tuple[str, str, str]:
    return "400 Bad Request", "InvalidRequest", message


class MultipartChecksums:
    """S3's checksum rules for multipart uploads, and ranged GETs served at their offset (see
    the module's docstring). Sits between PresignedUrlRules and moto: every request reaching it
    was allowed already."""

    def __init__(self, app):
        self.app = app
        _install_fast_complete()
        self._lock = threading.Lock()
        self._uploads: dict[str, _Upload] = {}
        # "bucket/key" and upload id -> set when a completion in progress is stored
        self._completing: dict[str, threading.Event] = {}

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        upload = query.get("uploadId", [""])[0]
        if not key:
            return self.app(environ, start_response)
        if method == "POST" and "uploads" in query:
            return self._create(environ, start_response)
        if method == "PUT" and upload and "partNumber" in query:
            return self._upload_part(environ, start_response, upload, query)
        # Any request on a key or upload being completed waits for it (S3 completes atomically).
        self.wait_for_completion(environ.get("PATH_INFO", "").lstrip("/"), upload)
        if method == "GET" and upload:
            return self._list_parts(environ, start_response, upload)
        if method == "POST" and upload:
            return self._complete(environ, start_response, upload)
        if method == "DELETE" and upload:
            with self._lock:
                self._uploads.pop(upload, None)
                _PART_DIGESTS.pop(upload, None)
        if method == "HEAD" and environ.get("HTTP_X_AMZ_CHECKSUM_MODE") == "ENABLED":
            return self._head(environ, start_response, bucket, key)
        if (
            method == "GET"
            and environ.get("HTTP_RANGE")
            and not any(not name.startswith("X-Amz-") for name in query)
        ):
            served = self._range(environ, start_response, bucket, key)
            if served is not None:
                return served
        return self.app(environ, start_response)

    def _create(self, environ, start_response):
        algorithm = (environ.get("HTTP_X_AMZ_CHECKSUM_ALGORITHM") or "").upper()
        kind = (environ.get("HTTP_X_AMZ_CHECKSUM_TYPE") or "").upper()
        # S3: CRC64NVME is FULL_OBJECT only; the SHA algorithms are COMPOSITE only.
        if algorithm == "CRC64NVME" and kind == "COMPOSITE":
            return _error(
                start_response,
                *_invalid_request(
                    "The COMPOSITE checksum type cannot be used with the crc64nvme checksum "
                    "algorithm."
                ),
            )
        if algorithm == "SHA256" and kind == "FULL_OBJECT":
            return _error(
                start_response,
                *_invalid_request(
                    "The FULL_OBJECT checksum type cannot be used with the sha256 checksum "
                    "algorithm."
                ),
            )
        if algorithm and not kind:
            kind = "FULL_OBJECT" if algorithm == "CRC64NVME" else "COMPOSITE"
        status, headers, body = _captured(self.app, environ)
        found = re.search(rb"<UploadId>([^<]+)</UploadId>", body)
        if status.startswith("200") and found:
            with self._lock:
                self._uploads[found.group(1).decode()] = _Upload(algorithm, kind)
            if kind:
                headers = [*headers, ("x-amz-checksum-type", kind)]
        return _answer(start_response, status, headers, body)

    def _upload_part(self, environ, start_response, upload: str, query: dict):
        if environ.get("HTTP_X_AMZ_COPY_SOURCE"):
            return self._upload_part_copy(environ, start_response, upload, query)
        streaming = (environ.get("HTTP_X_AMZ_CONTENT_SHA256") or "").startswith("STREAMING")
        if streaming or "aws-chunked" in (environ.get("HTTP_CONTENT_ENCODING") or ""):
            return self.app(environ, start_response)  # a chunked body: moto decodes it
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        claimed = claimed_checksum(environ)
        if claimed is not None and state.algorithm and claimed[0] != state.algorithm:
            return _error(
                start_response,
                *_invalid_request(
                    "Checksum Type mismatch occurred, expected checksum Type: "
                    f"{state.algorithm.lower()}, actual checksum Type: {claimed[0].lower()}"
                ),
            )
        if state.algorithm == "SHA256" and claimed is None:
            # A COMPOSITE upload needs each part's checksum (a FULL_OBJECT one does not: S3
            # computes the part's CRC itself).
            return _error(
                start_response,
                *_invalid_request(
                    "Checksum Type mismatch occurred, expected checksum Type: sha256, "
                    "actual checksum Type: null"
                ),
            )
        verified = environ.get(VERIFIED_CHECKSUM)
        body = _read_body(environ)
        algorithm = state.algorithm or (claimed[0] if claimed else "SHA256")
        if verified is not None and verified[0] == algorithm:
            actual = verified[1]
        else:
            actual = _sha256_b64(body) if algorithm == "SHA256" else _crc64nvme_b64(body)
        if claimed is not None and claimed[1] != actual:
            return _error(
                start_response,
                "400 Bad Request",
                "BadDigest",
                f"The {algorithm} you specified did not match the calculated checksum.",
            )
        status, headers, answer = _captured(self.app, environ)
        if status.startswith("200"):
            number = int(query["partNumber"][0])
            with self._lock:
                self._uploads.setdefault(upload, state).parts[number] = (actual, len(body))
                _PART_DIGESTS.setdefault(upload, {})[number] = actual
            headers = [*headers, (f"x-amz-checksum-{algorithm.lower()}", actual)]
        return _answer(start_response, status, headers, answer)

    def _upload_part_copy(self, environ, start_response, upload: str, query: dict):
        """UploadPartCopy: moto copies the range; S3 also computes the part's checksum for an
        upload created with one, answers it in CopyPartResult and keeps it for the completion."""
        status, headers, body = _captured(self.app, environ)
        if not status.startswith("200"):
            return _answer(start_response, status, headers, body)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        source = _copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
        stored = _stored(*source) if source else None
        if state.algorithm in ("SHA256", "CRC64NVME") and stored is not None:
            m = _RANGE.match(environ.get("HTTP_X_AMZ_COPY_SOURCE_RANGE", "").strip())
            begin, end = (int(m.group(1)), int(m.group(2))) if m and m.group(2) else (0, None)
            with stored.lock:
                stored._value_buffer.seek(begin)
                data = stored._value_buffer.read(None if end is None else end - begin + 1)
            if state.algorithm == "SHA256":
                actual = _sha256_b64(data)
            else:
                actual = _crc64nvme_b64(data)
            number = int(query["partNumber"][0])
            with self._lock:
                self._uploads.setdefault(upload, state).parts[number] = (actual, len(data))
                _PART_DIGESTS.setdefault(upload, {})[number] = actual
            name = "ChecksumSHA256" if state.algorithm == "SHA256" else "ChecksumCRC64NVME"
            body = body.replace(b"</ETag>", f"</ETag><{name}>{actual}</{name}>".encode(), 1)
        return _answer(start_response, status, headers, body)

    def _list_parts(self, environ, start_response, upload: str):
        status, headers, body = _captured(self.app, environ)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
            known = dict(state.parts)
        tag = "ChecksumCRC64NVME" if state.algorithm == "CRC64NVME" else "ChecksumSHA256"

        def with_checksum(m: re.Match) -> bytes:
            digest = known.get(int(m.group(2)))
            extra = f"<{tag}>{digest[0]}</{tag}>".encode() if digest else b""
            return m.group(0) + extra

        if status.startswith("200"):
            body = _PART_NUMBER.sub(with_checksum, body)
            if state.algorithm:
                body = body.replace(
                    b"</UploadId>",
                    f"</UploadId><ChecksumAlgorithm>{state.algorithm}</ChecksumAlgorithm>"
                    f"<ChecksumType>{state.kind}</ChecksumType>".encode(),
                    1,
                )
        return _answer(start_response, status, headers, body)

    def _complete(self, environ, start_response, upload: str):
        request = _read_body(environ)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
            known = dict(state.parts)
        tag = "ChecksumCRC64NVME" if state.algorithm == "CRC64NVME" else "ChecksumSHA256"
        named: list[tuple[int, str | None]] = []
        try:
            for part in ElementTree.fromstring(request or b"<x/>"):
                if _local_tag(part) != "Part":
                    continue
                fields = {_local_tag(e): (e.text or "").strip() for e in part}
                named.append((int(fields.get("PartNumber", "0")), fields.get(tag)))
        except (ElementTree.ParseError, ValueError):
            return _error(start_response, "400 Bad Request", "MalformedXML", "Malformed XML")
        refused = self._completion_refused(environ, state, named, known)
        if refused is not None:
            return _error(start_response, *refused)
        return self._complete_in_background(environ, start_response, upload, named, known)

    @staticmethod
    def _completion_refused(environ, state: _Upload, named, known) -> tuple[str, str, str] | None:
        """Why S3 would refuse this CompleteMultipartUpload for its checksums, or None.

        A COMPOSITE (SHA256) upload must name each part's checksum as uploaded. A FULL_OBJECT
        (CRC64NVME) one may name them (each must be the part's), may say its type
        (x-amz-checksum-type: it must be the upload's) and may give the whole object's CRC
        (x-amz-checksum-crc64nvme), which S3 checks against the parts' CRCs combined: a part
        swapped for other bytes of the same length makes that 400 BadDigest."""
        invalid_part = (
            "400 Bad Request",
            "InvalidPart",
            (
                "One or more of the specified parts could not be found. The part may not have "
                "been uploaded, or the specified checksum may not have matched the part's."
            ),
        )
        kind = (environ.get("HTTP_X_AMZ_CHECKSUM_TYPE") or "").upper()
        if kind and state.kind and kind != state.kind:
            return _invalid_request(
                f"The upload was created using the {state.kind} checksum mode. The complete "
                "request must use the same checksum mode."
            )
        if state.algorithm == "SHA256":
            if any(not d or known.get(n, ("", 0))[0] != d for n, d in named):
                return invalid_part
            return None
        if state.algorithm != "CRC64NVME":
            return None
        if any(d and known.get(n, ("", 0))[0] != d for n, d in named):
            return invalid_part
        claimed = environ.get("HTTP_X_AMZ_CHECKSUM_CRC64NVME")
        if claimed and all(n in known for n, _ in named):
            crc = 0
            for number, _ in named:
                b64, size = known[number]
                crc = _crc_combine(crc, int.from_bytes(base64.b64decode(b64), "big"), size)
            if base64.b64encode(crc.to_bytes(8, "big")).decode() != claimed:
                return (
                    "400 Bad Request",
                    "BadDigest",
                    "The crc64nvme you specified did not match the calculated checksum.",
                )
        return None

    def _complete_in_background(self, environ, start_response, upload, named, known):
        """moto assembles the object (seconds for a GiB) while the answer keeps the connection
        alive as S3 does: a 200 at once, then a space every KEEPALIVE_S, then the result or an
        <Error> (botocore reads a 200 with an error body as the error). Until it is stored,
        HEAD/GET of the key and ListParts of the upload wait, so no reader sees the upload gone
        and the object not yet there (S3 completes atomically)."""
        path = environ.get("PATH_INFO", "").lstrip("/")
        done = threading.Event()
        outcome: dict = {}
        with self._lock:
            self._completing[path] = self._completing[upload] = done

        def work() -> None:
            try:
                outcome["answer"] = _captured(self.app, environ)
            except Exception as e:  # noqa: BLE001 - answered as S3's InternalError
                outcome["answer"] = (
                    "500 Internal Server Error",
                    [],
                    _error_body("InternalError", str(e)),
                )
            finally:
                status, headers, body = outcome["answer"]
                outcome["answer"] = (
                    status,
                    headers,
                    self._completed(upload, named, known, status, body),
                )
                with self._lock:
                    self._completing.pop(path, None)
                    self._completing.pop(upload, None)
                done.set()

        threading.Thread(target=work, name=f"complete-{upload[:8]}", daemon=True).start()
        if done.wait(KEEPALIVE_S):
            return _answer(start_response, *outcome["answer"])
        start_response("200 OK", [("Content-Type", "application/xml")])

        def kept_alive():
            yield b'<?xml version="1.0" encoding="UTF-8"?>\n'
            while not done.wait(KEEPALIVE_S):
                yield b" "
            yield _XML_DECLARATION.sub(b"", outcome["answer"][2], count=1)

        return kept_alive()

    def _completed(self, upload, named, known, status: str, body: bytes) -> bytes:
        """The completion's answer with S3's object checksum; the upload forgotten."""
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        if status.startswith("200") and state.algorithm == "SHA256":
            raw = b"".join(base64.b64decode(known[n][0]) for n, _ in named)
            composite = f"{base64.b64encode(hashlib.sha256(raw).digest()).decode()}-{len(named)}"
            body = body.replace(
                b"</ETag>", f"</ETag><ChecksumSHA256>{composite}</ChecksumSHA256>".encode(), 1
            )
        if (
            status.startswith("200")
            and state.algorithm == "CRC64NVME"
            and "<Checksum" not in (body.decode("utf-8", "replace"))
        ):
            crc = 0
            for number, _ in named:
                b64, size = known.get(number, ("", 0))
                if b64:
                    crc = _crc_combine(crc, int.from_bytes(base64.b64decode(b64), "big"), size)
            full = base64.b64encode(crc.to_bytes(8, "big")).decode()
            body = body.replace(
                b"</ETag>",
                f"</ETag><ChecksumCRC64NVME>{full}</ChecksumCRC64NVME>"
                "<ChecksumType>FULL_OBJECT</ChecksumType>".encode(),
                1,
            )
        if status.startswith("200"):
            with self._lock:
                self._uploads.pop(upload, None)
        return body

    def wait_for_completion(self, *names: str) -> None:
        """Block while a completion of this key or upload is being assembled."""
        with self._lock:
            pending = [self._completing[n] for n in names if n in self._completing]
        for event in pending:
            event.wait(COMPLETION_WAIT_S)

    def _head(self, environ, start_response, bucket: str, key: str):
        """HeadObject answers a composite checksum as S3 does, "<b64>-<parts>" (moto leaves
        the part count out of HEAD)."""
        status, headers, body = _captured(self.app, environ)
        stored = _stored(bucket, key) if status.startswith("200") else None
        if stored is not None and getattr(stored, "checksum_type", None) == "COMPOSITE":
            parts = stored.checksum_parts
            headers = [
                (
                    n,
                    f"{v}-{parts}"
                    if n.lower().startswith("x-amz-checksum-")
                    and "-" not in v
                    and n.lower() != "x-amz-checksum-type"
                    else v,
                )
                for n, v in headers
            ]
        names = {n.lower() for n, _ in headers}
        if "x-amz-checksum-crc64nvme" in names and "x-amz-checksum-type" not in names:
            # S3 answers the type of every CRC64NVME object (a single PUT's too): FULL_OBJECT.
            headers = [*headers, ("x-amz-checksum-type", "FULL_OBJECT")]
        start_response(status, headers)
        return [body]

    def _range(self, environ, start_response, bucket: str, key: str):
        """A single byte range of a stored object read at its offset, or None (moto answers:
        no such object, an unsatisfiable or other range, anything unexpected)."""
        m = _RANGE.match(environ.get("HTTP_RANGE", "").strip())
        if not m:
            return None
        stored = _stored(bucket, key)
        if stored is None or not getattr(stored, "contentsize", 0):
            return None
        size = stored.contentsize
        begin = int(m.group(1))
        end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        if begin > end:
            return None
        with stored.lock:
            stored._value_buffer.seek(begin)
            data = stored._value_buffer.read(end - begin + 1)
        headers = [
            ("Content-Type", stored.metadata.get("Content-Type") or "binary/octet-stream"),
            ("Content-Range", f"bytes {begin}-{end}/{size}"),
            ("Accept-Ranges", "bytes"),
            ("ETag", stored.etag),
            ("Last-Modified", stored.last_modified_RFC1123),
        ]
        return _answer(start_response, "206 Partial Content", headers, data)


def _copy_source(header: str) -> tuple[str, str] | None:
    """(bucket, key) of an `x-amz-copy-source` header (`/bucket/key` or `bucket/key`, URL-encoded,
    maybe with `?versionId=`)."""
    from urllib.parse import unquote

    path = unquote(header.partition("?")[0]).lstrip("/")
    bucket, _, key = path.partition("/")
    return (bucket, key) if bucket and key else None


# Seconds in a lifecycle day: 86,400 as on S3; a test makes days seconds long to watch the rules
# act (e.g. PAYLOADSTORE_S3_DAY_S=4: an object of a 1-day rule is gone 4 to 8 s after its write).
DAY_ENV = "PAYLOADSTORE_S3_DAY_S"


def day_seconds(environ: dict[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    raw = env.get(DAY_ENV) or ""
    try:
        value = float(raw) if raw else 86_400.0
    except ValueError:
        value = 86_400.0
    return value if value > 0 else 86_400.0


class LifecycleExpiry:
    """The bucket's lifecycle Expiration rules, applied as S3 applies them (moto stores the rules
    and never acts on them): an object under a rule's prefix is deleted once `Days` days have
    passed since its last write, S3 rounding the time up to the next midnight UTC. S3 deletes in
    the background, some time after that; here the object is gone at that moment for every
    request that touches it (GET, HEAD, a copy's source, a listing of the bucket), and a sweep
    removes the rest every so often, so tests can rely on both sides of the instant.

    A "day" is PAYLOADSTORE_S3_DAY_S seconds (86,400 by default), and midnight a multiple of it
    since the epoch: a test with days of a few seconds watches objects expire, and a copy of an
    object onto itself (a renewal) move its expiry."""

    def __init__(self, app, day_s: float | None = None, clock=None, sweep_every_s=None):
        import time as _time

        self.app = app
        self.day_s = day_s if day_s is not None else day_seconds()
        self.clock = clock or _time.time
        self.sweep_every_s = (
            sweep_every_s if sweep_every_s is not None else min(60.0, self.day_s / 8)
        )
        self.expired = 0  # objects this emulator deleted by a rule
        self._lock = threading.Lock()

    def start_sweeping(self) -> LifecycleExpiry:
        def loop() -> None:
            import time as _time

            while True:
                _time.sleep(self.sweep_every_s)
                try:
                    self.sweep()
                except Exception:  # noqa: BLE001, S112 - a sweep races moto's own requests; the next one retries
                    continue

        threading.Thread(target=loop, name="lifecycle-sweep", daemon=True).start()
        return self

    def __call__(self, environ, start_response):
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        if bucket and key:
            self.expire(bucket, key)
        elif bucket and environ.get("REQUEST_METHOD") == "GET":
            self.sweep(bucket)
        source = _copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
        if source is not None:
            self.expire(*source)
        return self.app(environ, start_response)

    def expiry(self, written: float, days: float) -> float:
        """When a rule of `days` deletes an object written at `written` (epoch seconds)."""
        import math

        return math.ceil((written + days * self.day_s) / self.day_s) * self.day_s

    def _rules(self, bucket_name: str) -> list[tuple[str, dict[str, str], float]]:
        """(prefix, tags that must match, days) of each enabled Expiration rule."""
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket_name]
        bucket = s3_backends[account][partition].buckets[bucket_name]
        found = []
        for rule in getattr(bucket, "rules", ()):
            if (rule.status or "").lower() != "enabled" or not rule.expiration_days:
                continue
            prefix, tags = rule.prefix, {}
            f = rule.filter
            if f is not None:
                if f.prefix is not None:
                    prefix = f.prefix
                if f.tag_key:
                    tags[f.tag_key] = f.tag_value or ""
                if f.and_filter is not None:
                    prefix = f.and_filter.prefix or prefix
                    tags.update(f.and_filter.tags or {})
            found.append((prefix or "", tags, float(rule.expiration_days)))
        return found

    def _backend(self, bucket_name: str):
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket_name]
        return s3_backends[account][partition]

    def _tags(self, bucket_name: str, stored) -> dict[str, str]:
        try:
            raw = self._backend(bucket_name).get_object_tagging(stored)
        except Exception:  # noqa: BLE001 - no tags to tell
            return {}
        return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}

    def expire(self, bucket_name: str, key: str) -> bool:
        """Delete the object if a rule has expired it (S3 honours the shortest of the rules that
        match its key and tags); whether it did."""
        try:
            rules = [
                (tags, days)
                for prefix, tags, days in self._rules(bucket_name)
                if key.startswith(prefix)
            ]
        except Exception:  # noqa: BLE001 - no such bucket: moto answers for itself
            return False
        if not rules:
            return False
        stored = _stored(bucket_name, key)
        if stored is None:
            return False
        own = self._tags(bucket_name, stored) if any(tags for tags, _ in rules) else {}
        days = [d for tags, d in rules if all(own.get(k) == v for k, v in tags.items())]
        if not days:
            return False
        written = stored.last_modified.replace(tzinfo=UTC).timestamp()
        if self.clock() < self.expiry(written, min(days)):
            return False
        with self._lock:
            if _stored(bucket_name, key) is not stored:
                return False  # written again meanwhile
            self._backend(bucket_name).delete_object(bucket_name, key)
            self.expired += 1
        return True

    def sweep(self, bucket_name: str | None = None) -> int:
        """Apply the rules to every object (of one bucket, or of all): how many were deleted."""
        from moto.s3.models import s3_backends

        names = [bucket_name] if bucket_name else list(s3_backends.bucket_accounts.keys())
        deleted = 0
        for name in names:
            try:
                if not self._rules(name):
                    continue
                keys = list(self._backend(name).buckets[name].keys.keys())
            except Exception:  # noqa: BLE001, S112 - a bucket deleted meanwhile
                continue
            for key in keys:
                deleted += self.expire(name, key)
        return deleted


_QUERY = re.compile(r"\?[^\s\"']*")


def redact(text: str) -> str:
    """Request targets without their query strings (signatures, credentials)."""
    return _QUERY.sub("?<redacted>", text)


def _request_handler():
    from werkzeug.serving import WSGIRequestHandler

    class RedactingRequestHandler(WSGIRequestHandler):
        def log(self, type: str, message: str, *args) -> None:
            super().log(type, "%s", redact(message % args if args else message))

    return RedactingRequestHandler


def _dispatcher():
    """moto's application for every service, with the host-to-backend lookup remembered.

    moto resolves the backend of a request's host on every request by listing its own package
    directory (~180 `stat` calls) and trying each service's URL patterns, 1-2 ms of CPU per
    request; the answer depends on the host alone (`s3.us-east-1.amazonaws.com`, ...), so it is
    kept. Nothing else of moto's dispatch changes."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    class RememberingDispatcher(DomainDispatcherApplication):
        # A service and region per entry: a few in practice; a bound all the same.
        MAX_HOSTS = 256

        def __init__(self, create_app):
            super().__init__(create_app)
            self._backend_of: dict = {}

        def get_backend_for_host(self, host):  # called under the dispatcher's lock
            try:
                return self._backend_of[host]
            except KeyError:
                backend = super().get_backend_for_host(host)
                if len(self._backend_of) < self.MAX_HOSTS:
                    self._backend_of[host] = backend
                return backend

    return RememberingDispatcher(create_backend_app)


def main(argv: list[str] | None = None) -> None:
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    # Outermost: an expired object is gone for every layer (the ranged GETs read moto directly).
    app = LifecycleExpiry(PresignedUrlRules(MultipartChecksums(_dispatcher()))).start_sweeping()
    run_simple(args.host, args.port, app, threaded=True, request_handler=_request_handler())


if __name__ == "__main__":
    main()
