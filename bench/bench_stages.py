"""Where the time of `queue.add()` and `job.result()` goes, stage by stage, on a local stack of its
own (the same one bench_e2e.py starts): encode, sha256, presign, upload, enqueue for an add; the
result call, download (with its sha256 check) and decode for a result. Each stage is timed in
wall clock and in this process's CPU time (CPU time moves little with the machine's load, wall
time a lot); medians over `--repeat` jobs per size. The daemon runs in this process too; its own
stages are not counted. The local gateway serves the control plane from threads of this process,
so the CPU of a control-plane call (presign, enqueue, result call) includes the handler's own
(for the enqueue: the S3 HEAD through botocore); the S3 emulator is a process of its own.

    .venv/bin/python bench/bench_stages.py [--mib 8 64 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import bench_e2e  # after the path set-up

ADD_STAGES = ("encode", "sha256", "presign", "upload", "enqueue")
RESULT_STAGES = ("result call", "download", "decode")


class Stages:
    """Wraps callables so that calls made while `counting` is on are timed under a name."""

    def __init__(self):
        self.counting = False
        self.times: dict[str, list[tuple[float, float]]] = {}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            if not self.counting:
                return fn(*args, **kwargs)
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.times.setdefault(name, []).append(
                    (time.perf_counter() - wall, time.process_time() - cpu)
                )

        return timed

    @contextmanager
    def count(self):
        self.counting = True
        try:
            yield
        finally:
            self.counting = False


def collect(sizes_mib: list[int], repeat: int) -> list[dict]:
    from payloadstore import _payloads, codec
    from payloadstore import client as client_module
    from payloadstore.daemon import Daemon

    stages = Stages()
    client_module.codec.encode = stages.wrap("encode", codec.encode)  # type: ignore[attr-defined]
    client_module.codec.decode = stages.wrap("decode", codec.decode)  # type: ignore[attr-defined]
    codec.Encoded.sha256 = stages.wrap("sha256", codec.Encoded.sha256)  # type: ignore[method-assign]
    _payloads.upload = stages.wrap("upload", _payloads.upload)
    _payloads.download = stages.wrap("download", _payloads.download)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp,
        bench_e2e.local_stack(Path(tmp)) as stack,
    ):
        client, daemon_client = bench_e2e.clients(stack, bench_e2e.Counter(), bench_e2e.Counter())
        wire = client.wire
        wire.presign_put = stages.wrap("presign", wire.presign_put)  # type: ignore[method-assign]
        wire.enqueue_ref = stages.wrap("enqueue", wire.enqueue_ref)  # type: ignore[method-assign]
        wire.job_result = stages.wrap("result call", wire.job_result)  # type: ignore[method-assign]
        daemon = Daemon(
            daemon_client,
            bench_e2e.QUEUE,
            wait_s=1.0,
            check_health=False,
            progress=False,
            install_signal_handlers=False,
        )
        queue = client.queue(bench_e2e.QUEUE)
        try:
            # Warm-up (config fetch, connections, imports), not reported.
            warm = queue.add(bench_e2e.random_bytes(1 << 20))
            message = daemon.poll()
            if message is None:
                raise SystemExit("the daemon polled nothing")
            daemon.process(message, bench_e2e.identity)
            warm.result(timeout=60)
            for mib in sizes_mib:
                payload = bench_e2e.random_bytes(bench_e2e.payload_size(mib))
                stages.times.clear()
                totals: dict[str, list[tuple[float, float]]] = {"add": [], "result": []}
                for _ in range(repeat):
                    with stages.count():
                        wall, cpu = time.perf_counter(), time.process_time()
                        job = queue.add(payload)
                        totals["add"].append(
                            (time.perf_counter() - wall, time.process_time() - cpu)
                        )
                    message = daemon.poll()
                    if message is None:
                        raise SystemExit("the daemon polled nothing")
                    daemon.process(message, bench_e2e.identity)
                    with stages.count():
                        wall, cpu = time.perf_counter(), time.process_time()
                        value = job.result(timeout=60)
                        totals["result"].append(
                            (time.perf_counter() - wall, time.process_time() - cpu)
                        )
                    if len(value) != len(payload):
                        raise SystemExit("result differs from the payload")
                    del value
                medians = {
                    name: (
                        statistics.median(w for w, _ in samples),
                        statistics.median(c for _, c in samples),
                    )
                    for name, samples in {**stages.times, **totals}.items()
                }
                rows.append({"mib": mib, "load": os.getloadavg()[0], "stages": medians})
        finally:
            client.close()
            daemon_client.close()
    return rows


def report(rows: list[dict]) -> str:
    lines = ["stage          " + "".join(f"{r['mib']:>7} MiB wall / CPU" for r in rows)]
    for name in (*ADD_STAGES, "add", *RESULT_STAGES, "result"):
        cells = []
        for r in rows:
            wall, cpu = r["stages"].get(name, (0.0, 0.0))
            cells.append(f"{wall * 1e3:>10.1f} / {cpu * 1e3:>5.1f} ms")
        label = f"= {name}()" if name in ("add", "result") else f"  {name}"
        lines.append(f"{label:<15}" + "".join(cells))
    lines.append(
        "load average (1 min) at each size: " + ", ".join(f"{r['load']:.1f}" for r in rows)
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[8, 64, 100])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(report(collect(args.mib, args.repeat)))


if __name__ == "__main__":
    main()
