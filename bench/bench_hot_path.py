"""The hot path of a small job: the four handlers (enqueue, poll, result post, result get, called
in-process as Lambda calls them) against the minimal hand-written redis-py sequence doing the
same steps on the same redis-server, side by side in interleaved blocks (issue 34):

    raw: HSET job + XADD; XREADGROUP + HSET running; HSET result + RPUSH done + XACK + XDEL;
         BLMOVE done + HGETALL -- 10 round trips, no Lua, no WAIT.

The payload is 1 KiB of msgpack (the SDK's raw-body enqueue) and the result 1 KiB (the SDK's
resultInline post). A handler sample is the time spent inside the four `lambda_handler` calls
(building the proxy events, which API Gateway does on AWS, is left out); a raw sample is the
ten commands. Blocks alternate (handlers, raw, handlers, raw, ...) so that a machine whose load
moves under the run moves both; the figure is the median of each side over all blocks, and the
ratio of those medians (the per-block ratios beside it). The process runs nothing else (no local
gateway, no scheduler thread), as a Lambda container runs one invocation at a time; the
redis-server is one of its own (appendonly, as the local stack's). The namespace is one that has
enqueued keyed jobs for over an hour, as on any control plane past its first hour: its
keyed-since marker is in the past, so a repeated Idempotency-Key is looked up by its key field
alone (store/jobs/enqueue_inline.lua). `--first-hour` leaves the marker unset: the first hour
after an upgrade from a control plane without key fields, when minutes before the marker are
also looked up one by one.

    .venv/bin/python bench/bench_hot_path.py [--n 1000] [--blocks 20] [--log-level INFO]
        [--metrics] [--first-hour] [--one-core] [--json out.json]

Unpinned, on a machine running nothing else, is issue 34's measure and the goal's: redis-server
runs on a CPU of its own and every round trip waits for it, as every call from Lambda waits for
ElastiCache across the network (a raw command here: 46-50 us of redis-py CPU, 30-32 us of
waiting). With another process busy the figure moves towards the one-CPU one (3.15x on
2026-12-04 with one busy loop beside it, 1.59x without), so run it on a quiet machine.
`--one-core` runs this process and its redis-server on one CPU: no wait at all, Redis's CPU on
the handlers' timeline, a switch between the two processes at every round trip. That is the
CPU-bound extreme, reproducible run to run, and the harder comparison for the handlers, whose
cost is CPU, not waiting; it is reported for reference, beside the network round trip from which
it too is under the goal (`--floor --one-core` counts each side's round trips; see
`break_even_rtt_us`, and docs/design.md, "the hot path's goal").
    .venv/bin/python bench/bench_hot_path.py --profile [--n 300]   # cProfile of the handlers
    .venv/bin/python bench/bench_hot_path.py --floor [--one-core]  # time inside redis-py calls,
        # four calls to an empty route, and the bound both set on the ratio
    .venv/bin/python bench/bench_hot_path.py --server-time  # redis-server's time, per script
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]

NS = "dev"
PAYLOAD_BYTES = 1024
GOAL_RATIO = 2.0
DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - the process's whole life


def _payload() -> tuple[bytes, bytes]:
    """A 1 KiB call ({"args": [<bytes>], "kwargs": {}}) and a 1 KiB result, msgpack as the SDK."""
    import msgpack

    call = msgpack.packb({"args": [b"a" * 1000], "kwargs": {}})
    call = msgpack.packb({"args": [b"a" * (1000 + PAYLOAD_BYTES - len(call))], "kwargs": {}})
    result = msgpack.packb(b"r" * (PAYLOAD_BYTES - 3))
    assert len(call) == len(result) == PAYLOAD_BYTES, (len(call), len(result))
    return call, result


def _env(redis_url: str, log_level: str = "INFO") -> dict[str, str]:
    from payloadstore_devstack.stack import handler_env

    # S3 is never contacted by an inline job: the endpoint need not answer. Logs at INFO by
    # default, as deployed (written to /dev/null: formatting them is the cost), metrics off, as
    # the local stack runs them (--metrics: on, as deployed, their EMF lines to /dev/null too).
    return handler_env(
        redis_url=redis_url,
        s3_endpoint="http://127.0.0.1:9",
        bucket="bench-payloads",
        extra={"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": log_level},
    )


class Handlers:
    """One small job through the four handlers; run() gives the seconds spent inside them."""

    def __init__(self, queue: str):
        import importlib.util

        spec = importlib.util.spec_from_file_location("bench_events", REPO / "events/generate.py")
        assert spec and spec.loader
        self.ev = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.ev)
        from payloadstore_controlplane.handlers import daemon, jobs
        from payloadstore_controlplane.observability import logger
        from payloadstore_devstack.gateway_events import LocalLambdaContext

        self.jobs, self.daemon = jobs, daemon
        self.context_class = LocalLambdaContext
        logger.registered_handler.setStream(DEVNULL)
        self.queue = queue
        call, result = _payload()
        self.result_b64 = base64.b64encode(result).decode()
        self.enqueue_event = self.ev.event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": NS, "queue": queue},
            body=base64.b64encode(call).decode(),
            headers={"Content-Type": "application/msgpack", "Idempotency-Key": "k"},
            b64=True,
        )
        self.poll_event = self.ev.event(
            "POST",
            "/v1/daemon/poll",
            None,
            role="daemon",
            body={"namespace": NS, "queues": [queue], "wait_s": 0, "daemon_id": "bench-d"},
        )

    def _call(self, fn, event, ok: int) -> tuple[float, dict | None]:
        # What the Lambda runtime hands the handler (the local gateway's own), 30 s to run.
        context = self.context_class(
            function_name="bench",
            aws_request_id="bench",
            deadline=time.monotonic() + 30,
            invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:bench",
            log_group_name="/aws/lambda/bench",
        )
        with contextlib.redirect_stdout(DEVNULL):  # EMF metric lines, when on
            started = time.perf_counter()
            out = fn.lambda_handler(event, context)
            took = time.perf_counter() - started
        body = json.loads(out["body"]) if out.get("body") else None
        if out["statusCode"] != ok:
            raise SystemExit(f"{event['path']} answered {out['statusCode']}: {out.get('body')}")
        return took, body

    def run(self) -> float:
        enqueue = copy.deepcopy(self.enqueue_event)
        key = uuid.uuid4().hex
        enqueue["headers"]["Idempotency-Key"] = key
        enqueue["multiValueHeaders"]["Idempotency-Key"] = [key]
        t1, enq = self._call(self.jobs, enqueue, 201)
        job_id = enq["job_id"]
        t2, polled = self._call(self.daemon, copy.deepcopy(self.poll_event), 200)
        if polled["job_id"] != job_id:
            raise SystemExit(f"polled {polled['job_id']}, enqueued {job_id}")
        post = self.ev.event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": NS, "job_id": job_id},
            role="daemon",
            body={"resultInline": self.result_b64, "lease": polled["lease"]},
        )
        t3, _ = self._call(self.daemon, post, 204)
        get = self.ev.event(
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": NS, "job_id": job_id},
            query={"wait": "0"},
        )
        t4, got = self._call(self.jobs, get, 200)
        if not got or got.get("state") != "succeeded":
            raise SystemExit(f"round trip ended {got}")
        return t1 + t2 + t3 + t4


class Raw:
    """The same job by hand with redis-py: 10 round trips, no Lua, no WAIT."""

    CLEANUP_CALLS = 1  # the DEL after the clock stops, which floor() does not count

    def __init__(self, redis_url: str):
        import redis

        self.r = redis.Redis.from_url(redis_url)
        tag = uuid.uuid4().hex[:6]
        self.stream, self.group = f"raw:{{q{tag}}}:stream", "g"
        self.done_prefix = f"raw:{{q{tag}}}"
        self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        self.payload, self.result = _payload()

    def run(self) -> float:
        r = self.r
        started = time.perf_counter()
        job_id = uuid.uuid4().hex
        key = f"raw:{{j:{job_id}}}"
        done = f"{self.done_prefix}:done:{job_id}"
        # enqueue
        r.hset(key, mapping={"ns": NS, "queue": "q", "state": "queued", "attempts": 0})
        r.xadd(self.stream, {"job": job_id, "inline": self.payload})
        # poll
        entries = r.xreadgroup(self.group, "c", {self.stream: ">"}, count=1)
        sid = entries[0][1][0][0]
        r.hset(key, mapping={"state": "running", "attempts": 1})
        # result post
        r.hset(key, mapping={"state": "succeeded", "result": self.result})
        r.rpush(done, "1")
        r.xack(self.stream, self.group, sid)
        r.xdel(self.stream, sid)
        # result get
        r.blmove(done, done, 0.01, "LEFT", "RIGHT")
        got = r.hgetall(key)
        took = time.perf_counter() - started
        if got[b"state"] != b"succeeded" or got[b"result"] != self.result:
            raise SystemExit("raw round trip failed")
        r.delete(key, done)
        return took


def measure(redis_url: str, n: int, blocks: int, warm: int = 50) -> dict:
    handlers, raw = Handlers(f"hp-{uuid.uuid4().hex[:6]}"), Raw(redis_url)
    for _ in range(warm):  # imports, connections, scripts
        handlers.run()
        raw.run()
    per_block = max(1, n // blocks)
    h_all: list[float] = []
    r_all: list[float] = []
    ratios = []
    cpu = {"handlers": 0.0, "raw": 0.0}
    for _ in range(blocks):
        c0 = time.process_time()
        h = [handlers.run() for _ in range(per_block)]
        c1 = time.process_time()
        r = [raw.run() for _ in range(per_block)]
        c2 = time.process_time()
        cpu["handlers"] += c1 - c0
        cpu["raw"] += c2 - c1
        h_all += h
        r_all += r
        ratios.append(statistics.median(h) / statistics.median(r))
    h_med, r_med = statistics.median(h_all), statistics.median(r_all)
    jobs = per_block * blocks
    return {
        "n": jobs,
        "blocks": blocks,
        "payload_bytes": PAYLOAD_BYTES,
        "handlers_us": h_med * 1e6,
        "raw_us": r_med * 1e6,
        "ratio": h_med / r_med,
        "block_ratios": ratios,
        "block_ratio_median": statistics.median(ratios),
        "handlers_cpu_us": cpu["handlers"] / jobs * 1e6,
        "raw_cpu_us": cpu["raw"] / jobs * 1e6,
        "load_average": os.getloadavg(),
        "goal": GOAL_RATIO,
    }


def report(out: dict) -> str:
    load = " ".join(f"{x:.1f}" for x in out["load_average"])
    # run_all.py's section: the unpinned run, with the one-CPU run beside it.
    pinned = out.get("one_core")
    also = "\n" + report(pinned) if isinstance(pinned, dict) else ""
    return (
        f"small job hot path, {out['n']:,} jobs in {out['blocks']} interleaved blocks, "
        f"{out['payload_bytes']:,} B payload and result, {out.get('log_level', 'INFO')} logs, "
        f"{'first hour of key fields, ' if out.get('first_hour') else ''}"
        f"{'one CPU, ' if out.get('pinned') is True else ''}metrics "
        f"{'on' if out.get('metrics') else 'off'}, load average {load}: "
        f"handlers {out['handlers_us']:,.0f} us, raw redis-py (10 round trips) "
        f"{out['raw_us']:,.0f} us, ratio {out['ratio']:.2f}x (goal <= {out['goal']:.0f}x; per "
        f"block: median {out['block_ratio_median']:.2f}x, "
        f"{min(out['block_ratios']):.2f}-{max(out['block_ratios']):.2f}x); CPU of this process "
        f"per job: handlers {out['handlers_cpu_us']:,.0f} us, raw {out['raw_cpu_us']:,.0f} us"
        + also
    )


def server_time(redis_url: str, n: int = 1000) -> str:
    """Redis's own time per job (`INFO commandstats`, which counts a script's whole run under
    EVALSHA and the commands it calls under their own names as well), and per script."""
    import hashlib

    import redis

    handlers = Handlers(f"hp-{uuid.uuid4().hex[:6]}")
    for _ in range(50):
        handlers.run()
    scripts_dir = REPO / "functions/payloadstore_controlplane/store/jobs"
    names = {hashlib.sha1(f.read_bytes()).hexdigest(): f.stem for f in scripts_dir.glob("*.lua")}
    r = redis.Redis.from_url(redis_url)
    r.config_resetstat()
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100 * n)
    r.slowlog_reset()
    for _ in range(n):
        handlers.run()
    stats = r.info("commandstats")
    per_script: dict[str, float] = {}
    for entry in r.slowlog_get(100 * n):
        command = entry["command"]
        words = command.split() if isinstance(command, (bytes, str)) else command
        word = [w.decode() if isinstance(w, bytes) else w for w in words[:2]]
        if word and word[0].upper() == "EVALSHA":
            name = names.get(word[1], word[1][:8])
            per_script[name] = per_script.get(name, 0.0) + entry["duration"] / n
    evalsha = stats.get("cmdstat_evalsha", {}).get("usec", 0) / n
    called = sum(
        v["usec"] / n
        for k, v in stats.items()
        if k.startswith("cmdstat_") and k != "cmdstat_evalsha" and "|" not in k
    )
    scripts_a_job = stats.get("cmdstat_evalsha", {}).get("calls", 0) / n
    lines = [
        (
            f"redis-server time per job ({n:,} jobs, commandstats): EVALSHA {evalsha:,.0f} us "
            f"({scripts_a_job:.0f} a job), commands {called:,.0f} us (those the scripts call "
            "and the rest)"
        )
    ]
    lines += [
        f"  {name:<24} {us:6.1f} us a job (SLOWLOG)"
        for name, us in sorted(per_script.items(), key=lambda kv: -kv[1])
    ]
    return "\n".join(lines)


def floor_report(row: dict) -> str:
    """One floor round: what the handlers' time is made of, and the bound the framework and
    the six round trips set on the ratio whatever the control plane's own code costs. "The
    rest" is a difference of medians (handlers - inside redis-py - empty route), an estimate."""
    raw, redis_part, framework = row["raw_us"], row["in_redis_us"], row["framework_us"]
    ours = row["handlers_us"] - redis_part - framework
    bound = (redis_part + framework) / raw
    room = GOAL_RATIO * raw - redis_part - framework
    return (
        f"handlers {row['handlers_us']:,.0f} us a job, of it inside redis-py {redis_part:,.0f} us "
        f"({redis_part / raw:.2f}x raw); raw {raw:,.0f} us; four calls to an empty route "
        f"{framework:,.0f} us; the rest (the control plane's own code) {ours:,.0f} us; "
        f"bound with no code of ours {bound:.2f}x, room for ours under {GOAL_RATIO:.0f}x "
        f"{room:,.0f} us; round trips a job: handlers {row['handlers_round_trips']:g}, raw "
        f"{row['raw_round_trips']:g}; under {GOAL_RATIO:.0f}x from a network round trip of "
        f"{break_even_rtt_us(row):,.0f} us"
    )


