"""Redis bytes per job and control-plane hot-path costs, on a private redis-server.

Run: .venv/bin/python bench/bench_redis.py   (results go to stdout; copy into bench/RESULTS.md)

Measures, with the control plane's own store code:
- Redis bytes per queued job by tier (used_memory delta over N jobs / N);
- the per-job "done" structure: a one-element list (what we use) vs a one-entry stream;
- presign latency (botocore's local signer, no network), and enqueue/poll/result through the
  store with pipelining off, as the handlers do it.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

import redis
from controlplane.models.domain import new_job_id
from controlplane.store.redis_client import make_redis
from controlplane.store.redis_jobs import RedisJobStore

from payloadstore.devstack.services import RedisServer

N = 2000


def used(r) -> int:
    return int(r.info("memory")["used_memory"])


def per_job_bytes(store: RedisJobStore, r, tier: str, payload: bytes | None) -> float:
    r.flushall()
    before = used(r)
    for _ in range(N):
        job_id = new_job_id()
        fields = {
            "namespace": "bench",
            "queue": "q",
            "state": "queued",
            "tier": tier,
            "attempts": 0,
            "payload_size": len(payload) if payload else 8_388_608,
            "created_at": repr(time.time()),
            "updated_at": repr(time.time()),
        }
        ref = None
        if payload is None:
            ref = (
                '{"bucket":"payloadstore-payloads","contentType":"application/msgpack","key":"payloads/'
                f'2026/11/29/{job_id}/args","kind":"s3","sha256":"{"a" * 64}","size":8388608}}'
            )
            fields["payload_ref"] = ref
        store.begin_enqueue(job_id, fields, int(time.time() * 1000), 10_000)
        store.append_to_queue("bench", "q", job_id, inline=payload, ref_json=ref, min_id_ms=0)
    return (used(r) - before) / N


def done_structure_bytes(r) -> dict[str, float]:
    out = {}
    for kind in ("list", "stream"):
        r.flushall()
        before = used(r)
        for i in range(N):
            if kind == "list":
                r.rpush(f"ps:{{j:{i}}}:done", "succeeded")
            else:
                r.xadd(f"ps:{{j:{i}}}:done", {"state": "succeeded"})
        out[kind] = (used(r) - before) / N
    return out


def presign_latency_us() -> float:
    import os

    from controlplane.store.s3_objects import S3Objects, cached_s3_client

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    objects = S3Objects(cached_s3_client("us-east-1", None), "payloadstore-payloads", 900)
    objects.presign_put("payloads/x", 10, "application/msgpack", "a" * 64)  # warm
    samples = []
    for _ in range(500):
        t = time.perf_counter()
        objects.presign_put(
            f"payloads/2026/11/29/{new_job_id()}/args", 8_388_608, "application/msgpack", "a" * 64
        )
        samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples)


def store_op_latency_us(store: RedisJobStore, r) -> dict[str, float]:
    r.flushall()
    enq, poll, done = [], [], []
    for _ in range(1000):
        job_id = new_job_id()
        t = time.perf_counter()
        store.begin_enqueue(
            job_id,
            {
                "namespace": "bench",
                "queue": "q",
                "state": "queued",
                "tier": "inline",
                "attempts": 0,
            },
            int(time.time() * 1000),
            10_000,
        )
        store.append_to_queue("bench", "q", job_id, inline=b"\x90" * 64, ref_json=None, min_id_ms=0)
        enq.append(time.perf_counter() - t)
        t = time.perf_counter()
        queue, sid, fields = store.read_next("bench", ["q"], "d1", 0, 300_000)
        store.start_delivery(job_id, sid, "d1", time.time())
        poll.append(time.perf_counter() - t)
        t = time.perf_counter()
        outcome = store.complete(
            job_id, "succeeded", "inline:x", time.time(), {"result_inline": b"\x01"}
        )
        store.drop_entry("bench", queue, outcome.args[0])
        done.append(time.perf_counter() - t)
    return {
        name: statistics.median(v) * 1e6
        for name, v in (("enqueue", enq), ("poll", poll), ("result", done))
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        server = RedisServer(data_dir=Path(d), appendonly=False).start()
        try:
            client = make_redis(server.url)
            raw = redis.Redis.from_url(server.url)
            store = RedisJobStore(client, result_ttl_s=172_800)
            print(
                f"redis-server {raw.info('server')['redis_version']}, redis-py {redis.__version__}, N={N}"
            )
            for label, tier, payload in (
                ("s3 reference + job hash", "s3", None),
                ("inline 1 KiB + job hash", "inline", b"\x01" * 1024),
                ("inline 256 KiB + job hash", "inline", b"\x01" * 262_144),
            ):
                print(
                    f"bytes per queued job, {label}: {per_job_bytes(store, raw, tier, payload):,.0f}"
                )
            for kind, b in done_structure_bytes(raw).items():
                print(f"bytes per done marker as a one-element {kind}: {b:,.0f}")
            for op, us in store_op_latency_us(store, raw).items():
                print(f"store {op} median: {us:,.0f} us")
            print(f"presign_put (local SigV4 signing) median: {presign_latency_us():,.0f} us")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
