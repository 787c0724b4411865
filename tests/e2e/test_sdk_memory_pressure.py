"""The SDK under Redis memory pressure, over the local gateway and a redis-server of its own with a
small maxmemory: above the high-water mark inline bytes go through S3 (args and results), above
the hard mark nothing is enqueued and the caller gets a typed error, never a job."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

import pytest
import redis

from payloadstore import Client, RetryPolicy, ServiceUnavailable
from payloadstore_devstack.services import RedisServer
from tests.e2e.sdk_helpers import daemon_thread, unique_queue
from tests.support.env import single_server_env

HEADROOM = 6 << 20  # maxmemory = what Redis uses at start + this
FILLER_BYTES = 64 << 10
GUARD_CACHE_S = 1.2  # the control plane reads INFO memory at most about once a second


@pytest.fixture
def small_redis(tmp_path):
    server = RedisServer(data_dir=tmp_path / "redis-small", appendonly=False).start()
    r = redis.Redis.from_url(server.url)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + HEADROOM)
    yield server, r
    r.close()
    server.stop()


def fill_to(r: redis.Redis, low_pct: float, high_pct: float) -> float:
    """Add (or drop) filler strings until used_memory / maxmemory is within [low, high]."""
    limit = int(r.config_get("maxmemory")["maxmemory"])
    n = 0
    for _ in range(2000):
        pct = 100.0 * int(r.info("memory")["used_memory"]) / limit
        if low_pct <= pct <= high_pct:
            time.sleep(GUARD_CACHE_S)
            return pct
        if pct < low_pct:
            r.set(f"filler:{n}", os.urandom(FILLER_BYTES))
            n += 1
        else:
            victim = next(r.scan_iter("filler:*", count=100), None)
            if victim is None:
                break
            r.delete(victim)
    raise AssertionError(f"could not bring Redis memory into [{low_pct}, {high_pct}] %")


def control_plane_keys(r: redis.Redis) -> set[bytes]:
    return {k for k in r.scan_iter(count=1000) if not k.startswith(b"filler:")}


def drain_filler(r: redis.Redis) -> None:
    for key in list(r.scan_iter("filler:*", count=500)):
        r.delete(key)
    time.sleep(GUARD_CACHE_S)


def clients_for(gateway, **kw) -> tuple[Client, Client]:
    return (
        Client(gateway.url, gateway.token("dev", "client"), "dev", **kw),
        Client(gateway.url, gateway.token("dev", "daemon"), "dev", **kw),
    )


def test_given_redis_above_its_high_water_mark_when_adding_200_kib_then_args_and_result_go_through_s3_and_the_job_runs(
    small_redis, start_local_gateway
):
    # Given: a control plane on a Redis between its high-water (85 %) and hard (95 %) marks
    server, r = small_redis
    gateway = start_local_gateway(**single_server_env(server.url))
    client, daemon_client = clients_for(gateway)
    queue = unique_queue("pressure")
    payload = os.urandom(200 << 10)
    assert client.config.inline_threshold > len(payload) + 64, "200 KiB must be an inline size"
    pct = fill_to(r, 87.0, 92.0)
    # When
    job = client.queue(queue).add(payload)
    with daemon_thread(daemon_client, queue, lambda data: hashlib.sha256(data).hexdigest()):
        value = job.result(timeout=60)
    # Then: the args went to S3 instead of inline, the job ran, and its small result went to S3
    assert job.tier == "s3", f"at {pct:.0f}% of maxmemory"
    status = job.status()
    assert status.state == "succeeded"
    assert status.payload_ref and status.payload_ref["size"] > len(payload)
    assert value == hashlib.sha256(payload).hexdigest()
    assert status.result_ref, "the daemon's inline result was not rerouted through S3"

    # And: below the mark again, the same call travels inline (the mark made the difference)
    drain_filler(r)
    again = client.queue(queue).add(payload)
    assert again.tier == "inline"
    with daemon_thread(daemon_client, queue, lambda data: len(data)):
        assert again.result(timeout=60) == len(payload)
    assert again.status().result_ref is None


def test_given_redis_past_its_hard_mark_when_adding_then_a_typed_error_and_no_job(
    small_redis, start_local_gateway
):
    # Given: Redis past the hard mark (95 %)
    server, r = small_redis
    gateway = start_local_gateway(**single_server_env(server.url))
    client, _ = clients_for(gateway, retry=RetryPolicy(max_attempts=2, max_retry_after_s=1.0))
    queue = unique_queue("full")
    client.config  # noqa: B018 - read before the wall
    fill_to(r, 96.0, 99.0)
    keys_before = control_plane_keys(r)
    # When / Then: a clear 503 redis_memory_full, not a Job
    with pytest.raises(ServiceUnavailable) as info:
        client.queue(queue).add(b"x" * 1000)
    assert info.value.code == "redis_memory_full" and info.value.status == 503
    assert control_plane_keys(r) == keys_before, "a refused enqueue left something in Redis"
    # And: once daemons (here: the filler's owner) free memory, the same call succeeds
    drain_filler(r)
    assert client.queue(queue).add(b"x" * 1000).tier == "inline"


def test_given_a_redis_that_fills_up_when_submitting_many_inline_jobs_then_every_returned_job_runs_or_the_call_raises(
    small_redis, start_local_gateway, caplog
):
    # Given: no guard (marks at 100 %), so Redis itself refuses writes (OOM, noeviction), and a
    # daemon held inside its first job until the client has met the wall, so the queue grows into
    # it however fast or slow the machine is (a daemon merely slower than the client drained the
    # queue in time on a quiet CI machine, and the wall was never met)
    server, _ = small_redis
    caplog.set_level(logging.WARNING, logger="payloadstore")
    gateway = start_local_gateway(
        **single_server_env(server.url),
        REDIS_MEMORY_HIGH_WATER_PCT="100",
        REDIS_MEMORY_HARD_PCT="100",
    )
    client, daemon_client = clients_for(
        gateway, retry=RetryPolicy(max_attempts=3, base_s=0.05, max_retry_after_s=0.3)
    )
    queue = unique_queue("oom")
    # twice the headroom: with the daemon held, the wall is met whatever Redis's overhead
    payloads = [os.urandom(128 << 10) for _ in range(2 * HEADROOM // (128 << 10))]
    returned, refused = [], []
    wall_met = threading.Event()

    def held_digest(data):
        assert wall_met.wait(timeout=120), "the client never finished submitting"
        return hashlib.sha256(data).hexdigest()

    # When
    with daemon_thread(daemon_client, queue, held_digest):
        try:
            for payload in payloads:
                try:
                    returned.append((client.queue(queue).add(payload), payload))
                except ServiceUnavailable as e:  # EnqueueUnconfirmed is one
                    refused.append(e)
                    wall_met.set()  # the daemon now drains, and later adds may get through
        finally:
            wall_met.set()
        # Then: every job the SDK returned runs to the right result (zero phantoms)
        for job, payload in returned:
            assert job.result(timeout=120) == hashlib.sha256(payload).hexdigest(), job
    walls = [m for m in caplog.messages if "what=enqueue" in m and "status=503" in m]
    assert walls, "the queue never reached Redis's maxmemory: the test proved nothing"
    assert returned, "no job got through at all"
    assert len(returned) + len(refused) == len(payloads)
    assert all(e.status in (503, None) for e in refused)
