"""What REDIS_MIN_REPLICA_ACKS costs per call: p50/p99 of an inline enqueue and of a poll's
delivery (take + start), at the job store, on the local Redis Cluster of 3 primaries with a
replica each (`LocalRedisCluster`, loopback), with acks 0 (no WAIT) and 1 (EVALSHA + WAIT in one
pipeline on the owning node's connection). The handlers add the same Powertools/pydantic work
either way, so the difference here is the difference a client sees.

    .venv/bin/python bench/bench_replica_acks.py [--n 400]

Prints one line per (operation, acks) and a JSON summary; bench/RESULTS.md records a run."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from payloadstore_controlplane.store.records import InlineJob, inline_index_expiry_ms
from payloadstore_controlplane.store.redis_client import make_routed_redis
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from payloadstore_devstack.services import LocalRedisCluster

PAYLOAD = b"\x01" * 1024  # a 1 KiB inline job


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(store: RedisJobStore, n: int) -> dict[str, list[float]]:
    """n inline enqueues, then n deliveries of them (one queue per namespace slot)."""
    ns, queue = "b" + uuid.uuid4().hex[:8], "q"
    enqueue_ms: list[float] = []
    deliver_ms: list[float] = []
    for _ in range(n):
        now_ms = int(time.time() * 1000)
        job_id = uuid.uuid4().hex[:26].upper()
        job = InlineJob(job_id, now_ms, PAYLOAD, inline_index_expiry_ms(now_ms, 3600))
        t0 = time.perf_counter()
        store.enqueue_inline_many(ns, queue, [job], min_id_ms=0)
        enqueue_ms.append((time.perf_counter() - t0) * 1000)
    for i in range(n):
        t0 = time.perf_counter()
        entry = store.read_next(ns, [queue], "d1", 0, 60_000)
        assert entry is not None
        now_ms = int(time.time() * 1000)
        store.start_delivery(
            entry,
            ns,
            now_ms,
            lease=f"lease{i}",
            lease_expires_ms=now_ms + 60_000,
            consumer="d1",
            max_deliveries=5,
            limit_error="{}",
            cancel_error="{}",
        )
        deliver_ms.append((time.perf_counter() - t0) * 1000)
    return {"enqueue": enqueue_ms, "poll": deliver_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="calls per operation and setting")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalRedisCluster(data_dir=Path(tmp)).start()
        try:
            client = make_routed_redis(cluster.url, cluster=True)
            results = {}
            for acks in (0, 1, 0, 1):  # alternated, so drift shows as a spread, not a bias
                store = RedisJobStore(
                    client, result_ttl_s=3600, min_replica_acks=acks, replica_ack_timeout_ms=100
                )
                measure(store, 20)  # warm: scripts loaded, connections open
                for op, samples in measure(store, args.n).items():
                    results.setdefault((op, acks), []).extend(samples)
            summary = {}
            for (op, acks), samples in sorted(results.items()):
                p50, p99 = statistics.median(samples), percentile(samples, 0.99)
                summary[f"{op}_acks{acks}"] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}
                print(
                    f"{op:8s} acks={acks}  p50 {p50:6.3f} ms  p99 {p99:6.3f} ms  n={len(samples)}"
                )
            print(json.dumps(summary))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
