"""The pending list of a stream is scanned for timed-out deliveries (XAUTOCLAIM, inside
delivery_take.lua) at most once a second per container while the scans find nothing, and again
at once after one found a timed-out entry (a backlog drains fast). The scans are counted by
Redis itself (INFO commandstats)."""

from __future__ import annotations

import time
import uuid

import redis

from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.redis_jobs import RedisJobStore


def xautoclaim_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_xautoclaim", {}).get("calls", 0))


def test_xautoclaim_runs_at_most_once_a_second_per_stream_while_idle(redis_server):
    # Given a store whose monotonic clock the test moves, and a queue that exists
    now = [1000.0]
    client = redis.Redis.from_url(redis_server.url)
    store = RedisJobStore(client, result_ttl_s=3600, monotonic=lambda: now[0])
    ns = "rc" + uuid.uuid4().hex[:8]
    key = keys.queue(ns, "a")
    client.xgroup_create(key, keys.CONSUMER_GROUP, id="0", mkstream=True)
    before = xautoclaim_calls(client)
    # When a daemon polls the empty queue five times within the same second
    for _ in range(5):
        assert store.read_next(ns, ["a"], "d1", 0, 60_000) is None
    # Then the pending list was scanned once
    assert xautoclaim_calls(client) - before == 1
    # And again once the second has passed
    now[0] += 1.01
    store.read_next(ns, ["a"], "d1", 0, 60_000)
    assert xautoclaim_calls(client) - before == 2


def test_after_a_reclaimed_entry_the_next_poll_scans_again(redis_server):
    # Given two entries delivered to a daemon that died (idle past the visibility timeout)
    now = [1000.0]
    client = redis.Redis.from_url(redis_server.url)
    store = RedisJobStore(client, result_ttl_s=3600, monotonic=lambda: now[0])
    ns = "rc" + uuid.uuid4().hex[:8]
    key = keys.queue(ns, "a")
    client.xgroup_create(key, keys.CONSUMER_GROUP, id="0", mkstream=True)
    first, second = client.xadd(key, {"j": "A"}), client.xadd(key, {"j": "B"})
    client.xreadgroup(keys.CONSUMER_GROUP, "dead", {key: ">"}, count=2)
    time.sleep(0.2)
    # When another daemon polls twice within one second (visibility timeout 100 ms)
    got = [store.read_next(ns, ["a"], "d2", 0, 100) for _ in range(2)]
    # Then both timed-out entries come back at once, without waiting for the next second
    assert [e.stream_id for e in got if e] == [first.decode(), second.decode()]
    assert [e.job_id for e in got if e] == ["A", "B"]
