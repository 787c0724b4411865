"""The payload bucket: SSE-S3 by default, no public access, TLS only; one lifecycle rule per
retention class of the namespace policies (by the object tag every presigned upload signs in),
and `payloads/` and `blobs/` prefix rules as the backstop (a blob a job still needs is renewed
ahead of its class's expiry by the renewals function: see docs/design.md "Blob lifetimes"). The
stack's own KMS key (rotation on), for namespaces whose policy is kms_key `stack`."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from payloadstore_controlplane.grants import KMS_PREFIXES
from payloadstore_controlplane.models.policy import (
    RETENTION_DAYS,
    RETENTION_RULE_PREFIX,
    RETENTION_TAG,
)

# The local stack (payloadstore_devstack.services) creates its bucket with the same rule; a test
# keeps the two in step. Not imported from there: synth must not depend on the SDK package.
PAYLOAD_PREFIX = "payloads/"
# The prefix rules are the backstop for an object without a retention tag (one uploaded before
# namespace policies): the longest class, since S3 honours the shortest of overlapping rules and
# a shorter prefix rule would cut every longer class short. Each tagged object expires by its
# class's rule (RETENTION_DAYS: 1, 2, 7 or 30 days; `consume` 2 days, the control plane deleting
# it sooner itself).
PAYLOAD_EXPIRATION_DAYS = max(RETENTION_DAYS.values())
ABORT_MULTIPART_DAYS = 1
LIFECYCLE_RULE_ID = "expire-payloads"
# Blobs (`blobs/<namespace>/<sha256>`) expire BLOB_LIFECYCLE_DAYS after their upload or their
# last renewal (a copy onto itself by the renewals function, ahead of that expiry, while a job
# still needs the blob): the days are derived from the retentions (models/blob_lifetime.py), the
# same figure every function computes its arithmetic with.
BLOB_PREFIX = "blobs/"
BLOB_LIFECYCLE_RULE_ID = "expire-blobs"

# KMS actions the functions' roles may use the stack's key (and each other key a namespace may
# name) for: S3 generates a data key on upload and decrypts on download, as the URL's signer.
KMS_OBJECT_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")


def retention_rules() -> list[s3.LifecycleRule]:
    """One rule per retention class, filtered by the tag alone (payloads and blobs alike)."""
    return [
        s3.LifecycleRule(
            id=f"{RETENTION_RULE_PREFIX}{retention}",
            tag_filters={RETENTION_TAG: retention},
            expiration=cdk.Duration.days(days),
        )
        for retention, days in RETENTION_DAYS.items()
    ]


def kms_condition(bucket_arn: str) -> dict:
    """The key may be used for objects under the payload and blob prefixes only: S3 passes the
    object's ARN as the encryption context (no S3 Bucket Key, which would pass the bucket's)."""
    return {
        "StringLike": {
            "kms:EncryptionContext:aws:s3:arn": [f"{bucket_arn}/{p}*" for p in KMS_PREFIXES]
        }
    }


ACCESS_LOG_PREFIX = "payload-bucket/"
ACCESS_LOG_RETENTION_DAYS = 90


class PayloadStorage(Construct):
    """The bucket presigned URLs point at, and the bucket its server access logs go to.

    No CORS configuration: clients and daemons are processes, not browsers, so no origin ever
    needs to be allowed. Access logging is on because a presigned request is otherwise
    invisible: the CP only signs, and the log is the one record of which URL was really used,
    when, and from where.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        destroy_on_removal: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        # Kept when the stack is deleted, except when it is deleted because its first create
        # failed: a failed first deploy then leaves no bucket pair or key behind to clean up.
        removal = (
            cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        )

        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # Log delivery supports SSE-S3 only, not SSE-KMS.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=cdk.Duration.days(ACCESS_LOG_RETENTION_DAYS),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=destroy_on_removal,
        )

        self.bucket = s3.Bucket(
            self,
            "Payloads",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Payloads live two days; versions would only keep deleted bytes around longer.
            versioned=False,
            lifecycle_rules=[
                *retention_rules(),
                s3.LifecycleRule(
                    id=LIFECYCLE_RULE_ID,
                    prefix=PAYLOAD_PREFIX,
                    # S3 counts whole days from midnight UTC; the CP itself refuses reads past
                    # the namespace's retention.
                    expiration=cdk.Duration.days(PAYLOAD_EXPIRATION_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(ABORT_MULTIPART_DAYS),
                ),
                s3.LifecycleRule(
                    id=BLOB_LIFECYCLE_RULE_ID,
                    prefix=BLOB_PREFIX,
                    expiration=cdk.Duration.days(PAYLOAD_EXPIRATION_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(ABORT_MULTIPART_DAYS),
                ),
            ],
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=ACCESS_LOG_PREFIX,
            removal_policy=removal,
            auto_delete_objects=destroy_on_removal,
        )

        # The stack's own key, for namespaces with kms_key `stack`. Its policy keeps the
        # account's root statement only, so IAM administers it: the function roles' own
        # policies grant the use (functions.py, for payload and blob objects only). A key
        # policy naming a role of the same stack fails the first create: KMS refuses a
        # principal it cannot see yet, and CloudFormation does not retry that.
        self.key = kms.Key(
            self,
            "PayloadKey",
            description="payloadstore: SSE-KMS key of namespaces whose policy is kms_key stack",
            enable_key_rotation=True,
            removal_policy=removal,
        )
