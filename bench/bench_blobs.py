"""Blobs (issue 25) over a local stack of its own (`python -m payloadstore_devstack`):

1. a `queue.map` of N (1,000) jobs sharing one 256 MiB blob: bytes the client sent to S3 (the
   blob's PUT, counted on the wire), and the daemon's blob cache (downloads, hits);
2. the same map without a blob, for comparison (time, and what the model would cost sent as
   each job's arguments instead: N x 256 MiB through S3);
3. Redis bytes per queued job, with and without the blob (INFO used_memory over N queued jobs);
4. with --rss: peak RSS above baseline, each in a process of its own, of `client.blob(path)` of
   a --rss-gib (4) GiB file, of a Daemon function reading `.path` of it (hashing the file), and
   of a function returning `ps.blob(path)` of it (uploaded by the daemon).

Run: .venv/bin/python bench/bench_blobs.py [--n 1000] [--blob-mib 256] [--rss --rss-gib 4]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import redis

import payloadstore as ps
from payloadstore import Client, Daemon
from payloadstore._blob_cache import BlobCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/

from tools.localstack import start_stack

MiB = 1 << 20


class CountingS3(httpx.HTTPTransport):
    """Bytes of the request bodies sent through the client's S3 connection."""

    def __init__(self):
        super().__init__()
        self.sent = 0
        self.requests = 0

    def handle_request(self, request):
        self.requests += 1
        self.sent += int(request.headers.get("content-length") or 0)
        return super().handle_request(request)


def use_model(model, i):
    # What a job does with a shared model: look at its file (already in the cache).
    return i if model is None else (i, model.path.stat().st_size)


def run_daemon(
    client: Client, queue: str, stop: threading.Event
) -> tuple[threading.Thread, Daemon]:
    daemon = Daemon(client, [queue], concurrency=4, wait_s=1, install_signal_handlers=False)
    thread = threading.Thread(target=lambda: daemon.run(use_model), daemon=True)
    thread.start()
    threading.Thread(target=lambda: (stop.wait(), daemon.stop()), daemon=True).start()
    return thread, daemon


def queued_bytes(r: redis.Redis, queue: str) -> int:
    """What the queued jobs hold in Redis: their queue stream (an inline job is its entry; its
    blob list is the entry's `B` field), measured exactly (MEMORY USAGE ... SAMPLES 0). The
    inline index (job id -> queue, ~30 B per job) is the same with and without blobs."""
    return int(r.memory_usage(f"ps:{{ns:dev}}:q:{queue}", samples=0))


def write_random(path: Path, nbytes: int) -> None:
    with open(path, "wb") as f:
        left = nbytes
        block = os.urandom(8 * MiB)
        while left > 0:
            # Distinct content per run; cheap: one random block, its tail rewritten per piece.
            piece = block[: min(left, len(block))]
            f.write(piece)
            left -= len(piece)
            block = block[1:] + os.urandom(1)


def bench_map(stack: dict, n: int, blob_mib: int, tmp: Path) -> list[str]:
    endpoint, tokens = stack["endpoint"], stack["namespaces"]["dev"]
    r = redis.Redis.from_url(stack["redis_url"])
    lines = []
    model_path = tmp / "model.bin"
    write_random(model_path, blob_mib * MiB)
    s3 = CountingS3()
    results = {}
    for label, with_blob in (("with a blob", True), ("without a blob", False)):
        queue = f"bench-blobs-{'b' if with_blob else 'n'}-{os.getpid()}"
        cache = BlobCache(tmp / f"cache-{label[:4]}")
        with (
            Client(
                endpoint, tokens["client_token"], "dev", s3_http=httpx.Client(transport=s3)
            ) as c,
            Client(endpoint, tokens["daemon_token"], "dev") as d,
        ):
            d.blobs._cache = cache
            c.config  # noqa: B018 - fetched before timing
            t = time.perf_counter()
            model = c.blob(model_path) if with_blob else None
            blob_s = time.perf_counter() - t
            t = time.perf_counter()
            jobs = c.queue(queue).starmap([(model, i) for i in range(n)], progress=False)
            enqueue_s = time.perf_counter() - t
            per_job = queued_bytes(r, queue) / n
            stop = threading.Event()
            thread, _ = run_daemon(d, queue, stop)
            finished = list(ps.as_completed(jobs, timeout=1800))
            run_s = time.perf_counter() - t
            values = [j.result() for j in jobs]
            stop.set()
            thread.join(30)
        assert len(finished) == n
        expected = [[i, blob_mib * MiB] for i in range(n)] if with_blob else list(range(n))
        assert values == expected, values[:3]
        results[label] = per_job
        line = (
            f"queue.starmap of {n} jobs {label}: enqueue {enqueue_s:.2f} s, all done "
            f"{run_s:.2f} s; Redis {per_job:.0f} B per queued job"
        )
        if with_blob:
            line += (
                f"; client.blob of {blob_mib} MiB {blob_s:.2f} s; bytes sent to S3 "
                f"{s3.sent / MiB:.1f} MiB in {s3.requests} requests "
                f"(without blobs: {n} x {blob_mib} MiB = {n * blob_mib / 1024:.0f} GiB); daemon "
                f"cache: {cache.downloads} download(s), {cache.bytes_downloaded / MiB:.0f} MiB, "
                f"{cache.hits} hits"
            )
            assert cache.downloads == 1 and cache.hits >= n - 1
            assert s3.sent <= blob_mib * MiB + MiB
        lines.append(line)
    delta = results["with a blob"] - results["without a blob"]
    lines.append(f"Redis bytes per job, with the blob minus without: {delta:.0f} B")
    model_path.unlink()
    return lines


