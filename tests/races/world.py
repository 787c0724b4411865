"""The explorer's world: its own redis-server (or local cluster) and S3 emulator, the handlers'
environment, a clock it moves by hand, and a snapshot of the whole Redis state.

The clock. The control plane reads time from `runtime.clock.now()` (the handlers' `deps.clock`)
and paces its upkeep (pending-list scans, queue collection) by the store's monotonic clock;
both are the explorer's here, moved only by its `advance` steps, and each run starts it at the
same place in the hour (run_start), 1-2 h ahead of the machine. Redis keeps one clock of its
own that matters: a pending entry's idle time (XAUTOCLAIM hands out an entry idle for
VISIBILITY_TIMEOUT_S). An `advance` adds the same seconds to every pending entry's idle time
(XCLAIM ... IDLE ... JUSTID to its own consumer), so a lease lapses exactly when the clock
says, never because the machine was slow.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.exceptions import ResponseError

from payloadstore_devstack.services import (
    LocalRedisCluster,
    MotoServer,
    RedisServer,
    create_payload_bucket,
    local_aws_env,
)
from tests.support.env import patched_environ
from tests.support.ssm_stall import SsmStall

BUCKET = "payloadstore-races"
REGION = "us-east-1"
MiB = 1024 * 1024
# The settings the explorer runs the control plane with: short enough that a run can lapse a
# lease, hit the delivery cap and collect a queue with a few clock steps; multipart from 5 MiB
# (S3's smallest part), so a multipart payload is 2 parts.
VISIBILITY_TIMEOUT_S = 30
STALE_CONSUMER_IDLE_S = 120
SETTINGS = {
    "VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
    "MAX_DELIVERIES": "3",
    "STALE_CONSUMER_IDLE_S": str(STALE_CONSUMER_IDLE_S),
    "MULTIPART_THRESHOLD": str(5 * MiB),
    "MULTIPART_PART_BYTES": str(5 * MiB),
    "POLL_MAX_WAIT_S": "1",
    "RESULT_MAX_WAIT_S": "1",
    "REDIS_MIN_REPLICA_ACKS": "0",
    # The settings a `settings` step changes (a deploy with new values), at their defaults: a
    # run starts from these, whatever the run before it deployed.
    "INLINE_THRESHOLD": "262144",
    "MAX_PAYLOAD_BYTES": "104857600",
    "RESULT_TTL_S": "172800",
    "CONSUME_RESULT_GRACE_S": "300",
}
# How long a container leaves SSM alone after a failed read (store/tokens.py's
# RETRY_AFTER_FAILURE_S, 5 s), scaled down as the explorer's other waits are: the `ssm`
# operation waits it out, in real time, to see the listing read again after a stall.
SSM_RETRY_AFTER_FAILURE_S = 0.3
# The values a `settings` step may deploy, each within what the settings allow (the largest
# INLINE_THRESHOLD is models/limits.py's largest_inline_threshold()).
SETTING_VALUES = {
    "INLINE_THRESHOLD": ["262144", "1000000", "3000000", "3883008"],
    "MAX_PAYLOAD_BYTES": ["104857600", "16777216", "4194304"],
    # RESULT_TTL_S is also the queue retention: the stream is trimmed of entries older than it,
    # by the control plane's clock, which runs 1-2 h (and the run's clock moves) ahead of the
    # entries' ids; a retention of a few hours would trim what is, in the run, seconds old.
    "RESULT_TTL_S": ["172800", "86400", "28800"],
    "CONSUME_RESULT_GRACE_S": ["300", "0", "3600"],
}


def run_start(now: float) -> float:
    """Where a run's wall clock starts: one second past the whole hour that follows the next.

    So a run's decisions alone fix what it does (a saved sequence replays as it ran, and a
    shrunk one still fails). Two things would otherwise depend on when the run happened:
    - where the minute and hour boundaries fall among its steps (an Idempotency-Key's minute,
      the inline index's hour, the throughput buckets);
    - how old Redis's entries look: Redis stamps them with the machine's time, which the
      explorer cannot move, and a queue is collected when its newest entry is older than
      STALE_CONSUMER_IDLE_S by the control plane's clock. Starting 1-2 h ahead of the
      machine, every entry looks that old, whatever the machine's speed (before, a run whose
      clock had moved 124 s collected a queue or not by how many real seconds had passed).
    Both stay far below what expires anything here (the shortest retention is a day)."""
    return (int(now // 3600) + 2) * 3600 + 1.0


class Clock:
    """The control plane's wall clock and its upkeep's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._wall0 = run_start(time.time())
        self._mono0 = 1_000_000.0

    def reset(self) -> None:
        """A run starts at run_start(); the monotonic clock only ever moves on."""
        self._mono0 += self.offset + 1000.0
        self.offset = 0.0
        self._wall0 = run_start(time.time())

    def now(self) -> float:
        return self._wall0 + self.offset

    def monotonic(self) -> float:
        return self._mono0 + self.offset


