"""What the operator views cost Redis (issue 35): the failed count and the per-minute throughput
counters, both written by the script that settles a job's end (completion_settle.lua), and the
reads the dashboard makes every refresh.

Per end, the settle script's median time for an end that is not counted (cancelled: index entry
only), a succeeded one (+ one HINCRBY and PEXPIRE) and a failed one (+ ZADD, ZREMRANGEBYSCORE,
PEXPIRE); the bytes of the failed-jobs set per failed job and of one queue's hour of counters;
and the time of the queue figures (with the failed ZCOUNT) and of the throughput read with N
failed jobs in the set. A real redis-server, one client, medians of N.

    .venv/bin/python bench/bench_operator_views.py [--n 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]


def ulid(i: int) -> str:
    """A well-formed job id per i (26 Crockford base32 characters)."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    tail = ""
    for _ in range(16):
        tail = alphabet[i % 32] + tail
        i //= 32
    return "01KB7Z6Q3N" + tail


def main() -> None:
    import redis

    from payloadstore_controlplane.store import keys
    from payloadstore_controlplane.store.redis_jobs import RedisJobStore
    from payloadstore_controlplane.store.redis_queues import RedisQueueStats
    from payloadstore_devstack.services import RedisServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as d:
        server = RedisServer(data_dir=Path(d), appendonly=False).start()
        try:
            r = redis.Redis.from_url(server.url)
            jobs = RedisJobStore(r, result_ttl_s=172_800)
            stats = RedisQueueStats(r)
            print(f"redis-server {r.info('server')['redis_version']}, N={n} ends per figure")
            figures = {}
            for state, queue in (("cancelled", "qc"), ("succeeded", "qs"), ("failed", "qf")):
                times = []
                for i in range(n):
                    now_ms = int(time.time() * 1000)
                    t = time.perf_counter()
                    jobs.settle("ns", queue, ulid(i), "", state=state, retries=0, now_ms=now_ms)
                    times.append(time.perf_counter() - t)
                figures[state] = statistics.median(times) * 1e6
            zset_bytes = r.memory_usage(keys.failed_jobs("ns", "qf")) or 0
            hour = [k for k in r.scan_iter(match="ps:{ns:ns}:tp:qs:*")]
            hash_bytes = max(r.memory_usage(k) or 0 for k in hour)
            stats.counts("ns", ["qf"], 0)
            reads = []
            for _ in range(200):
                t = time.perf_counter()
                [counts] = stats.counts("ns", ["qf"], int(time.time() * 1000) - 172_800_000)
                reads.append(time.perf_counter() - t)
            assert counts.failed == n, counts
            tp_reads = []
            for _ in range(200):
                t = time.perf_counter()
                chart = stats.throughput("ns", ["qc", "qs", "qf"], time.time())
                tp_reads.append(time.perf_counter() - t)
            assert sum(chart.succeeded) == n and sum(chart.failed) == n
            print("| settle of one end | median us |")
            print("|---|---:|")
            for state, us in figures.items():
                print(f"| {state} | {us:.1f} |")
            print()
            print(
                f"failed-jobs set: {zset_bytes} B for {n} failed jobs = {zset_bytes / n:.1f} B each"
            )
            print(f"throughput hash of one queue-hour: {hash_bytes} B")
            print(
                f"queue figures with {n} failed (script incl. ZCOUNT): {statistics.median(reads) * 1e6:.0f} us"
            )
            print(
                f"throughput of 3 queues (6 HGETALL, one pipeline): {statistics.median(tp_reads) * 1e6:.0f} us"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
