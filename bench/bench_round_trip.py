"""A small job's round trip through the handlers (enqueue, poll, result post, result get, called
in-process as Lambda would) against raw redis-py doing the same work, in more detail than
`make bench`'s one figure, on a local stack of its own:

- wall time, handlers and raw alternating `--reps` times (median of each, and of the ratios);
- CPU per round trip: this process's CPU time plus redis-server's (INFO cpu), which a loaded
  machine disturbs far less than wall time;
- per call: wall time, the part spent in redis-py, and Redis round trips (commands sent alone
  plus pipelines sent).

    .venv/bin/python bench/bench_round_trip.py [--n 300] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_e2e as e2e


def redis_cpu_s(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def wall(stack, n: int, reps: int) -> str:
    hs, rs, ratios = [], [], []
    for _ in range(reps):
        h = statistics.median(e2e.handler_round_trips(n)) * 1e6
        r = statistics.median(e2e.raw_round_trips(stack.redis.url, n)) * 1e6
        hs.append(h)
        rs.append(r)
        ratios.append(h / r)
    return (
        f"wall, median of {reps} x {n}: handlers {statistics.median(hs):,.0f} us, raw redis-py "
        f"{statistics.median(rs):,.0f} us, ratio {statistics.median(ratios):.2f}x "
        f"(per repetition: {', '.join(f'{x:.2f}' for x in ratios)})"
    )


def cpu(stack, n: int) -> str:
    import redis

    client = redis.Redis.from_url(stack.redis.url)
    out: dict[str, list[tuple[float, float]]] = {"handlers": [], "raw": []}
    for _ in range(3):
        for name, run in (
            ("handlers", lambda: e2e.handler_round_trips(n)),
            ("raw", lambda: e2e.raw_round_trips(stack.redis.url, n)),
        ):
            c0, s0 = time.process_time(), redis_cpu_s(client)
            run()
            c1, s1 = time.process_time(), redis_cpu_s(client)
            out[name].append(((c1 - c0) / (n + 10) * 1e6, (s1 - s0) / (n + 10) * 1e6))
    med = {k: [statistics.median(x[i] for x in v) for i in (0, 1)] for k, v in out.items()}
    h, r = sum(med["handlers"]), sum(med["raw"])
    return (
        f"CPU per round trip (client + redis-server): handlers {med['handlers'][0]:,.0f} + "
        f"{med['handlers'][1]:,.0f} = {h:,.0f} us, raw {med['raw'][0]:,.0f} + "
        f"{med['raw'][1]:,.0f} = {r:,.0f} us, ratio {h / r:.2f}x"
    )


def per_call(n: int) -> str:
    """Each handler call: wall time, time inside redis-py, and Redis round trips."""
    import redis
    from redis.client import Pipeline

    acc = {"s": 0.0, "trips": 0}

    def counted(cls, name):
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                acc["s"] += time.perf_counter() - started
                acc["trips"] += 1

        setattr(cls, name, wrapper)
        return original

    # A pipeline's commands are queued by its own execute_command and sent by execute().
    originals = [
        (redis.Redis, "execute_command", counted(redis.Redis, "execute_command")),
        (Pipeline, "execute", counted(Pipeline, "execute")),
    ]
    ev, ctx = e2e._events_module(), e2e.FakeContext()
    queue = f"rt-{uuid.uuid4().hex[:6]}"
    stats: dict[str, list[tuple[float, float, int]]] = {
        k: [] for k in ("enqueue", "poll", "post", "get")
    }

    def call(name, fn, event, ok):
        acc["s"], acc["trips"] = 0.0, 0
        started = time.perf_counter()
        body = e2e.invoke(fn, event, ok, ctx)
        stats[name].append((time.perf_counter() - started, acc["s"], acc["trips"]))
        return body

    try:
        for _ in range(n + 10):
            e2e.small_job_round_trip(call, queue, ev)
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
    lines = ["call       wall   in redis-py   Redis round trips   (medians, us)"]
    for name, rows in stats.items():
        rows = rows[10:]
        lines.append(
            f"{name:<8} {statistics.median(r[0] for r in rows) * 1e6:>6,.0f} "
            f"{statistics.median(r[1] for r in rows) * 1e6:>13,.0f} "
            f"{statistics.mean(r[2] for r in rows):>19.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp,
        e2e.local_stack(Path(tmp)) as stack,
    ):
        e2e.handler_round_trips(50)  # imports, connections, scripts
        print(wall(stack, args.n, args.reps))
        print(cpu(stack, args.n))
        print(per_call(args.n))


if __name__ == "__main__":
    main()
