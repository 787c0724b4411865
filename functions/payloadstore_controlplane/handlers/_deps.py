"""The container's dependencies: the stores and settings every logic call receives (`Deps`),
built once per container (cold start), never per request."""

from __future__ import annotations

from typing import cast

from ..logic.context import Deps
from ..models.settings import ReplicaAckPolicy, get_settings
from ..observability import replicas_below_target
from ..runtime import clock
from ..runtime.once import built_once
from ..store.redis_client import cached_redis
from ..store.redis_jobs import RedisJobStore
from ..store.redis_queues import RedisQueueStats
from ..store.s3_objects import S3Objects


@built_once(maxsize=1)
def get_deps() -> Deps:
    """Clients are created once per container (cold start), never per request."""
    s = get_settings()
    password = None
    if s.redis_auth_secret:
        # One signed GetSecretValue of our own (store/aws_http.py), not boto3's client.
        from ..store.aws_http import secret_value

        # A string secret (the stack's is generated as one); a binary one passes as bytes, as
        # Powertools' get_secret passed it.
        password = cast(str, secret_value(s.redis_auth_secret))
    client = cached_redis(
        s.redis_url,
        s.redis_cluster,
        password,
        max(s.poll_max_wait_s, s.result_max_wait_s),
        s.redis_max_connections,
        s.redis_iam,
    )
    return Deps(
        settings=s,
        jobs=RedisJobStore(
            client,
            result_ttl_s=s.result_ttl_s,
            min_replica_acks=s.redis_min_replica_acks,
            replica_ack_timeout_ms=s.redis_replica_ack_timeout_ms,
            replica_ack_strict=s.redis_replica_ack_policy is ReplicaAckPolicy.STRICT,
            replicas_below_target=replicas_below_target,
        ),
        # Signs URLs in-process; the botocore client is created on the first HEAD.
        objects=S3Objects.for_region(
            s.aws_region, s.s3_endpoint_url, s.payload_bucket, s.presign_ttl_s
        ),
        # Looked up at call time so tests can move the clock.
        clock=lambda: clock.now(),
        queues=RedisQueueStats(client),
    )
