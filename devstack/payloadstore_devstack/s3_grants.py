"""The template's S3 grants, enforced by the emulator: a request signed with a function's local
key may do what that function's role may do (payloadstore_controlplane/grants.py, the table the
CDK roles are written from), as S3 judges the action of a path-style request; KMS keys by
s3_kms. Any other key (the operator's) is not limited."""

from __future__ import annotations

import os

from payloadstore_devstack.s3_credentials import function_of
from payloadstore_devstack.s3_kms import kms_refusal
from payloadstore_devstack.s3_wsgi import copy_source, s3_error, wsgi_header

GRANTS_ENV = "PAYLOADSTORE_S3_GRANTS"


def grants_in_force(environ: dict[str, str] | None = None):
    """The grant table this emulator enforces: PAYLOADSTORE_S3_GRANTS, else the template's."""
    from payloadstore_controlplane import grants

    env = os.environ if environ is None else environ
    if env.get(GRANTS_ENV):
        return grants.table_from_json(env[GRANTS_ENV])
    return grants.grant_table()


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


def as_granted(
    app, grants, kms_keys: frozenset[str], access_key: str, query: dict, environ, start_response
):
    """Pass the request to moto if the signer's function may make it, as S3 would judge it:
    AccessDenied for an action not granted, and for a missing key read without
    s3:ListBucket."""
    group = function_of(access_key)
    if group is None:
        return app(environ, start_response)
    granted = grants.get(group)
    bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
    action = s3_action(environ.get("REQUEST_METHOD", "GET"), key or None, query)
    if not bucket or granted is None or not granted.allows(action, key or None):
        return s3_error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
    source = copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
    if source is not None and not granted.allows("s3:GetObject", source[1]):
        # A copy (CopyObject, UploadPartCopy) also reads its source.
        return s3_error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
    if (
        key
        and action == "s3:PutObject"
        and wsgi_header(environ, "x-amz-tagging") is not None
        and not granted.allows("s3:PutObjectTagging", key)
    ):
        return s3_error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
    refused = kms_refusal(group, kms_keys, environ, bucket, key, query) if key else None
    if refused is not None:
        return s3_error(start_response, "403 Forbidden", "AccessDenied", refused)
    if action != "s3:GetObject" or granted.lists_bucket:
        return app(environ, start_response)
    # A read without s3:ListBucket: S3 does not say whether the key exists.
    answer: dict = {}

    def capture(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, headers
        return lambda _data: None

    chunks = app(environ, capture)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    if answer.get("status", "").startswith("404"):
        if environ.get("REQUEST_METHOD") == "HEAD":
            start_response("403 Forbidden", [("Content-Length", "0")])
            return [b""]
        return s3_error(start_response, "403 Forbidden", "AccessDenied", "Access Denied")
    start_response(answer["status"], answer["headers"])
    return [body]