# -- bounded RSS: each measurement in a process of its own ----------------------------------


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler:
    """The process's resident set, sampled every 10 ms: its peak above the RSS at start."""

    def __init__(self):
        self.base = current_rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, current_rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss())
        return self.peak - self.base


def child(mode: str, stack_file: str, path: str, queue: str) -> None:
    """One measurement, printed as JSON: peak RSS above the baseline taken after set-up."""
    stack = json.loads(Path(stack_file).read_text())
    endpoint, tokens = stack["endpoint"], stack["namespaces"]["dev"]
    if mode == "put":
        with Client(endpoint, tokens["client_token"], "dev") as c:
            c.config  # noqa: B018
            sampler = RssSampler()
            t = time.perf_counter()
            b = c.blob(path)
            out = {"sha256": b.sha256, "seconds": time.perf_counter() - t}
    else:
        with Client(endpoint, tokens["daemon_token"], "dev") as d:
            d.blobs._cache = BlobCache(Path(path).parent / f"cache-{mode}")
            daemon = Daemon(d, [queue], wait_s=1, install_signal_handlers=False)
            d.config  # noqa: B018
            sampler = RssSampler()

            def read_path(model):
                h = hashlib.sha256()
                with open(model.path, "rb") as f:
                    while chunk := f.read(8 * MiB):
                        h.update(chunk)
                return h.hexdigest()

            def make(_):
                return ps.blob(path)

            t = time.perf_counter()
            daemon.run(read_path if mode == "read" else make, max_jobs=1)
            out = {"seconds": time.perf_counter() - t}
    out["rss_above_baseline"] = sampler.stop()
    out["baseline"] = sampler.base
    out["ru_maxrss"] = peak_rss()
    print(json.dumps(out))


def run_child(mode: str, stack_file: Path, path: Path, queue: str = "") -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(stack_file), str(path), queue],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_rss(stack: dict, stack_file: Path, gib: int, tmp: Path) -> list[str]:
    endpoint, tokens = stack["endpoint"], stack["namespaces"]["dev"]
    path = tmp / "large.bin"
    write_random(path, gib * 1024 * MiB)
    lines = []
    put = run_child("put", stack_file, path)
    lines.append(
        f"client.blob(path) of {gib} GiB: peak RSS +{put['rss_above_baseline'] / MiB:.0f} MiB "
        f"above baseline ({put['baseline'] / MiB:.0f} MiB), {put['seconds']:.1f} s"
    )
    queue = f"bench-rss-{os.getpid()}"
    with Client(endpoint, tokens["client_token"], "dev") as c:
        job = c.queue(queue).add(ps.Blob(put["sha256"], path.stat().st_size))
        read = run_child("read", stack_file, path, queue)
        assert job.result(timeout=600) == put["sha256"]
        lines.append(
            f"Daemon function reading .path of it (download into the cache, then hashing the "
            f"file): peak RSS +{read['rss_above_baseline'] / MiB:.0f} MiB, {read['seconds']:.1f} s"
        )
        # Other content (one byte more), so the daemon uploads it.
        with open(path, "ab") as f:
            f.write(b"!")
        job = c.queue(queue).add(0)
        made = run_child("make", stack_file, path, queue)
        back = job.result(timeout=600)
        assert back.size == gib * 1024 * MiB + 1
        lines.append(
            f"ps.blob(path) of a {gib} GiB file as a function's result (hashed and uploaded by "
            f"the daemon): peak RSS +{made['rss_above_baseline'] / MiB:.0f} MiB, "
            f"{made['seconds']:.1f} s"
        )
    path.unlink()
    drop_objects(stack, "blobs/")
    return lines


def drop_objects(stack: dict, prefix: str) -> None:
    """Delete the bench's objects before the stack stops (it would save them to its state dir)."""
    import boto3

    from payloadstore_devstack.s3_credentials import LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY

    s3 = boto3.client(
        "s3",
        endpoint_url=stack["s3_endpoint"],
        region_name="us-east-1",
        aws_access_key_id=LOCAL_ACCESS_KEY_ID,
        aws_secret_access_key=LOCAL_SECRET_ACCESS_KEY,
    )
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack["bucket"], Prefix=prefix):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=stack["bucket"], Key=obj["Key"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--blob-mib", type=int, default=256)
    parser.add_argument("--rss", action="store_true", help="also the bounded-RSS checks")
    parser.add_argument("--rss-gib", type=int, default=4)
    parser.add_argument("--skip-map", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-blobs-"))
    proc, stack = start_stack(tmp)
    lines = [f"bench_blobs: local stack at {stack['endpoint']}"]
    try:
        if not args.skip_map:
            lines += bench_map(stack, args.n, args.blob_mib, tmp)
            drop_objects(stack, "blobs/")
        if args.rss:
            lines += bench_rss(stack, tmp / "devstack.json", args.rss_gib, tmp)
        print("\n".join(lines), flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
