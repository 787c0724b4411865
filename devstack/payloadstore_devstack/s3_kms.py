"""KMS as S3 judges it for the emulator: the key grants of the control plane's grants.py
(`KMS_ACTIONS`) on the keys the functions are granted on. An SSE-KMS write needs
kms:GenerateDataKey on its key, an SSE-KMS read kms:Decrypt; moto itself stores the key's ARN and
checks nothing."""

from __future__ import annotations

import os

from payloadstore_controlplane.models.policy import LOCAL_KMS_KEY_ARN
from payloadstore_devstack.s3_wsgi import stored_object, wsgi_header

# The local stack's own KMS key (kms_key `stack`, models/policy.py LOCAL_KMS_KEY_ARN): moto stores
# the ARN it is given and checks no key; the emulator's KMS grants judge who may use it
# (PAYLOADSTORE_KMS_KEYS lists the keys the functions are granted on, comma-separated; default
# that one).
KMS_KEYS_ENV = "PAYLOADSTORE_KMS_KEYS"


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
        if (wsgi_header(environ, "x-amz-server-side-encryption") or "") != "aws:kms":
            return None, []
        kms_key = wsgi_header(environ, "x-amz-server-side-encryption-aws-kms-key-id")
        return kms_key, ["kms:GenerateDataKey"]
    if method == "GET" and "tagging" not in query:
        stored = stored_object(bucket, key)
        if stored is not None and getattr(stored, "encryption", None) == "aws:kms":
            return getattr(stored, "kms_key_id", None), ["kms:Decrypt"]
    return None, []


def kms_refusal(
    group: str, kms_keys: frozenset[str], environ, bucket: str, key: str, query: dict
) -> str | None:
    """Why S3 would refuse this request for the KMS key it uses, or None: an SSE-KMS write
    needs kms:GenerateDataKey on the key, an SSE-KMS read (GET) kms:Decrypt, each granted
    to the signer's function on that key, for payload and blob objects only."""
    from payloadstore_controlplane.grants import kms_allows

    kms_key, needs = _kms_use(environ, bucket, key, query)
    if not needs:
        return None
    if not kms_key or kms_key not in kms_keys:
        return f"User local-{group} is not authorized to use KMS key {kms_key or 'aws/s3'}"
    for action in needs:
        if not kms_allows(group, action, key):
            return f"User local-{group} is not authorized to perform: {action} on {kms_key}"
    return None
