"""The S3 grants of each function, as data: one table for the CDK roles and the local S3 emulator.

`infra/functions.py` writes each function role's S3 statements from this table, and
`payloadstore_devstack.s3_grants` answers each function's requests (signed with that
function's local credentials) by the same table: 403 AccessDenied for an action the function
lacks, and, as S3 does, 403 instead of 404 for a missing key when the caller (or the signer of
a presigned URL) lacks s3:ListBucket on the bucket. So the local stack refuses what AWS would.

Object actions are granted on `<bucket>/payloads/*` and `<bucket>/blobs/*` only (one table
each), bucket actions on the bucket itself. A presigned URL can do only what its signer may do:

- payloads presigns PUT and GET (s3:PutObject, s3:GetObject) and HEADs references; above
  MULTIPART_THRESHOLD it creates the multipart upload and presigns its UploadPart URLs
  (CreateMultipartUpload and UploadPart are authorised by s3:PutObject);
- jobs and daemon complete a multipart reference at enqueue and result post: they list its parts
  (s3:ListMultipartUploadParts), complete it (CompleteMultipartUpload: s3:PutObject) and abort
  an upload whose parts do not match what was issued (s3:AbortMultipartUpload);
- jobs and daemon HEAD the references they accept (HeadObject is authorised by s3:GetObject) and
  presign the GETs handed out with a poll or a result (`download`);
- all three hold s3:ListBucket on the bucket, so a key that is not there answers 404
  (`not_uploaded` at enqueue and result post, `payload_lost` at the daemon's download), not 403;
- blobs (`blobs/<namespace>/<sha256>`): payloads presigns their PUT and HEADs the upload
  (POST .../blobs); above MULTIPART_THRESHOLD it creates the blob's multipart upload, presigns
  its parts and completes it at the second POST .../blobs, so it also lists the parts
  (s3:ListMultipartUploadParts) and aborts an upload S3 refuses to complete
  (s3:AbortMultipartUpload); jobs and daemon presign the GETs of the blobs a job or result
  references (s3:GetObject), and write nothing there: no request copies a blob;
- renewals (the scheduled blob renewer) copies a blob onto itself ahead of its lifecycle expiry:
  CopyObject, or a multipart copy (CreateMultipartUpload, UploadPartCopy, Complete: s3:PutObject
  on the target, s3:GetObject on the source; s3:AbortMultipartUpload for a copy that failed), on
  `blobs/*` only, reads the blob's retention tag and writes it on the copy (tagging), uses the
  namespace's KMS key where its policy names one, and holds s3:ListBucket so a HEAD of a blob
  gone answers 404;
- tagging: an upload carries the namespace's retention tag (PutObject with tags and
  CreateMultipartUpload with tags take s3:PutObjectTagging), the verifying read reads it
  (s3:GetObjectTagging);
- metrics (the scheduled function) deletes the payloads of retention `consume` namespaces
  that are due (DeleteObjects: s3:DeleteObject on payloads/*);
- public (health) reads the bucket's configuration: HeadBucket (s3:ListBucket), its region,
  default encryption and lifecycle rules, and no object.

KMS (namespace policies, models/policy.py): the stack's key, and each other key a namespace may
name (the payloadstore:kmsKeys context flag), lets the functions that presign uploads or GETs,
create or complete multipart uploads and copy blobs (payloads, jobs, daemon) generate data keys
and decrypt, for objects under `payloads/` and `blobs/` only (the key policy's
`kms:EncryptionContext:aws:s3:arn` condition). S3 checks the permission of the URL's signer, so
a client or daemon holding no AWS credentials reads and writes SSE-KMS objects through presigned
URLs. The emulator enforces the same (`KMS_ACTIONS`): an SSE-KMS upload (PUT, CreateMultipart-
Upload, CopyObject) signed by a function without kms:GenerateDataKey on the key, or a GET of an
SSE-KMS object signed by one without kms:Decrypt, is 403 AccessDenied.

Nothing in this module may import boto3, redis or Powertools: CDK synth imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

PAYLOAD_PREFIX = "payloads/"
BLOB_PREFIX = "blobs/"
LIST_BUCKET = "s3:ListBucket"

# Function group -> S3 actions on `<bucket>/payloads/*`.
MULTIPART_COMPLETION = (
    "s3:PutObject",
    "s3:ListMultipartUploadParts",
    "s3:AbortMultipartUpload",
)
# Namespace policies: an upload signs the retention tag in (PutObject with tags takes
# s3:PutObjectTagging too), and the verifying read checks it (GetObjectTagging).
TAGGING = ("s3:PutObjectTagging", "s3:GetObjectTagging")
OBJECT_ACTIONS: dict[str, tuple[str, ...]] = {
    "payloads": ("s3:GetObject", "s3:PutObject", *TAGGING),
    "jobs": ("s3:GetObject", *MULTIPART_COMPLETION, *TAGGING),
    "daemon": ("s3:GetObject", *MULTIPART_COMPLETION, *TAGGING),
    # retention `consume`: the scheduled function deletes what is due (DeleteObjects).
    "metrics": ("s3:DeleteObject",),
}
# Function group -> S3 actions on `<bucket>/blobs/*`.
BLOB_OBJECT_ACTIONS: dict[str, tuple[str, ...]] = {
    "payloads": ("s3:GetObject", *MULTIPART_COMPLETION, *TAGGING),
    "jobs": ("s3:GetObject", *TAGGING),
    "daemon": ("s3:GetObject", *TAGGING),
    "renewals": ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", *TAGGING),
}
# Function group -> S3 actions on the bucket itself.
BUCKET_ACTIONS: dict[str, tuple[str, ...]] = {
    "payloads": (LIST_BUCKET,),
    "jobs": (LIST_BUCKET,),
    "daemon": (LIST_BUCKET,),
    "renewals": (LIST_BUCKET,),
    "public": (
        "s3:GetBucketLocation",
        "s3:GetEncryptionConfiguration",
        "s3:GetLifecycleConfiguration",
        LIST_BUCKET,
    ),
}


# Function group -> KMS actions on the stack's key (and each key a namespace may name), for the
# payload and blob prefixes only.
KMS_ACTIONS: dict[str, tuple[str, ...]] = {
    "payloads": ("kms:GenerateDataKey", "kms:Decrypt"),
    "jobs": ("kms:GenerateDataKey", "kms:Decrypt"),
    "daemon": ("kms:GenerateDataKey", "kms:Decrypt"),
    # a renewal copies a blob of an SSE-KMS namespace under its key again
    "renewals": ("kms:GenerateDataKey", "kms:Decrypt"),
}
# The object prefixes KMS use is allowed for (kms:EncryptionContext:aws:s3:arn).
KMS_PREFIXES = (PAYLOAD_PREFIX, BLOB_PREFIX)


def kms_allows(group: str, action: str, object_key: str, table=None) -> bool:
    """Whether function `group` may use a granted key for `action` on `object_key`."""
    actions = (KMS_ACTIONS if table is None else table).get(group, ())
    return action in actions and object_key.startswith(KMS_PREFIXES)


@dataclass(frozen=True)
class S3Grants:
    """What one function may do: actions on the payload objects, on the blob objects, and on
    the bucket."""

    objects: frozenset[str] = frozenset()
    bucket: frozenset[str] = frozenset()
    blobs: frozenset[str] = frozenset()

    def allows(self, action: str, key: str | None) -> bool:
        """Whether `action` on `key` (None: the bucket itself) is granted."""
        if key is None:
            # DeleteObjects (POST ?delete on the bucket) is authorised per object by
            # s3:DeleteObject; every key it names is taken for a payload key here.
            if action == "s3:DeleteObject":
                return action in self.objects
            return action in self.bucket
        if key.startswith(BLOB_PREFIX):
            return action in self.blobs
        return action in self.objects and key.startswith(PAYLOAD_PREFIX)

    @property
    def lists_bucket(self) -> bool:
        return LIST_BUCKET in self.bucket


def grant_table(
    object_actions: Mapping[str, tuple[str, ...]] | None = None,
    bucket_actions: Mapping[str, tuple[str, ...]] | None = None,
    blob_actions: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, S3Grants]:
    """Group -> S3Grants, from the tables above (or others, for tests)."""
    objects = OBJECT_ACTIONS if object_actions is None else object_actions
    bucket = BUCKET_ACTIONS if bucket_actions is None else bucket_actions
    blobs = BLOB_OBJECT_ACTIONS if blob_actions is None else blob_actions
    return {
        group: S3Grants(
            frozenset(objects.get(group, ())),
            frozenset(bucket.get(group, ())),
            frozenset(blobs.get(group, ())),
        )
        for group in sorted(set(objects) | set(bucket) | set(blobs))
    }


def table_to_json(table: Mapping[str, S3Grants]) -> str:
    """The form the emulator takes in PAYLOADSTORE_S3_GRANTS (a test's edited table)."""
    return json.dumps(
        {
            g: {"objects": sorted(s.objects), "bucket": sorted(s.bucket), "blobs": sorted(s.blobs)}
            for g, s in table.items()
        }
    )


def table_from_json(text: str) -> dict[str, S3Grants]:
    raw = json.loads(text)
    return {
        group: S3Grants(
            frozenset(v.get("objects", ())),
            frozenset(v.get("bucket", ())),
            frozenset(v.get("blobs", ())),
        )
        for group, v in raw.items()
    }
