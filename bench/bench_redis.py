"""Redis bytes per job (the four figures of the Redis memory goals) and control-plane hot-path
costs, on a private redis-server, through the control plane's own logic and store code.

Run: .venv/bin/python bench/bench_redis.py [--n 2000]   (copy the output into bench/RESULTS.md)

Bytes per job are `INFO memory` used_memory deltas over N jobs / N, from an empty Redis, so
they include every key a job leaves behind (job hash, done list, queue entry, inline index,
the amortised stream and index structures). Jobs go through the same functions the handlers
call (presign, enqueue, poll, result post); only S3's HEAD is stubbed (it answers "uploaded").
Inline enqueues carry an Idempotency-Key, as the SDK sends one with every submit.

Above MULTIPART_THRESHOLD (64 MiB) a job is multipart (issue 24): its parts are presigned
through the parts route, S3's ListParts, CompleteMultipartUpload and HEAD are stubbed (they
answer the parts as issued and their composite checksum).

Goals (issue 8): S3-tier queued <= 512 B and flat in payload size (a multipart job too, issue
24); S3-tier finished <= 1,024 B;
1 KiB inline queued <= payload + 400 B; 1 KiB inline finished with a 1 KiB result <=
payload + result + 600 B. Issue 26: the ended-jobs index (what lists a queue's failed,
cancelled and succeeded jobs) <= 64 B per job: `MEMORY USAGE` of the queue's ended-jobs stream
(every node, SAMPLES 0) over the N jobs that ended.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")

import redis

from payloadstore_controlplane.logic.context import Deps, Principal
from payloadstore_controlplane.logic.daemon import poll, post_result
from payloadstore_controlplane.logic.enqueue import enqueue
from payloadstore_controlplane.logic.presign import presign_parts, presign_put
from payloadstore_controlplane.models.api import (
    PartsRequest,
    PollRequest,
    PresignRequest,
    ResultPost,
)
from payloadstore_controlplane.models.domain import PayloadRef
from payloadstore_controlplane.models.policy import DEFAULT_RETENTION, RETENTION_TAG
from payloadstore_controlplane.models.settings import Settings
from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.records import sha256_hex_to_b64
from payloadstore_controlplane.store.redis_client import make_redis
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from payloadstore_controlplane.store.redis_queues import RedisQueueStats
from payloadstore_controlplane.store.s3.client import cached_s3_client
from payloadstore_controlplane.store.s3.multipart import UploadedPart
from payloadstore_controlplane.store.s3.objects import ObjectInfo
from payloadstore_controlplane.store.s3_objects import S3Objects
from payloadstore_devstack.services import RedisServer

BUCKET = "payloadstore-payloads"
NS = "bench"
CLIENT = Principal(NS, "client")
DAEMON = Principal(NS, "daemon")
GOALS = {
    "s3_queued": 512,
    "s3_finished": 1024,
    "inline_queued_over_payload": 400,
    "inline_finished_over_payload_and_result": 600,
    "ended_index": 64,
}


class UploadedObjects(S3Objects):
    """Real local presigning; HEAD answers that the object is there as issued."""

    def __init__(self):
        super().__init__(cached_s3_client("us-east-1", None), BUCKET, 900)
        self.sizes: dict[str, tuple[int, str | None]] = {}

        self.parts: dict[str, list[UploadedPart]] = {}

    def head(self, key: str):
        size, sha = self.sizes[key]
        if sha and "-" in sha:  # a multipart object's composite, as S3 answers it
            return ObjectInfo(size, sha, "application/msgpack")
        return ObjectInfo(size, sha256_hex_to_b64(sha) if sha else None, "application/msgpack")

    def tags(self, key: str) -> dict[str, str]:
        # the verifying check reads the retention tag the presign signed (namespace policies)
        return {RETENTION_TAG: DEFAULT_RETENTION}

    def create_multipart(
        self,
        key: str,
        content_type: str,
        algorithm: str = "SHA256",
        policy_headers: dict[str, str] | None = None,
    ) -> str:
        return "upload-" + uuid.uuid4().hex * 3  # S3's ids are long: kept out of the job hash

    def list_parts(self, key: str, upload_id: str):
        return self.parts[key]

    def complete_multipart(self, key: str, upload_id: str, parts) -> bool:
        return True


def multipart_job(deps: Deps, size: int, queue: str) -> str:
    """Presign (multipart), presign every part (<= 100 a call), enqueue: the control plane lists
    the parts (as issued), completes the upload and checks the composite."""
    signed = presign_put(CLIENT, PresignRequest(op="put", size=size), deps)
    assert signed.multipart is not None
    part_bytes, count = signed.multipart.part_bytes, signed.multipart.part_count
    specs, parts, digests = [], [], []
    for n in range(1, count + 1):
        length = part_bytes if n < count else size - part_bytes * (count - 1)
        digest = hashlib.sha256(os.urandom(8)).digest()
        digests.append(digest)
        specs.append({"number": n, "size": length, "sha256": digest.hex()})
        parts.append(UploadedPart(n, length, f'"{n}"', base64.b64encode(digest).decode()))
    for i in range(0, count, 100):
        presign_parts(CLIENT, PartsRequest(job_id=signed.job_id, parts=specs[i : i + 100]), deps)
    composite = base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode()
    deps.objects.parts[signed.key] = parts
    deps.objects.sizes[signed.key] = (size, f"{composite}-{count}")
    ref = PayloadRef(kind="s3", bucket=signed.bucket, key=signed.key, size=size)
    return enqueue(
        CLIENT, queue, payload_ref=ref, payload_inline=None, idempotency_key=None, deps=deps
    ).response.job_id


def used(r) -> int:
    return int(r.info("memory")["used_memory"])


def make_deps(client) -> Deps:
    # Payloads up to 1 GiB: above MULTIPART_THRESHOLD (the default, 64 MiB) a job is multipart
    # (64 parts at 1 GiB), with S3's multipart calls stubbed (UploadedObjects).
    settings = Settings(
        payload_bucket=BUCKET, redis_url="redis://unused", max_payload_bytes=1024**3
    )
    return Deps(
        settings=settings,
        jobs=RedisJobStore(client, result_ttl_s=settings.result_ttl_s),
        objects=UploadedObjects(),
        clock=time.time,
        queues=RedisQueueStats(client),
    )


def s3_job(deps: Deps, size: int, queue: str = "q") -> str:
    if deps.settings.multipart(size):
        return multipart_job(deps, size, queue)
    sha = hashlib.sha256(os.urandom(8)).hexdigest()
    signed = presign_put(CLIENT, PresignRequest(op="put", size=size, sha256=sha), deps)
    deps.objects.sizes[signed.key] = (size, sha)
    ref = PayloadRef(kind="s3", bucket=signed.bucket, key=signed.key, size=size, sha256=sha)
    return enqueue(
        CLIENT, queue, payload_ref=ref, payload_inline=None, idempotency_key=None, deps=deps
    ).response.job_id


def inline_job(deps: Deps, data: bytes, queue: str = "q") -> str:
    return enqueue(
        CLIENT,
        queue,
        payload_ref=None,
        payload_inline=data,
        idempotency_key=uuid.uuid4().hex,
        deps=deps,
    ).response.job_id


def finish(deps: Deps, result: bytes | None, result_size: int = 0, queue: str = "q") -> None:
    got = poll(DAEMON, PollRequest(namespace=NS, queues=[queue], wait_s=0, daemon_id="d1"), deps)
    if result is not None:
        body = ResultPost(resultInline=base64.b64encode(result).decode(), lease=got.lease)
    else:
        sha = hashlib.sha256(os.urandom(8)).hexdigest()
        signed = presign_put(
            DAEMON,
            PresignRequest(
                op="put",
                size=result_size,
                kind="result",
                job_id=got.job_id,
                sha256=sha,
                lease=got.lease,
            ),
            deps,
        )
        deps.objects.sizes[signed.key] = (result_size, sha)
        body = ResultPost(
            resultRef=PayloadRef(
                kind="s3", bucket=BUCKET, key=signed.key, size=result_size, sha256=sha
            ),
            lease=got.lease,
        )
    post_result(DAEMON, got.job_id, body, deps)


def fail_job(deps: Deps, queue: str) -> None:
    got = poll(DAEMON, PollRequest(namespace=NS, queues=[queue], wait_s=0, daemon_id="d1"), deps)
    error = {"type": "ValueError", "message": "bad input", "traceback": "Traceback: ..."}
    post_result(
        DAEMON, got.job_id, ResultPost.model_validate({"error": error, "lease": got.lease}), deps
    )


def index_per_job(raw, deps: Deps, n: int, group: str, make, then) -> float:
    """Bytes of the queue's ended-jobs stream of `group` per job, after N jobs ended there."""
    raw.flushall()
    for _ in range(n):
        make()
    for _ in range(n):
        then()
    key = keys.ended(NS, "ix", group)
    assert raw.xlen(key) == n, (raw.xlen(key), n)
    return raw.memory_usage(key, samples=0) / n


