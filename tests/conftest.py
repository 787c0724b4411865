"""Session services every test layer shares: our own redis-server and moto's S3/SSM over HTTP.

Nothing here relies on a service the machine happened to start: each session picks free ports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from payloadstore_devstack.services import (
    LocalRedisCluster,
    MotoServer,
    RedisServer,
    create_payload_bucket,
    local_aws_env,
)
from tests.support.env import patched_environ

TEST_BUCKET = "payloadstore-test-payloads"
TEST_REGION = "us-east-1"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> RedisServer:
    server = RedisServer(data_dir=Path(tmp_path_factory.mktemp("redis")), appendonly=True).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_target(redis_server, tmp_path_factory):
    """The Redis the control plane's handlers use in tests: the session's redis-server, or with
    PAYLOADSTORE_REDIS=cluster a local cluster of 3 primaries with a replica each (two with
    PAYLOADSTORE_REDIS_REPLICAS=2), the handlers
    in cluster mode with REDIS_MIN_REPLICA_ACKS=1 (tests that look at what the handlers wrote
    read it through `redis_view`; `redis_server` stays the single server). Answers the handlers'
    Redis settings."""
    if os.environ.get("PAYLOADSTORE_REDIS", "single") != "cluster":
        yield {"REDIS_URL": redis_server.url}
        return
    # PAYLOADSTORE_REDIS_REPLICAS=2: the production shape (two replicas per primary).
    replicas = int(os.environ.get("PAYLOADSTORE_REDIS_REPLICAS", "1") or "1")
    cluster = LocalRedisCluster(
        data_dir=Path(tmp_path_factory.mktemp("cluster")), replicas=replicas
    ).start()
    yield {"REDIS_URL": cluster.url, "REDIS_CLUSTER": "true", "REDIS_MIN_REPLICA_ACKS": "1"}
    cluster.stop()


@pytest.fixture(scope="session")
def redis_view(redis_target):
    """A client on the Redis the handlers use: the session's redis-server, or under
    PAYLOADSTORE_REDIS=cluster the local cluster (a cluster client, which finds each key's
    node), for tests that look at what the handlers wrote."""
    import redis

    url = redis_target["REDIS_URL"]
    if redis_target.get("REDIS_CLUSTER") == "true":
        client = redis.RedisCluster.from_url(url)
    else:
        client = redis.Redis.from_url(url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory) -> MotoServer:
    server = MotoServer(log_path=Path(tmp_path_factory.mktemp("moto")) / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def aws_env(moto_server):
    """Point boto3 (in this process) at the emulator for the whole session."""
    with patched_environ(local_aws_env(moto_server.endpoint, TEST_REGION)) as env:
        yield env


@pytest.fixture(scope="session")
def s3_client(aws_env, moto_server):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        region_name=TEST_REGION,
        config=Config(signature_version="s3v4"),
    )


@pytest.fixture(scope="session")
def ssm_client(aws_env, moto_server):
    import boto3

    return boto3.client("ssm", endpoint_url=moto_server.endpoint, region_name=TEST_REGION)


@pytest.fixture(scope="session")
def payload_bucket(s3_client) -> str:
    create_payload_bucket(s3_client, TEST_BUCKET)
    return TEST_BUCKET
