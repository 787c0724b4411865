"""Scheduled (EventBridge, every RENEWAL_EVERY_MINUTES): renew the blobs that jobs still need,
ahead of their objects' lifecycle expiry (logic/renewals.py). Not behind the API: no request
ever waits for a copy. Its role holds s3:GetObject and s3:PutObject (CopyObject, UploadPartCopy,
Create/CompleteMultipartUpload) and s3:AbortMultipartUpload on `blobs/*` only (grants.py).

Namespaces come from Redis (keys.namespaces: those that enqueued or polled), as for the metrics
function: a blob is needed only by a job or a result, which that namespace enqueued or polled."""

from __future__ import annotations

from dataclasses import replace

from ..logic.renewals import renew_blobs
from ..observability import lambda_entry
from ..runtime.once import built_once
from ..store.s3.client import LazyS3Client
from ..store.s3_objects import S3Objects
from ._deps import get_deps

# A part of a multipart copy (COPY_PART_BYTES, 512 MiB by default) or a CopyObject of up to
# that size can take tens of seconds inside S3: the request path's 5 s read timeout would cut it.
COPY_READ_TIMEOUT_S = 120


@built_once(maxsize=4)
def copying_objects(region: str, endpoint_url: str | None, bucket: str, ttl_s: int) -> S3Objects:
    """The container's S3 objects with a client that waits for long copies."""
    return S3Objects(
        LazyS3Client(region, endpoint_url, read_timeout_s=COPY_READ_TIMEOUT_S), bucket, ttl_s
    )


def renewal_deps():
    deps = get_deps()
    s = deps.settings
    objects = copying_objects(s.aws_region, s.s3_endpoint_url, s.payload_bucket, s.presign_ttl_s)
    return replace(deps, objects=objects)


def run(context=None) -> dict:
    deps = renewal_deps()

    def time_left_s() -> float:
        if context is None or not hasattr(context, "get_remaining_time_in_millis"):
            return float("inf")
        return context.get_remaining_time_in_millis() / 1000

    # No copy starts in the last quarter of the invocation (at most 30 s): the copies in flight
    # finish before the timeout, and the next run takes what is left.
    spare_s = min(30.0, time_left_s() / 4)
    run = renew_blobs(deps.queues.namespaces(), deps, time_left_s=time_left_s, spare_s=spare_s)
    return run.as_dict()


@lambda_entry
def lambda_handler(event, context):
    return run(context)
