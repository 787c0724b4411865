"""XAUTOCLAIM scans the pending list: a container runs it at most once a second per stream while
it finds nothing, and again at once after it found a timed-out entry (a backlog drains fast)."""

from __future__ import annotations

import time
import uuid

import redis
from controlplane.store.redis_jobs import RedisJobStore


def test_xautoclaim_runs_at_most_once_a_second_per_stream_while_idle(redis_server):
    # Given a store whose monotonic clock the test moves, counting its XAUTOCLAIM calls
    now = [1000.0]
    client = redis.Redis.from_url(redis_server.url)
    store = RedisJobStore(client, result_ttl_s=3600, monotonic=lambda: now[0])
    calls = []
    real = client.xautoclaim
    client.xautoclaim = lambda *a, **kw: calls.append(a[0]) or real(*a, **kw)
    ns = "rc" + uuid.uuid4().hex[:8]
    # When a daemon polls an empty queue five times within the same second
    for _ in range(5):
        assert store.read_next(ns, ["a"], "d1", 0, 60_000) is None
    # Then the pending list was scanned once
    assert len(calls) == 1
    # And again once the second has passed
    now[0] += 1.01
    store.read_next(ns, ["a"], "d1", 0, 60_000)
    assert len(calls) == 2


def test_after_a_reclaimed_entry_the_next_poll_scans_again(redis_server):
    # Given two entries delivered to a daemon that died (idle past the visibility timeout)
    now = [1000.0]
    client = redis.Redis.from_url(redis_server.url)
    store = RedisJobStore(client, result_ttl_s=3600, monotonic=lambda: now[0])
    ns = "rc" + uuid.uuid4().hex[:8]
    key = f"ps:{{ns:{ns}}}:q:a"
    client.xgroup_create(key, "daemons", id="0", mkstream=True)
    first, second = client.xadd(key, {"j": "A"}), client.xadd(key, {"j": "B"})
    client.xreadgroup("daemons", "dead", {key: ">"}, count=2)
    time.sleep(0.2)
    # When another daemon polls twice within one second (visibility timeout 100 ms)
    got = [store.read_next(ns, ["a"], "d2", 0, 100) for _ in range(2)]
    # Then both timed-out entries come back at once, without waiting for the next second
    assert [e.stream_id for e in got] == [first.decode(), second.decode()]
    assert [e.job_id for e in got] == ["A", "B"]
