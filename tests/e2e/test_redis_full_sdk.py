"""Many SDK submits of inline payloads into a small Redis while a Daemon runs: every job `submit`
returns finishes with the right result, or `submit` raises a clear error; never a phantom."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
import redis

from payloadstore._http import RetryPolicy
from payloadstore.errors import EnqueueUnconfirmed
from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import RedisServer
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue
from tests.support.env import single_server_env

pytestmark = pytest.mark.e2e

PAYLOAD = 200 * 1024  # inline (under the 256 KiB threshold)


def payload(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (PAYLOAD // 32)


def reverse(data) -> bytes:
    return bytes(data)[::-1]


@pytest.mark.parametrize("guard", ["default", "off"])
def test_inline_submits_into_a_full_redis_never_return_a_phantom(
    guard, start_local_gateway, tmp_path: Path
):
    # Given a local stack whose Redis has 6 MB (noeviction), with the memory guard at its
    # defaults (85 % / 95 %) or switched off (Redis itself refuses with OOM)
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False, maxmemory="6mb").start()
    try:
        settings = single_server_env(server.url)
        if guard == "off":
            settings.update(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
        gateway = start_local_gateway(**settings)
        # Short waits between retries: the point is what a refusal looks like, not patience
        retry = RetryPolicy(max_attempts=3, base_s=0.05, max_retry_after_s=0.5)
        client, daemon_client = clients(gateway, retry=retry)
        queue = unique_queue("full")
        jobs: dict[int, object] = {}
        refused: list[BaseException] = []
        unexpected: list[BaseException] = []
        # The daemon starts once 36 payloads (7.2 MB) were submitted: the wall is reached
        # whatever the machine's speed, and the rest is submitted while the daemon drains.
        past_the_wall = threading.Event()

        def submit(first: int, step: int) -> None:
            q = client.queue(queue)
            for i in range(first, 60, step):
                try:
                    jobs[i] = q.add(payload(i))
                except EnqueueUnconfirmed as e:
                    refused.append(e)
                except BaseException as e:  # noqa: BLE001 - reported below
                    unexpected.append(e)
                if len(jobs) + len(refused) + len(unexpected) >= 36:
                    past_the_wall.set()

        # When three threads submit 60 payloads of 200 KiB (12 MB) and a Daemon works meanwhile
        threads = [threading.Thread(target=submit, args=(k, 3)) for k in range(3)]
        for t in threads:
            t.start()
        assert past_the_wall.wait(timeout=300), "submits did not get past 36"
        with daemon_thread(daemon_client, queue, reverse):
            for t in threads:
                t.join(timeout=600)
            assert not any(t.is_alive() for t in threads), "submits did not end"
            assert not unexpected, unexpected
            # Then every job submit returned finishes with its right result
            for i, job in jobs.items():
                assert job.result(timeout=120) == payload(i)[::-1], i
        # And every other submit raised the clear, retryable error, saying how to retry
        for e in refused:
            assert e.code in ("redis_memory_full", "inline_unavailable")
            assert "idempotency_key" in str(e)
        assert len(jobs) + len(refused) == 60
        assert jobs, "no submit went through"
        # And nothing is left in the queue: no job id was handed out for a job in no queue
        r = redis.Redis.from_url(server.url)
        assert r.xlen(keys.queue("dev", queue)) == 0
        # And the wall was really reached: the guard rerouted payloads through S3, or (guard
        # off) Redis itself refused writes with OOM
        if guard == "default":
            assert any(job.tier == "s3" for job in jobs.values())
        else:
            assert r.info("errorstats").get("errorstat_OOM", {}).get("count", 0) > 0
        client.close()
        daemon_client.close()
    finally:
        server.stop()
