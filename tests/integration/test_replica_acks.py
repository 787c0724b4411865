"""Acknowledged means replicated (issue 22): with REDIS_MIN_REPLICA_ACKS every reported write
waits for replicas (WAIT on the write's own connection and node), on a local Redis Cluster of
3 primaries with 1 replica each (payloadstore.devstack.services.LocalRedisCluster).

The cluster is the module's: the failover test runs last and leaves it whole again (the old
primary back as a replica)."""

from __future__ import annotations

import base64
import time

import pytest
import redis
from redis.cluster import RedisCluster

from payloadstore.devstack.services import LocalRedisCluster
from payloadstore_controlplane.store import keys

b64 = lambda b: base64.b64encode(b).decode()


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    cluster = LocalRedisCluster(data_dir=tmp_path_factory.mktemp("cluster6")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def acked(local_cluster, settings_env):
    settings_env(
        REDIS_URL=local_cluster.url,
        REDIS_CLUSTER="true",
        REDIS_MIN_REPLICA_ACKS="1",
        REDIS_REPLICA_ACK_TIMEOUT_MS="100",
        VISIBILITY_TIMEOUT_S="1",
    )
    return local_cluster


def _owner(cluster: LocalRedisCluster, key: str) -> tuple[int, int]:
    """(primary port, replica port) of the shard that owns `key`'s slot."""
    with RedisCluster.from_url(cluster.url) as rc:
        primary = rc.get_node_from_key(key).port
    replica = next(
        n["port"] for n in cluster.topology() if n["primary_port"] == primary and not n["failed"]
    )
    return primary, replica


def test_the_six_node_cluster_has_three_primaries_with_a_replica_each(local_cluster):
    nodes = local_cluster.redis_nodes()
    primaries = {n["port"] for n in nodes if n["role"] == "primary"}
    replicas = [n for n in nodes if n["role"] == "replica"]
    assert len(nodes) == 6 and len(primaries) == 3
    assert sorted(n["primary_port"] for n in replicas) == sorted(primaries)
    with redis.Redis(port=nodes[0]["port"]) as r:
        assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"


def test_the_whole_life_cycle_runs_with_replica_acks(cp, acked):
    first = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "a1"})
    assert first.status == 201, first.raw_body
    polled = cp.poll()
    assert polled.status == 200 and polled.json["job_id"] == first.json["job_id"]
    job = first.json["job_id"]
    assert cp.post_result(job, {"resultInline": b64(b"\x2a")}).status == 204
    assert cp.result(job, wait=1).json["state"] == "succeeded"


def test_a_stalled_replica_turns_writes_into_503_replication_lag(cp, acked):
    # Given the replica of the shard that holds the namespace's queues, stalled
    _, replica = _owner(acked, keys.queue_names(cp.ns))
    acked.stall(replica)
    try:
        # When a client enqueues, the primary applies the script but no replica acknowledges
        started = time.monotonic()
        refused = cp.enqueue(raw=b"\x07", headers={"Idempotency-Key": "lag1"})
        elapsed = time.monotonic() - started
    finally:
        acked.resume(replica)
    # Then the answer is a 503 redis_replication_lag with Retry-After, not a job
    assert refused.status == 503, refused.raw_body
    assert refused.error["code"] == "redis_replication_lag"
    assert "job_id" not in (refused.json or {})
    assert int(refused.headers["Retry-After"]) >= 1
    assert elapsed < 3.0
    # And once the replica catches up, the retry finds the job the first attempt wrote: one job
    acked.wait_healthy()
    again = cp.enqueue(raw=b"\x07", headers={"Idempotency-Key": "lag1"})
    assert again.status in (200, 201), again.raw_body
    job = again.json["job_id"]
    polled = cp.poll()
    assert polled.status == 200 and polled.json["job_id"] == job
    assert cp.poll().status == 204

    # Given the replica of the job's shard stalled, a result post is not reported stored
    _, job_replica = _owner(acked, keys.job(job))
    acked.stall(job_replica)
    try:
        lagging = cp.post_result(job, {"resultInline": b64(b"\x2a")})
    finally:
        acked.resume(job_replica)
    assert lagging.status == 503 and lagging.error["code"] == "redis_replication_lag"
    acked.wait_healthy()
    # The re-sent post is the same post: 204, and the job succeeded once
    assert cp.post_result(job, {"resultInline": b64(b"\x2a")}).status == 204
    assert cp.result(job, wait=1).json["state"] == "succeeded"


def test_without_replicas_to_wait_for_the_setting_at_zero_changes_nothing(cp, settings_env):
    # The single redis-server of the suite, no replica: with 0 nothing waits
    settings_env(REDIS_MIN_REPLICA_ACKS="0")
    assert cp.enqueue(raw=b"\x01").status == 201
    # with 1 nothing can be acknowledged: every write is a 503, never a success
    settings_env(REDIS_MIN_REPLICA_ACKS="1")
    refused = cp.enqueue(raw=b"\x02")
    assert refused.status == 503 and refused.error["code"] == "redis_replication_lag"


def retry_503(call, within_s: float = 30.0) -> int:
    """The status of `call` once it is not a 503 (as a client retries), within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        reply = call()
        if reply.status != 503 or time.monotonic() > deadline:
            return reply.status
        time.sleep(0.5)


def test_the_client_follows_a_failover_without_hanging(cp, acked):
    # Given the primary that holds the namespace's queues, killed (its replica is promoted)
    primary, replica = _owner(acked, keys.queue_names(cp.ns))
    assert cp.enqueue(raw=b"\x00").status == 201  # the container's slot map knows the old one
    acked.kill(primary)
    try:
        # When the client keeps enqueueing, each call answers within the client's timeouts:
        # 503 while the shard has no primary, then 503 redis_replication_lag from the promoted
        # replica (it has no replica of its own yet): the client found the new primary
        codes = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            started = time.monotonic()
            reply = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "fo1"})
            assert time.monotonic() - started < 9.0, "a call hung past the client's timeouts"
            assert reply.status == 503, reply.raw_body
            codes.append(reply.error["code"])
            if codes[-1] == "redis_replication_lag":
                break
            time.sleep(0.2)
        assert codes[-1] == "redis_replication_lag", codes
        assert set(codes) <= {"service_unavailable", "redis_replication_lag"}
        acked.wait_promoted(replica)
    finally:
        # Then the old primary comes back as the promoted one's replica; writes succeed again
        acked.restart(primary)
        acked.wait_healthy(30)
    roles = {n["port"]: n for n in acked.redis_nodes()}
    assert roles[primary]["role"] == "replica" and roles[primary]["primary_port"] == replica
    # (the client's retry of the refused enqueue finds the job its first attempts wrote; the
    # rejoined replica may still be syncing, and until it acknowledges, writes answer 503
    # redis_replication_lag, which a client retries as it does here)
    assert retry_503(lambda: cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "fo1"})) in (
        200,
        201,
    )
    # (200: an attempt answered 503 had written the job; the retry found it, once)
    assert retry_503(lambda: cp.enqueue(raw=b"\x02", headers={"Idempotency-Key": "fo2"})) in (
        200,
        201,
    )
    # And the job acknowledged before the failover survived it; each job is there once
    got = [base64.b64decode(cp.poll().json["payloadInline"]) for _ in range(3)]
    assert got == [b"\x00", b"\x01", b"\x02"] and cp.poll().status == 204
