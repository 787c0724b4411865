"""Many jobs at once over a local stack of its own (`python -m payloadstore_devstack`):

1. enqueue 1,000 x 1 KiB jobs: `queue.map` (jobs:batch) against 1,000 sequential `add()` calls;
2. end to end, 1,000 jobs run by a 4-thread daemon, results collected with `as_completed`;
3. the same with `AsyncClient` and 100 concurrent coroutines enqueueing.

Counts the control-plane requests of each. Run: .venv/bin/python bench/bench_many.py [--n 1000]

`--enqueue-only` runs the first part alone, `--repeat` times (sequential and map alternating; the
figures are medians), as `make bench` does with `--n 300` (issue 34: `queue.map` of 300 small
jobs at least 10x sequential `add()`); `--json PATH` writes its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

import payloadstore
from payloadstore import AsyncClient, Client, Daemon

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/

from tools.localstack import start_stack


class Counting(httpx.HTTPTransport):
    def __init__(self):
        super().__init__()
        self.count = 0

    def handle_request(self, request):
        self.count += 1
        return super().handle_request(request)


class AsyncCounting(httpx.AsyncHTTPTransport):
    def __init__(self):
        super().__init__()
        self.count = 0

    async def handle_async_request(self, request):
        self.count += 1
        return await super().handle_async_request(request)


def square(x):
    return x * x


def run_daemon(client: Client, queue: str, stop: threading.Event) -> threading.Thread:
    daemon = Daemon(client, [queue], concurrency=4, wait_s=1, install_signal_handlers=False)

    def loop():
        daemon.run(square)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    threading.Thread(target=lambda: (stop.wait(), daemon.stop()), daemon=True).start()
    return thread


def enqueue_figures(endpoint: str, tokens: dict, n: int, repeat: int) -> dict:
    """n x 1 KiB jobs enqueued by n sequential `add()` calls and by one `queue.map`, `repeat`
    times each, alternating (a machine whose load moves moves both); medians, and the requests
    each sent (the config fetch before the clock starts is not counted)."""
    payload = b"x" * 1000  # encodes to 1 KiB with its call envelope
    sequential: list[float] = []
    mapped: list[float] = []
    requests = {"sequential": 0, "map": 0}
    for _ in range(repeat):
        for kind, times in (("sequential", sequential), ("map", mapped)):
            transport = Counting()
            with Client(
                endpoint, tokens["client_token"], "dev", http=httpx.Client(transport=transport)
            ) as c:
                c.config  # noqa: B018 - fetched before timing
                queue = c.queue(f"bench-{kind}")
                t = time.perf_counter()
                if kind == "sequential":
                    for _ in range(n):
                        queue.add(payload)
                else:
                    jobs = queue.map([payload] * n)
                    assert len(jobs) == n
                times.append(time.perf_counter() - t)
                requests[kind] = transport.count - 1
    sequential_s, map_s = statistics.median(sequential), statistics.median(mapped)
    return {
        "n": n,
        "repeat": repeat,
        "sequential_s": sequential_s,
        "map_s": map_s,
        "sequential_requests": requests["sequential"],
        "map_requests": requests["map"],
        "speedup": sequential_s / map_s,
        "sequential_samples_s": sequential,
        "map_samples_s": mapped,
    }


def enqueue_report(f: dict) -> str:
    n = f["n"]
    return (
        f"enqueue {n} x 1 KiB: sequential add() {f['sequential_s']:.2f} s "
        f"({n / f['sequential_s']:.0f} jobs/s, {f['sequential_requests']} requests); "
        f"queue.map {f['map_s']:.2f} s ({n / f['map_s']:.0f} jobs/s, {f['map_requests']} requests); "
        f"map is {f['speedup']:.1f}x faster"
        + (f" (medians of {f['repeat']}, alternating)" if f.get("repeat", 1) > 1 else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--enqueue-only", action="store_true", help="part 1 alone")
    parser.add_argument("--repeat", type=int, default=3, help="with --enqueue-only")
    parser.add_argument("--json", type=Path, help="write part 1's figures here")
    args = parser.parse_args()
    n = args.n
    tmp = Path(tempfile.mkdtemp(prefix="bench-many-"))
    proc, stack = start_stack(tmp)
    endpoint = stack["endpoint"]
    tokens = stack["namespaces"]["dev"]
    lines = [f"bench_many: n={n}, 1 KiB jobs, local stack at {endpoint}"]
    try:
        # 1. enqueue: sequential add() vs map()
        figures = enqueue_figures(endpoint, tokens, n, args.repeat if args.enqueue_only else 1)
        lines.append(enqueue_report(figures))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        if not args.enqueue_only:
            lines += end_to_end(endpoint, tokens, n)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    print("\n".join(lines))


def end_to_end(endpoint: str, tokens: dict, n: int) -> list[str]:
    """Parts 2 and 3: a 4-thread daemon runs n jobs, enqueued by map and by AsyncClient."""
    lines: list[str] = []
    # 2. end to end with a 4-thread daemon, collected with as_completed
    transport = Counting()
    stop = threading.Event()
    with (
        Client(
            endpoint, tokens["client_token"], "dev", http=httpx.Client(transport=transport)
        ) as c,
        Client(endpoint, tokens["daemon_token"], "dev") as d,
    ):
        c.config  # noqa: B018
        t = time.perf_counter()
        jobs = c.queue("bench-e2e").map(list(range(n)))
        enqueued = transport.count
        thread = run_daemon(d, "bench-e2e", stop)
        finished = list(payloadstore.as_completed(jobs, timeout=600))
        watch_requests = transport.count - enqueued
        values = [j.result() for j in jobs]
        e2e_s = time.perf_counter() - t
        stop.set()
        thread.join(30)
    assert len(finished) == n and values == [i * i for i in range(n)]
    lines.append(
        f"end to end {n} jobs, 4-thread daemon, as_completed: {e2e_s:.2f} s "
        f"({n / e2e_s:.0f} jobs/s); {watch_requests} jobs:status requests to watch them all"
    )

    # 3. AsyncClient, 100 concurrent coroutines enqueueing, then as_completed
    async def async_run() -> tuple[float, float, int]:
        transport = AsyncCounting()
        http = httpx.AsyncClient(transport=transport)
        async with AsyncClient(endpoint, tokens["client_token"], "dev", http=http) as ac:
            await ac.config()
            q = ac.queue("bench-async")
            limit = asyncio.Semaphore(100)

            async def one(i):
                async with limit:
                    return await q.add(i)

            t = time.perf_counter()
            jobs = await asyncio.gather(*(one(i) for i in range(n)))
            enqueue_s = time.perf_counter() - t
            seen = [j async for j in payloadstore.as_completed(jobs, timeout=600)]
            values = [await j.result() for j in jobs]
            total_s = time.perf_counter() - t
            assert len(seen) == n and values == [i * i for i in range(n)]
        await http.aclose()
        return enqueue_s, total_s, transport.count

    stop = threading.Event()
    with Client(endpoint, tokens["daemon_token"], "dev") as d:
        thread = run_daemon(d, "bench-async", stop)
        enqueue_s, total_s, requests = asyncio.run(async_run())
        stop.set()
        thread.join(30)
    lines.append(
        f"AsyncClient, 100 concurrent coroutines: enqueue {n} in {enqueue_s:.2f} s "
        f"({n / enqueue_s:.0f} jobs/s); end to end {total_s:.2f} s; {requests} requests"
    )
    return lines


if __name__ == "__main__":
    main()