def break_even_rtt_us(row: dict) -> float:
    """The network round trip (us, added to every Redis call) from which the handlers are
    within GOAL_RATIO of the raw sequence, from one measured round of `floor()`:
    (handlers + h*r) <= GOAL_RATIO * (raw + n*r), h and n the round trips each side makes. On
    AWS every Redis call crosses the network between Lambda and ElastiCache, and redis-server's
    CPU is not the function's; on one CPU here both are on the same timeline and r is ~0 (the
    local figure is the CPU-bound extreme). 0 when the ratio is met at r = 0; inf when the
    handlers make as many round trips as the goal allows the raw sequence."""
    h, raw = row["handlers_us"], row["raw_us"]
    over = h - GOAL_RATIO * raw
    if over <= 0:
        return 0.0
    slope = GOAL_RATIO * row["raw_round_trips"] - row["handlers_round_trips"]
    return over / slope if slope > 0 else float("inf")


class EmptyRoutes:
    """The framework alone, as a lower bound: four calls per job, as a small job makes, to a
    route that does nothing, on the handlers' own resolver (`new_resolver()`: Powertools' REST
    resolver with validation, taken by the direct path) behind their own `lambda_entry` (logger
    context, correlation id, the same formatter), two of the four writing one INFO line as a
    job's enqueue and result post do. No Redis, no code of a route, an answer of two fields."""

    def __init__(self, handlers: Handlers):
        from pydantic import BaseModel

        from payloadstore_controlplane.handlers._resolver import new_resolver
        from payloadstore_controlplane.observability import lambda_entry, logger

        class Answer(BaseModel):
            job_id: str
            state: str

        app = new_resolver()
        self.log_line = [False]

        def empty(ns: str, job_id: str) -> Answer:
            if self.log_line[0]:
                logger.info("job read")
            return Answer(job_id=job_id, state="succeeded")

        # Real types, not this module's postponed strings: the resolver validates with them.
        empty.__annotations__.update(ns=str, job_id=str, return_=Answer)
        empty.__annotations__["return"] = empty.__annotations__.pop("return_")
        app.get("/v1/namespaces/<ns>/jobs/<job_id>/result")(empty)

        @lambda_entry
        def lambda_handler(event, context):
            return app.resolve(event, context)

        self.handlers = handlers
        self.fn = type("EmptyModule", (), {"lambda_handler": staticmethod(lambda_handler)})
        self.event = handlers.ev.event(
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": NS, "job_id": "01M8Z0XCA0CJEVW6CXBCRMBX0M"},
            query={"wait": "0"},
        )

    def run(self) -> float:
        took = 0.0
        for logs in (True, False, True, False):
            self.log_line[0] = logs
            t, _ = self.handlers._call(self.fn, copy.deepcopy(self.event), 200)
            took += t
        return took


