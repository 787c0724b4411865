"""The payload bucket: SSE-S3, no public access, TLS only, `payloads/` expire after 2 days and
`blobs/` after BLOB_LIFECYCLE_DAYS (a blob a job still needs is renewed ahead of that by the
renewals function: see docs/design.md "Blob lifetimes")."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from constructs import Construct

# The local stack (payloadstore.devstack.services) creates its bucket with the same rule; a test
# keeps the two in step. Not imported from there: synth must not depend on the SDK package.
PAYLOAD_PREFIX = "payloads/"
PAYLOAD_EXPIRATION_DAYS = 2
ABORT_MULTIPART_DAYS = 1
LIFECYCLE_RULE_ID = "expire-payloads"
# Blobs (`blobs/<namespace>/<sha256>`) expire BLOB_LIFECYCLE_DAYS after their upload or their
# last renewal (a copy onto itself by the renewals function, ahead of that expiry, while a job
# still needs the blob): the days are derived from the retentions (models/blob_lifetime.py), the
# same figure every function computes its arithmetic with.
BLOB_PREFIX = "blobs/"
BLOB_LIFECYCLE_RULE_ID = "expire-blobs"

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
        blob_expiration_days: int = 5,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = cdk.RemovalPolicy.DESTROY if destroy_on_removal else cdk.RemovalPolicy.RETAIN

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
                s3.LifecycleRule(
                    id=LIFECYCLE_RULE_ID,
                    prefix=PAYLOAD_PREFIX,
                    # S3 counts whole days from midnight UTC; the CP itself refuses reads past 48 h.
                    expiration=cdk.Duration.days(PAYLOAD_EXPIRATION_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(ABORT_MULTIPART_DAYS),
                ),
                s3.LifecycleRule(
                    id=BLOB_LIFECYCLE_RULE_ID,
                    prefix=BLOB_PREFIX,
                    expiration=cdk.Duration.days(blob_expiration_days),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(ABORT_MULTIPART_DAYS),
                ),
            ],
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=ACCESS_LOG_PREFIX,
            removal_policy=removal,
            auto_delete_objects=destroy_on_removal,
        )