@dataclass
class Stack:
    cluster: bool
    redis_url: str
    s3_endpoint: str
    client: Any  # the explorer's own Redis client (not hooked: it is no operation's)
    s3: Any
    clock: Clock = field(default_factory=Clock)
    # Seconds Redis's TTLs and the objects' lifecycle were moved ahead by days passing, and
    # when (the machine's time) each move was made.
    shift_s: float = 0.0
    shifts: list[tuple[float, float]] = field(default_factory=list)
    # The proxy in front of the emulator's SSM (tests/support/ssm_stall.py): every Parameter
    # Store call of the handlers goes through it; the `ssm` operation stalls or throttles it.
    ssm: Any = None

    def written(self, last_modified: float) -> float:
        """An object's last write in the shifted time: the days that had passed by then added."""
        return last_modified + sum(s for t, s in self.shifts if t <= last_modified)

    def flush(self) -> None:
        self.shift_s = 0.0
        self.shifts = []
        if self.cluster:
            self.client.config_set("maxmemory", "0", target_nodes=self.client.PRIMARIES)
            self.client.flushall(target_nodes=self.client.PRIMARIES)
        else:
            self.client.config_set("maxmemory", "0")
            self.client.flushall()
        self.load_scripts()

    def load_scripts(self) -> None:
        """Every script of the control plane loaded up front: an EVALSHA never meets NOSCRIPT
        (which adds a SCRIPT LOAD and a second EVALSHA, steps a replay would count otherwise)."""
        from importlib import resources

        from payloadstore_controlplane.store import redis_queues

        sources = [redis_queues._QUEUE_STATS]
        for f in resources.files("payloadstore_controlplane.store.jobs").iterdir():
            if f.name.endswith(".lua"):
                sources.append(f.read_text())
        for src in sources:
            # A cluster client sends SCRIPT LOAD to every primary.
            self.client.script_load(src)

    def scan(self, pattern: str) -> list[bytes]:
        if self.cluster:
            return list(self.client.scan_iter(match=pattern, count=1000, target_nodes="primaries"))
        return list(self.client.scan_iter(match=pattern, count=1000))

    def _days_pass(self, seconds: float) -> None:
        _days_pass_impl(self, seconds)

    def advance(self, seconds: float) -> None:
        """Time passes: the clock, and every pending entry's idle time in Redis. An hour or
        more is days passing for what is stored: every key's TTL in Redis and the bucket's
        lifecycle move on, the control plane's clock does not (Redis stamps stream entries with
        the machine's time, which the explorer cannot move: a control plane days ahead would
        find every new entry days old)."""
        if seconds >= 3600:
            self._days_pass(seconds)
            return
        self.clock.offset += seconds
        add_ms = int(seconds * 1000)
        from payloadstore_controlplane.store import keys

        for key in self.scan(f"{keys.PREFIX}:{{ns:*}}:q:*"):
            if self.client.type(key) != b"stream":
                continue
            try:
                pending = self.client.xpending_range(key, keys.CONSUMER_GROUP, "-", "+", 10_000)
            except ResponseError:  # no group yet: nothing pending
                pending = []
            for p in pending:
                self.client.xclaim(
                    key,
                    keys.CONSUMER_GROUP,
                    p["consumer"],
                    0,
                    [p["message_id"]],
                    idle=int(p["time_since_delivered"]) + add_ms,
                    justid=True,
                )


def _days_pass_impl(world: Stack, seconds: float) -> None:
    """Redis's TTLs and the S3 lifecycle, `seconds` ahead: every key with a TTL has that much
    less left (gone when nothing is left, as Redis would have expired it), and every object its
    retention tag's rule would have deleted by then is deleted (the earliest the rule may: its
    days after the object's last write; S3 itself rounds up to the next midnight UTC)."""
    from payloadstore_controlplane.models.policy import RETENTION_DAYS, RETENTION_TAG

    world.shift_s += seconds
    world.shifts.append((time.time(), seconds))
    cut_ms = int(seconds * 1000)
    for key in world.scan("*"):
        ttl = world.client.pttl(key)
        if ttl is None or ttl < 0:
            continue
        if ttl <= cut_ms:
            world.client.delete(key)
        else:
            world.client.pexpire(key, ttl - cut_ms)
    now = time.time() + world.shift_s
    token = None
    while True:
        kw = {"Bucket": BUCKET, **({"ContinuationToken": token} if token else {})}
        page = world.s3.list_objects_v2(**kw)
        for obj in page.get("Contents", []):
            tags = world.s3.get_object_tagging(Bucket=BUCKET, Key=obj["Key"])["TagSet"]
            tag = next((t["Value"] for t in tags if t["Key"] == RETENTION_TAG), "")
            days = RETENTION_DAYS.get(tag, max(RETENTION_DAYS.values()))
            if world.written(obj["LastModified"].timestamp()) + days * 86_400 <= now:
                world.s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
        token = page.get("NextContinuationToken")
        if not token:
            break