def per_job(raw, n: int, make, then=None) -> float:
    raw.flushall()
    time.sleep(0.05)
    before = used(raw)
    for _ in range(n):
        make()
    if then is not None:
        for _ in range(n):
            then()
    return (used(raw) - before) / n


def naive_inline(raw, n: int, data: bytes) -> float:
    raw.flushall()
    before = used(raw)
    for _ in range(n):
        raw.xadd("naive", {"payload": data})
    return (used(raw) - before) / n


def latencies_us(deps: Deps, raw) -> dict[str, float]:
    raw.flushall()
    enq, pol, res = [], [], []
    data = b"\x90" * 64
    for _ in range(500):
        t = time.perf_counter()
        inline_job(deps, data, queue="lat")
        enq.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = poll(DAEMON, PollRequest(namespace=NS, queues=["lat"], wait_s=0, daemon_id="d"), deps)
        pol.append(time.perf_counter() - t)
        t = time.perf_counter()
        post_result(DAEMON, got.job_id, ResultPost(resultInline="AQ==", lease=got.lease), deps)
        res.append(time.perf_counter() - t)
    return {
        name: statistics.median(v) * 1e6
        for name, v in (("inline enqueue", enq), ("poll", pol), ("inline result", res))
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    n = parser.parse_args().n
    kib = b"\x01" * 1024
    with tempfile.TemporaryDirectory() as d:
        server = RedisServer(data_dir=Path(d), appendonly=False).start()
        try:
            client = make_redis(server.url)
            raw = redis.Redis.from_url(server.url)
            deps = make_deps(client)
            print(
                f"redis-server {raw.info('server')['redis_version']}, "
                f"redis-py {redis.__version__}, N={n} jobs per figure"
            )
            # Warm up every path once (Redis keeps loaded scripts across FLUSHALL).
            per_job(raw, 3, lambda: s3_job(deps, 1000), lambda: finish(deps, None, 10))
            per_job(raw, 3, lambda: s3_job(deps, 1024**3))
            per_job(raw, 3, lambda: inline_job(deps, kib), lambda: finish(deps, kib))
            figures = {}
            for size in (300 * 1024, 64 * 1024 * 1024, 100 * 1024 * 1024, 1024**3):
                b = per_job(raw, n, lambda size=size: s3_job(deps, size))
                figures.setdefault("s3_queued", []).append(b)
                how = ""
                if deps.settings.multipart(size):
                    parts = -(-size // deps.settings.multipart_part_bytes_for(size))
                    how = f", multipart in {parts} parts"
                print(f"S3-tier job, queued ({size:,} B payload{how}): {b:,.0f} B (goal <= 512)")
            b = per_job(
                raw, n, lambda: s3_job(deps, 8 * 1024 * 1024), lambda: finish(deps, None, 65_536)
            )
            figures["s3_finished"] = [b]
            print(f"S3-tier job, finished with an S3 result: {b:,.0f} B (goal <= 1,024)")
            b = per_job(raw, n, lambda: inline_job(deps, kib))
            figures["inline_queued_over_payload"] = [b - len(kib)]
            print(
                f"1 KiB inline job, queued: {b:,.0f} B = payload + {b - 1024:,.0f} (goal <= +400)"
            )
            b = per_job(raw, n, lambda: inline_job(deps, kib), lambda: finish(deps, kib))
            figures["inline_finished_over_payload_and_result"] = [b - 2048]
            print(
                f"1 KiB inline job, finished with a 1 KiB result: {b:,.0f} B = payload + result "
                f"+ {b - 2048:,.0f} (goal <= +600)"
            )
            for group, make, then in (
                (
                    "failed",
                    lambda: inline_job(deps, kib, queue="ix"),
                    lambda: fail_job(deps, "ix"),
                ),
                (
                    "succeeded",
                    lambda: s3_job(deps, 8 * 1024 * 1024, queue="ix"),
                    lambda: finish(deps, None, 65_536, queue="ix"),
                ),
            ):
                b = index_per_job(raw, deps, n, group, make, then)
                figures.setdefault("ended_index", []).append(b)
                print(f"ended-jobs index ({group}), per job: {b:,.1f} B (goal <= 64)")
            b = naive_inline(raw, n, kib)
            print(f"naive inline baseline, XADD of the same 1 KiB: {b:,.0f} B")
            b = per_job(raw, n, lambda: inline_job(deps, b"\x01" * 262_144))
            print(f"256 KiB inline job, queued: {b:,.0f} B")
            for op, us in latencies_us(deps, raw).items():
                print(f"{op} (logic + store) median: {us:,.0f} us")
            met = all(max(v) <= GOALS[k] for k, v in figures.items())
            print("all five goals met" if met else "GOALS NOT MET")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