def floor(redis_url: str, n: int = 1000, rounds: int = 3, blocks: int = 20) -> list[dict]:
    """How much of the handlers' time is spent inside redis-py calls (the scripts, their round
    trips and the client's own work) and in the framework alone (four calls to an empty route,
    `EmptyRoutes`), against the raw sequence: together the part of the ratio no change to the
    control plane's own Python can remove while a small job takes these six round trips on this
    stack. Medians over interleaved blocks, per round."""
    import redis.client as rc

    handlers, raw = Handlers(f"hp-{uuid.uuid4().hex[:6]}"), Raw(redis_url)
    empty = EmptyRoutes(handlers)
    inside = [0.0]
    depth = [0]
    trips = [0]  # outermost redis-py calls (a command, or a pipeline): one round trip each

    def timed(cls, name):
        original = getattr(cls, name)

        def call(*a, **k):
            depth[0] += 1
            started = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    inside[0] += time.perf_counter() - started
                    trips[0] += 1

        setattr(cls, name, call)
        return original

    originals = [(rc.Redis, "execute_command"), (rc.Pipeline, "execute")]
    saved = [timed(cls, name) for cls, name in originals]
    try:
        for _ in range(50):
            handlers.run()
            raw.run()
            empty.run()
        out = []
        for _ in range(rounds):
            # Interleaved blocks, medians per side, as measure(): the load moves under a run.
            h_all: list[float] = []
            in_all: list[float] = []
            r_all: list[float] = []
            e_all: list[float] = []
            h_trips: list[int] = []
            r_trips: list[int] = []
            for _ in range(blocks):
                for _ in range(n // blocks):
                    inside[0], trips[0] = 0.0, 0
                    h_all.append(handlers.run())
                    in_all.append(inside[0])
                    h_trips.append(trips[0])
                for _ in range(n // blocks):
                    trips[0] = 0
                    r_all.append(raw.run())
                    r_trips.append(trips[0] - Raw.CLEANUP_CALLS)
                e_all += [empty.run() for _ in range(n // blocks)]
            out.append(
                {
                    "handlers_us": statistics.median(h_all) * 1e6,
                    "in_redis_us": statistics.median(in_all) * 1e6,
                    "raw_us": statistics.median(r_all) * 1e6,
                    "framework_us": statistics.median(e_all) * 1e6,
                    "handlers_round_trips": statistics.median(h_trips),
                    "raw_round_trips": statistics.median(r_trips),
                }
            )
        return out
    finally:
        for (cls, name), original in zip(originals, saved, strict=True):
            setattr(cls, name, original)


def profile(n: int) -> None:
    import cProfile
    import pstats

    handlers = Handlers(f"hp-{uuid.uuid4().hex[:6]}")
    for _ in range(50):
        handlers.run()
    # CPU time, not wall: a wait on a socket (Redis, or the scheduler of a loaded machine) is not
    # what this profile is after.
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for _ in range(n):
        handlers.run()
    prof.disable()
    stats = pstats.Stats(prof)
    if os.environ.get("BENCH_PROFILE_DUMP"):
        stats.dump_stats(os.environ["BENCH_PROFILE_DUMP"])
    # Own time by where the code lives (socket waits apart: they are Redis and the scheduler).
    groups: dict[str, float] = {}
    for (file, _line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "socket" in name or "select" in name:
            group = "socket waits"
        elif "site-packages/" in file:
            group = file.split("site-packages/")[1].split("/")[0]
        elif "payloadstore_controlplane" in file:
            group = (
                "payloadstore_controlplane/"
                + file.split("payloadstore_controlplane/")[1].split("/")[0]
            )
        elif file.startswith("~") or "python3" in file:
            group = "stdlib/builtins"
        else:
            group = "other"
        groups[group] = groups.get(group, 0.0) + tt
    for group, tt in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"{group:<48} {tt / n * 1e6:>8,.0f} us per job (profiled)")
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(60)


def _past_first_hour(redis_url: str) -> None:
    """The namespace's keyed-since marker two hours back, as a control plane past its first
    hour has it (see the module docstring)."""
    import redis

    from payloadstore_controlplane.models.domain import job_id_time_chars
    from payloadstore_controlplane.store import keys

    since = job_id_time_chars(int(time.time() * 1000) - 7_200_000)
    redis.Redis.from_url(redis_url).set(keys.inline_keyed_since(NS), since)


def run(
    n: int = 1000,
    blocks: int = 20,
    metrics: bool = False,
    log_level: str = "INFO",
    first_hour: bool = False,
    one_core: bool = False,
) -> dict:
    """The figure on a redis-server of its own."""
    from payloadstore_devstack.services import RedisServer

    if one_core:
        # Before the server starts: it inherits the affinity.
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})

    with tempfile.TemporaryDirectory(prefix="bench-hot-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "redis").start()
        try:
            if not first_hour:
                _past_first_hour(server.url)
            for name, value in _env(server.url, log_level).items():
                os.environ[name] = value
            os.environ["POWERTOOLS_METRICS_DISABLED"] = "false" if metrics else "true"
            out = measure(server.url, n, blocks)
            out.update(metrics=metrics, log_level=log_level, first_hour=first_hour, pinned=one_core)
            return out
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    # Many short blocks: the load of this shared machine moves within seconds; both sides see it.
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--floor", action="store_true", help="time inside redis-py calls vs the raw sequence"
    )
    parser.add_argument(
        "--server-time", action="store_true", help="redis-server's time per job and per script"
    )
    parser.add_argument("--metrics", action="store_true", help="EMF metrics on, as deployed")
    parser.add_argument("--log-level", default="INFO", help="POWERTOOLS_LOG_LEVEL (as deployed)")
    parser.add_argument(
        "--first-hour", action="store_true", help="keyed-since marker unset (see the docstring)"
    )
    parser.add_argument(
        "--one-core", action="store_true", help="this process and its redis-server on one CPU"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.floor or args.server_time:
        from payloadstore_devstack.services import RedisServer

        if args.one_core:
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        with tempfile.TemporaryDirectory(prefix="bench-hot-") as tmp:
            server = RedisServer(data_dir=Path(tmp) / "redis").start()
            try:
                _past_first_hour(server.url)
                for name, value in _env(server.url, args.log_level).items():
                    os.environ[name] = value
                if args.server_time:
                    print(server_time(server.url))
                else:
                    rows = floor(server.url)
                    for row in rows:
                        print(floor_report(row))
                    if args.json:
                        args.json.write_text(
                            json.dumps({"rounds": rows, "pinned": args.one_core}, indent=1)
                        )
            finally:
                server.stop()
        return
    if args.profile:
        from payloadstore_devstack.services import RedisServer

        with tempfile.TemporaryDirectory(prefix="bench-hot-") as tmp:
            server = RedisServer(data_dir=Path(tmp) / "redis").start()
            try:
                if not args.first_hour:
                    _past_first_hour(server.url)
                for name, value in _env(server.url).items():
                    os.environ[name] = value
                profile(args.n)
            finally:
                server.stop()
        return
    out = run(args.n, args.blocks, args.metrics, args.log_level, args.first_hour, args.one_core)
    print(report(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