@contextlib.contextmanager
def race_stack(cluster: bool = False, workdir: Path | None = None) -> Iterator[Stack]:
    """Start redis (one node, or 3 primaries in cluster mode) and the S3 emulator on free ports,
    point the handlers at them, and hand their clocks to the explorer."""
    import boto3
    import redis
    from botocore.config import Config
    from redis.cluster import RedisCluster

    with contextlib.ExitStack() as stack:
        base = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="races-")))
        if cluster:
            rc = LocalRedisCluster(data_dir=base / "cluster", primaries=3, replicas=0).start()
            stack.callback(rc.stop)
            url = rc.url
            client: Any = RedisCluster.from_url(url)
        else:
            rs = RedisServer(data_dir=base / "redis", appendonly=False).start()
            stack.callback(rs.stop)
            url = rs.url
            client = redis.Redis.from_url(url)
        s3srv = MotoServer(log_path=base / "s3.log").start()
        stack.callback(s3srv.stop)
        ssm = SsmStall(s3srv.endpoint)
        stack.callback(ssm.stop)
        from payloadstore_controlplane.store import tokens

        if hasattr(tokens, "RETRY_AFTER_FAILURE_S"):  # (a tree before issue 43 has none)
            stack.callback(setattr, tokens, "RETRY_AFTER_FAILURE_S", tokens.RETRY_AFTER_FAILURE_S)
            tokens.RETRY_AFTER_FAILURE_S = SSM_RETRY_AFTER_FAILURE_S
        env = {
            **local_aws_env(s3srv.endpoint, REGION),
            "AWS_ENDPOINT_URL_SSM": ssm.endpoint,
            "PAYLOAD_BUCKET": BUCKET,
            "REDIS_URL": url,
            "REDIS_CLUSTER": "true" if cluster else "false",
            "TOKEN_PARAMETER_PATH": "/payloadstore-races/tokens",
            "TOKEN_CACHE_S": "0",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "payloadstore",
            "POWERTOOLS_METRICS_NAMESPACE": "PayloadStore",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("RACES_LOG_LEVEL", "CRITICAL"),
            "POWERTOOLS_METRICS_DISABLED": "true",
            **SETTINGS,
        }
        stack.enter_context(patched_environ(env))
        s3 = boto3.client(
            "s3",
            endpoint_url=s3srv.endpoint,
            region_name=REGION,
            config=Config(signature_version="s3v4"),
        )
        create_payload_bucket(s3, BUCKET)
        world = Stack(cluster, url, s3srv.endpoint, client, s3, ssm=ssm)
        from payloadstore_controlplane.runtime import clock as cp_clock

        stack.callback(setattr, cp_clock, "now", cp_clock.now)
        _hand_over_clocks(world.clock)
        stack.callback(_reset_caches)
        yield world


def _reset_caches() -> None:
    from tests.integration.conftest import reset_caches

    reset_caches()


def _hand_over_clocks(clock: Clock) -> None:
    """The handlers' clock and the store's monotonic clock become the explorer's; upkeep is
    paced by that clock alone (a pending-list scan due is due by the explorer's time)."""
    from payloadstore_controlplane.handlers import _deps
    from payloadstore_controlplane.runtime import clock as cp_clock

    _reset_caches()
    cp_clock.now = clock.now  # type: ignore[assignment]
    deps = _deps.get_deps()
    deps.jobs._mono = clock.monotonic


def deploy(clock: Clock, values: dict[str, str]) -> None:
    """New settings, as a deploy brings them: every container starts cold with them (settings,
    clients and caches built anew), the clocks still the explorer's."""
    os.environ.update(values)
    _hand_over_clocks(clock)
    forget_container_state()


def deployed_defaults(clock: Clock) -> None:
    """A run starts on the default settings: redeployed when the run before changed them."""
    changed = {k: v for k, v in SETTINGS.items() if os.environ.get(k) != v}
    if changed:
        deploy(clock, changed)


def forget_container_state() -> None:
    """What one container remembers between invocations (pending-scan cursors, upkeep pacing):
    forgotten between runs, as after a cold start."""
    from payloadstore_controlplane.handlers import _deps

    jobs = _deps.get_deps().jobs
    for name in ("_reclaim_cursor", "_last_reclaim", "_last_collect", "_last_prune"):
        value = getattr(jobs, name, None)
        if isinstance(value, dict):
            value.clear()


# -- the whole Redis state -------------------------------------------------------------------


@dataclass
class Entry:
    stream_id: str
    job_id: str
    inline: bytes | None
    blobs: bytes | None
    pending: str | None  # the consumer holding it, when it is in the group's pending list


@dataclass
class Snapshot:
    jobs: dict[str, dict[str, bytes]]  # job id -> job hash
    entries: dict[str, list[Entry]]  # queue name -> its stream's entries
    inline_index: dict[str, str]  # job id -> queue (inline jobs)
    blob_records: set[str]  # sha256 hex of the namespace's recorded blobs
    kept_args: set[str]
    kept_blobs: dict[str, bytes]
    parts: dict[str, bytes]  # key suffix -> upload id, for parts hashes (job id:kind)
    # Idempotency-Key fields of the inline index: (key tail, minute chars, whether the job id
    # they make is indexed in the same hash)
    key_fields: list[tuple[str, str, bool]] = field(default_factory=list)
    # sha256 hex -> the blob record's time to live left (ms, Redis's clock), -1: none
    blob_ttl_ms: dict[str, int] = field(default_factory=dict)

    def state(self, job_id: str) -> str | None:
        h = self.jobs.get(job_id)
        if h is not None:
            return h.get("s", b"").decode() or None
        if job_id in self.inline_index:
            return "queued"
        return None

    def entries_of(self, job_id: str) -> list[Entry]:
        return [e for es in self.entries.values() for e in es if e.job_id == job_id]


def snapshot(world: Stack, namespace: str) -> Snapshot:
    from payloadstore_controlplane.store import keys

    r = world.client
    jobs: dict[str, dict[str, bytes]] = {}
    parts: dict[str, bytes] = {}
    job_keys = world.scan(f"{keys.PREFIX}:{{j:*}}:*")
    for key in job_keys:
        k = key.decode("latin-1")
        job_id = k.split("{j:", 1)[1].split("}", 1)[0]
        if k.endswith(":job"):
            raw = r.hgetall(key)
            if raw:
                jobs[job_id] = {f.decode(): v for f, v in raw.items()}
        elif ":parts:" in k:
            parts[f"{job_id}:{k.rsplit(':', 1)[1]}"] = r.hget(key, "u") or b""
    entries: dict[str, list[Entry]] = {}
    inline_index: dict[str, str] = {}
    key_fields: list[tuple[str, str, bool]] = []
    blob_records: set[str] = set()
    kept_args: set[str] = set()
    kept_blobs: dict[str, bytes] = {}
    blob_ttl_ms: dict[str, int] = {}
    ns_prefix = f"{keys.PREFIX}:{{ns:{namespace}}}:".encode()
    for key in world.scan(f"{keys.PREFIX}:{{ns:{namespace}}}:*"):
        rest = key[len(ns_prefix) :]
        if rest.startswith(b"q:"):
            queue = rest[2:].decode()
            pend: dict[str, str] = {}
            try:
                for p in r.xpending_range(key, keys.CONSUMER_GROUP, "-", "+", 10_000):
                    pend[p["message_id"].decode()] = p["consumer"].decode()
            except ResponseError:  # no group (yet): nothing pending
                pend = {}
            rows = r.xrange(key)
            entries[queue] = [
                Entry(
                    sid.decode(),
                    (f.get(b"j") or b"").decode(),
                    f.get(b"b"),
                    f.get(b"B"),
                    pend.get(sid.decode()),
                )
                for sid, f in rows
            ]
            # A pending entry whose message is gone (XDEL'd) is listed with no fields.
            for sid, consumer in pend.items():
                if not any(e.stream_id == sid for e in entries[queue]):
                    entries[queue].append(Entry(sid, "", None, None, consumer))
        elif rest.startswith(b"ix:"):
            fields = {f.decode(): v.decode() for f, v in r.hgetall(key).items()}
            for name, value in fields.items():
                if len(name) == 17 and name.startswith("k"):
                    # a keyed job's key field: `k<tail>` -> its minute's chars
                    key_fields.append((name[1:], value, value + name[1:] in fields))
                else:
                    inline_index[name] = value
        elif rest.startswith(b"b:"):
            blob_records.add(rest[2:].hex())
            blob_ttl_ms[rest[2:].hex()] = r.pttl(key)
        elif rest.startswith(b"a:"):
            tail = rest[2:].decode("latin-1")
            if tail.endswith(":B"):
                kept_blobs[tail[:-2]] = r.get(key) or b""
            else:
                kept_args.add(tail)
    return Snapshot(
        jobs,
        entries,
        inline_index,
        blob_records,
        kept_args,
        kept_blobs,
        parts,
        key_fields,
        blob_ttl_ms,
    )
