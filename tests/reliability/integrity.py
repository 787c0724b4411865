"""The job-integrity faults of issue 21, run beside the load by `make reliability` (run.py).

Each fault has a flag to turn it off, is bounded in jobs and in time, runs on a thread of its own
next to the classic fault schedule, and puts its jobs into the same ledger; what it measured goes
into summary.json (`figures`) and what it saw go wrong into the job's ledger entry (`wrong`).

- lost-poll: S3 jobs whose objects are deleted before two daemons (3 workers each) that already
  block in polls of their queue take them: with PAYLOAD_LOST_POLICY retry_once each job must be
  requeued once (attempts 2) and end payload_lost, never stay queued.
- result-change: a function whose result (> INLINE_THRESHOLD, fresh random bytes every run) is
  uploaded at attempt 1, then its daemon is SIGKILLed before posting; attempt 2 returns other
  bytes and the job must succeed with them (attempts 2).
- crowd: 11 long jobs on 11 workers that heartbeat 9 visibility timeouts, then a 12th job whose
  daemon is SIGKILLed: it must be redelivered within CROWD_REDELIVERY_BOUND_S while the 11 run.
- short-ttl: jobs that heartbeat longer than RESULT_TTL_S=60 (a second gateway process with that
  setting on the same Redis and S3): they must post their result and the client must read it.
- ghost-queues: polls naming 300 queue names nobody enqueues to (and a daemon polling a real
  queue plus 15 of them): no Redis key and no set member may carry those names afterwards.
- clock-skew: daemons whose time.time() is off by -2x and +2x the visibility timeout, each with
  a job of 4 visibility timeouts and an idle second worker: exactly one run, and every heartbeat
  sent with at least VT/5 of the lease left and no more often than the schedule asks.
- redis-delay: for a bounded window the main gateway's Redis connections (through
  redis_proxy.py) get some script replies held 2.2 s, past the 1.5 s reply timeout: deliveries,
  results, payload_lost reports (a lost-poll round) and cancels of queued jobs meet it; every
  job must still end once, right, and a cancel that worked must answer as one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from payloadstore import Client, PayloadStoreError, RetryPolicy
from tests.reliability.stack import BUCKET, NAMESPACE, DaemonProcess

if TYPE_CHECKING:
    from tests.reliability.run import Entry, Run

log = logging.getLogger("reliability")

KIB = 1024
VT = 5  # VISIBILITY_TIMEOUT_S of the suite's stack (run.py)
MAX_DELIVERIES = 5
LOSTPOLL, VARY, CROWD, TTLQ, GHOSTQ, PARKED_LATE = (
    "lostpoll",
    "vary",
    "crowd",
    "ttl",
    "ghostq",
    "parked_late",
)
SKEW_BEHIND, SKEW_AHEAD = "skew_behind", "skew_ahead"

LOST_ROUNDS, LOST_PER_ROUND, LOST_WORKERS = 4, 3, 3  # two daemons of LOST_WORKERS each
LOST_ROUND_WAIT_S = 20.0
CROWD_LIVE, CROWD_RUN_S, CROWD_VICTIM_RUN_S = 11, 9.0 * VT, 4.0 * VT
CROWD_REDELIVERY_BOUND_S = 4.0 * VT
SHORT_RESULT_TTL_S = 60
TTL_RUN_S = SHORT_RESULT_TTL_S + 15.0
GHOST_NAMES, GHOST_PREFIX, GHOST_PER_POLL = 300, "ghost-", 16
SKEW_OFFSET_S, SKEW_RUN_S = 2.0 * VT, 4.0 * VT
SKEW_MIN_LEFT_S = VT / 5.0
DELAY_WINDOW_S, DELAY_S, DELAY_MAX = 25.0, 2.2, 50
# Script -> (probability that its reply is held while the window is open, most held replies).
# Names of the .lua files and of the older in-Python scripts alike.
DELAY_SCRIPTS = {
    ("delivery_start", "start_delivery"): (0.3, 15),
    ("delivery_take",): (0.05, 5),
    ("completion_complete", "complete"): (0.15, 10),
    ("completion_payload_lost", "payload_lost"): (1.0, 3),
    ("lifecycle_cancel", "cancel"): (1.0, 3),
    ("lifecycle_heartbeat", "heartbeat"): (0.2, 5),
}

FAULTS = (
    ("lost_poll", "payload_lost reports while other daemons block polling the queue"),
    ("result_change", "a redelivery whose S3 result differs from the killed attempt's"),
    ("crowd", "a dead daemon's job behind 11 live heartbeating deliveries"),
    ("short_ttl", "jobs heartbeating past RESULT_TTL_S=60 (a second gateway)"),
    ("ghost_queues", "polls of 300 unknown queue names (Redis keys stay bounded)"),
    ("clock_skew", "daemons whose clock is off by -2x / +2x the visibility timeout"),
    ("redis_delay", "Redis script replies held past the reply timeout (a proxy)"),
)


def add_integrity_flags(parser: argparse.ArgumentParser) -> None:
    for name, what in FAULTS:
        flag = name.replace("_", "-")
        parser.add_argument(f"--no-{flag}", action="store_true", help=f"skip: {what}")
    parser.add_argument(
        "--no-integrity", action="store_true", help="skip all of the issue-21 faults above"
    )


def script_names() -> dict[str, str]:
    """sha1 -> name of the control plane's Lua scripts, as redis-py registers them."""
    out: dict[str, str] = {}

    def add(name: str, text: str) -> None:
        out[hashlib.sha1(text.encode()).hexdigest()] = name

    try:
        from payloadstore_controlplane.store import (
            jobs as lua,
        )  # the .lua files (issue 21's layout)

        for name in lua.names():
            add(name, lua.source(name))
    except ImportError:
        pass
    from payloadstore_controlplane.store import redis_jobs, redis_queues

    for module in (redis_jobs, redis_queues):
        for attr, value in vars(module).items():
            if isinstance(value, str) and "redis.call" in value:
                add(attr.strip("_").lower(), value)
    return out


class IntegrityFaults:
    def __init__(self, run: Run, args: argparse.Namespace):
        self.run = run
        off = args.no_integrity
        self.on = {name: not (off or getattr(args, f"no_{name}")) for name, _ in FAULTS}
        self.errors: list[str] = []
        self.figures: dict[str, Any] = {}
        self.lost_daemons: list[DaemonProcess] = []
        self.lost_lock = threading.Lock()
        self.skew_entries: dict[str, Entry] = {}  # tag -> entry (beats checked at the end)
        self.vary_entries: list[Entry] = []

    @property
    def wants_redis_proxy(self) -> bool:
        return self.on["redis_delay"]

    # -- plumbing ------------------------------------------------------------------------------

    def lifecycle(self) -> bool:
        return self.run.lifecycle

    def start(self) -> list[threading.Thread]:
        """One thread per group of faults; each is joined by the fault schedule."""
        r = self.run
        r.figures["integrity"] = self.figures
        needs_lifecycle = ("result_change", "crowd", "short_ttl", "clock_skew")
        if not self.lifecycle():
            for name in needs_lifecycle:
                if self.on[name]:
                    log.info("integrity fault %s skipped: no job life cycle", name)
                    self.on[name] = False
        groups: list[tuple[str, float, list[Callable[[], None]]]] = [
            ("ttl", 2.0, [self.short_ttl] if self.on["short_ttl"] else []),
            ("skew", 4.0, [self.clock_skew] if self.on["clock_skew"] else []),
            (
                "vary-crowd",
                6.0,
                [
                    f
                    for n, f in (("result_change", self.result_change), ("crowd", self.crowd))
                    if self.on[n]
                ],
            ),
            (
                "queues",
                9.0,
                [
                    f
                    for n, f in (
                        ("ghost_queues", self.ghost_queues),
                        ("lost_poll", self.lost_poll),
                        ("redis_delay", self.redis_delay),
                    )
                    if self.on[n]
                ]
                + [self.stop_lost_daemons],
            ),
        ]
        threads = []
        for name, start_after_s, steps in groups:
            if not any(s != self.stop_lost_daemons for s in steps):
                continue
            t = threading.Thread(
                target=self._group, args=(name, start_after_s, steps), name=f"faults-{name}"
            )
            t.start()
            threads.append(t)
        return threads

    def _group(self, name: str, start_after_s: float, steps: list[Callable[[], None]]) -> None:
        time.sleep(start_after_s)
        for step in steps:
            try:
                step()
            except BaseException as e:
                self.errors.append(f"{step.__name__}: {type(e).__name__}: {e}")
                log.exception("integrity fault %s failed", step.__name__)

    def client(self, endpoint: str | None = None, role: str = "client") -> Client:
        r = self.run
        return Client(
            endpoint or r.stack.endpoint,
            r.stack.token(role),
            NAMESPACE,
            retry=RetryPolicy(max_attempts=10, max_backoff_s=2.0),
        )

    def daemon(self, name: str, queues: list[str], concurrency: int, **kw: Any) -> DaemonProcess:
        d = DaemonProcess(name, queues, concurrency, self.run.stack, **kw)
        self.run.daemons[name] = d
        self.run.supervisor.add(d)
        return d

    def entry(self, tag: str, queue: str, size: int, **kw: Any) -> Entry:
        from tests.reliability.run import Entry

        return Entry(tag, queue, size, **kw)

    def redis(self):
        import redis

        return redis.Redis.from_url(self.run.stack.redis.url, socket_timeout=10)

    def read_redis(self, read: Callable[[Any], Any], timeout_s: float = 30.0) -> Any:
        """`read(client)` on the stack's redis-server, tried again while the suite has it down
        (its SIGKILL and restart)."""
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            r = self.redis()
            try:
                return read(r)
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            finally:
                r.close()

    def wait_terminal(self, client: Client, entries: list[Entry], timeout_s: float) -> dict:
        """job id -> last status read, once every job is terminal or `timeout_s` passed."""
        terminal = {"succeeded", "failed", "payload_lost", "payload_corrupt", "cancelled"}
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        pending = [e for e in entries if e.job is not None]
        while pending and time.monotonic() < deadline:
            for e in list(pending):
                try:
                    status = client.job(e.job_id).status()
                except PayloadStoreError:
                    continue
                last[e.job_id] = status
                if status.state in terminal:
                    pending.remove(e)
            if pending:
                time.sleep(0.25)
        return last

    def runs_of(self, tag: str) -> list[tuple[int, float]]:
        """(pid, real time) of every run of `tag`, from the workers' run logs."""
        out = []
        for path in (self.run.state_dir / "runs").glob("*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == tag:
                    out.append((int(parts[1]), float(parts[2])))
        return sorted(out, key=lambda x: x[1])

    def where_is(self, job_id: str, queue: str) -> dict:
        """What Redis holds for a job: its hash state, the entry it points at, whether any entry
        of its queue stream (or of the group's pending list) carries it."""
        return self.read_redis(lambda r: self._where_is(r, job_id, queue))

    def _where_is(self, r: Any, job_id: str, queue: str) -> dict:
        import redis

        from payloadstore_controlplane.store import keys

        fields = {k.decode(): v for k, v in r.hgetall(keys.job(job_id)).items()}
        state = (fields.get("s") or fields.get("state") or b"").decode()
        x = (fields.get("x") or fields.get("stream_id") or b"").decode()
        stream = keys.queue(NAMESPACE, queue)
        entries = [i.decode() for i, f in r.xrange(stream) if job_id.encode() in f.values()]
        try:
            rows = r.xpending_range(stream, keys.CONSUMER_GROUP, "-", "+", 1000)
        except redis.ResponseError:  # no group yet
            rows = []
        pending = [row["message_id"].decode() for row in rows]
        return {
            "state": state,
            "entry_in_hash": x,
            "entries_in_stream": entries,
            "entry_pending": x in pending if x else False,
        }

    # -- 1. payload_lost reports while other daemons block in polls ------------------------------

    def ensure_lost_daemons(self) -> Path:
        pause = self.run.state_dir / "lostpoll.pause"
        with self.lost_lock:
            if not self.lost_daemons:
                pause.touch()
                for i in range(2):
                    self.lost_daemons.append(
                        self.daemon(
                            f"dlost{i}",
                            [LOSTPOLL],
                            LOST_WORKERS,
                            extra_args=["--pause-file", str(pause)],
                        )
                    )
                time.sleep(3.0)  # both processes up and held at the pause
        return pause

    def lost_round(
        self, client: Client, prefix: str, round_no: int, attempts: int | tuple[int, int] = 2
    ) -> list[Entry]:
        """LOST_PER_ROUND S3 jobs whose objects are gone, taken by 3 of the 6 workers polling
        LOSTPOLL while the other 3 stay blocked in their polls. `attempts`: what each job's
        attempts must be at the end (2: one delivery, the one requeue, the second delivery)."""
        r = self.run
        pause = self.ensure_lost_daemons()
        pause.touch()
        time.sleep(2.5)  # polls already in flight end (POLL_MAX_WAIT_S=2) before jobs go in
        entries = [
            r.submit(
                client,
                self.entry(
                    f"{prefix}{round_no}-{i}",
                    LOSTPOLL,
                    300 * KIB,
                    expect="payload_lost",
                    runs_rule="never",
                    attempts_rule=attempts,
                ),
            )
            for i in range(LOST_PER_ROUND)
        ]
        for e in entries:
            if e.job is not None:
                key = e.job.status().payload_ref["key"]
                r.stack.s3.delete_object(Bucket=BUCKET, Key=key)
        pause.unlink()  # all 6 workers poll at once: 3 take the jobs, 3 stay blocked in polls
        started = time.monotonic()
        last = self.wait_terminal(client, entries, LOST_ROUND_WAIT_S)
        took = round(time.monotonic() - started, 1)
        stranded = []
        for e in entries:
            status = last.get(e.job_id)
            if status is None or status.state not in ("payload_lost", "failed"):
                where = self.where_is(e.job_id, LOSTPOLL)
                stranded.append({"tag": e.tag, "job_id": e.job_id, **where})
                e.problems.append(
                    f"not terminal {LOST_ROUND_WAIT_S:.0f}s after its payload_lost report "
                    f"(stranded: {json.dumps(where)})"
                )
        r.event(
            f"{prefix}_round",
            round=round_no,
            jobs=len(entries),
            ended_in_s=took,
            states={e.tag: getattr(last.get(e.job_id), "state", None) for e in entries},
            attempts={e.tag: getattr(last.get(e.job_id), "attempts", None) for e in entries},
            stranded=stranded,
        )
        return entries

    def lost_poll(self) -> None:
        client = self.client()
        rounds = []
        for n in range(LOST_ROUNDS):
            entries = self.lost_round(client, "lostpoll", n)
            rounds.append(entries)
        self.figures["lost_poll"] = {
            "jobs": sum(len(x) for x in rounds),
            "idle_pollers_per_round": 2 * LOST_WORKERS - LOST_PER_ROUND,
            "stranded": sum(1 for x in rounds for e in x if e.problems),
        }
        client.close()

    def stop_lost_daemons(self) -> None:
        pause = self.run.state_dir / "lostpoll.pause"
        pause.unlink(missing_ok=True)
        for d in self.lost_daemons:
            d.stop()

    # -- 2. a redelivery whose S3 result differs from the killed attempt's -------------------

    def result_change(self) -> None:
        r = self.run
        client = self.client()
        self.daemon("dvary", [VARY], 1)
        entries = [
            r.submit(
                client,
                self.entry(
                    f"vary{i}",
                    VARY,
                    KIB,
                    mode="vary",
                    kwargs={"kill_after_store": True},
                    value_rule="varied",
                    attempts_rule=2,
                ),
            )
            for i in range(2)
        ]
        self.vary_entries = entries
        killed_log = r.state_dir / "killed_after_store.log"
        deadline = time.monotonic() + 60
        killed: dict[str, str] = {}
        while time.monotonic() < deadline and len(killed) < len(entries):
            if killed_log.exists():
                for line in killed_log.read_text().splitlines():
                    parts = line.split()
                    killed[parts[0]] = line
            time.sleep(0.2)
        for e in entries:
            if e.job_id not in killed:
                e.problems.append("the fault did not happen: no result stored before a SIGKILL")
            else:
                r.event(
                    "daemon_sigkill_after_result_upload",
                    tag=e.tag,
                    job_id=e.job_id,
                    record=killed[e.job_id],
                )
        last = self.wait_terminal(client, entries, 20 * VT)
        self.figures["result_change"] = {
            e.tag: {
                "state": getattr(last.get(e.job_id), "state", None),
                "attempts": getattr(last.get(e.job_id), "attempts", None),
            }
            for e in entries
        }
        r.daemons["dvary"].stop()
        client.close()

    def vary_runs(self) -> dict[str, list[tuple[str, str]]]:
        """tag -> [(attempt, nonce digest)] of every `vary` run."""
        out: dict[str, list[tuple[str, str]]] = {}
        path = self.run.state_dir / "vary.log"
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 4:
                    out.setdefault(parts[0], []).append((parts[2], parts[3]))
        return out

    # -- 3. a dead daemon's job behind 11 live heartbeating deliveries --------------------------

    def crowd(self) -> None:
        r = self.run
        client = self.client()
        crowd = self.daemon("dcrowd", [CROWD], CROWD_LIVE)
        live = [
            r.submit(
                client,
                self.entry(
                    f"crowd{i:02d}",
                    CROWD,
                    KIB,
                    mode="long",
                    sleep_s=CROWD_RUN_S,
                    runs_rule="once",
                    attempts_rule=1,
                ),
            )
            for i in range(CROWD_LIVE)
        ]
        for e in live:
            if r.started_pid(e.tag, 60) is None:
                e.problems.append("crowd job never started")
        victim_daemon = self.daemon("dcrowd-victim", [CROWD], 1)
        victim = r.submit(
            client,
            self.entry(
                "crowd-victim", CROWD, KIB, mode="slow", sleep_s=CROWD_VICTIM_RUN_S, attempts_rule=2
            ),
        )
        pid = r.started_pid(victim.tag, 60)
        if pid is None or pid != victim_daemon.pid:
            victim.problems.append(f"the victim job did not start on its daemon (pid {pid})")
            crowd.stop(CROWD_RUN_S + 15)
            victim_daemon.stop()
            return
        killed_at = time.time()
        victim_daemon.kill()  # the supervisor restarts it: an idle poller of `crowd`
        r.event(
            "daemon_sigkill_behind_crowd",
            daemon="dcrowd-victim",
            pid=pid,
            tag=victim.tag,
            job_id=victim.job_id,
            live_deliveries=CROWD_LIVE,
        )
        deadline = time.monotonic() + CROWD_RUN_S + 30
        again = None
        while time.monotonic() < deadline:
            later = [t for p, t in self.runs_of(victim.tag) if t > killed_at]
            if later:
                again = later[0]
                break
            time.sleep(0.2)
        live_ends = [t + CROWD_RUN_S for e in live for _, t in self.runs_of(e.tag)[:1]]
        still_live = sum(1 for end in live_ends if again is not None and end > again)
        delay = None if again is None else round(again - killed_at, 1)
        figure = {
            "redelivered_after_s": delay,
            "bound_s": CROWD_REDELIVERY_BOUND_S,
            "live_deliveries_then": still_live,
        }
        self.figures["crowd"] = figure
        r.event("crowd_redelivery", **figure)
        if delay is None:
            victim.problems.append("never redelivered")
        elif delay > CROWD_REDELIVERY_BOUND_S:
            victim.problems.append(
                f"redelivered {delay}s after its daemon died (bound {CROWD_REDELIVERY_BOUND_S:.0f}s)"
                f", {still_live} of the {CROWD_LIVE} live deliveries still running then"
            )
        elif still_live < 10:
            victim.problems.append(
                f"the fault did not hold: only {still_live} live deliveries at its redelivery"
            )
        self.wait_terminal(client, [*live, victim], CROWD_RUN_S + 30)
        crowd.stop()
        r.daemons["dcrowd-victim"].stop()
        client.close()

    # -- 4. jobs heartbeating past a short RESULT_TTL_S ----------------------------------------

    def short_ttl(self) -> None:
        r = self.run
        gateway = r.stack.start_side_gateway(
            "ttl",
            {"RESULT_TTL_S": str(SHORT_RESULT_TTL_S), "IDEMPOTENCY_TTL_S": str(SHORT_RESULT_TTL_S)},
        )
        r.event(
            "side_gateway_started", name="ttl", url=gateway.url, result_ttl_s=SHORT_RESULT_TTL_S
        )
        client = self.client(gateway.url)
        self.daemon("dttl", [TTLQ], 2, endpoint=gateway.url)
        entries = [
            r.submit(
                client,
                self.entry(
                    f"ttl{i}",
                    TTLQ,
                    size,
                    mode="long",
                    sleep_s=TTL_RUN_S,
                    runs_rule="once",
                    attempts_rule=1,
                    early=True,
                ),
            )
            for i, size in enumerate((KIB, 300 * KIB))
        ]
        figure = {}
        for e in entries:
            if e.job is None:
                continue
            job = client.job(e.job_id)
            started = time.monotonic()
            e.outcome = r.read_outcome(e, job, time.monotonic() + TTL_RUN_S + 60)
            try:
                e.early_status = job.status()
            except PayloadStoreError as err:
                e.problems.append(f"status after the result: {type(err).__name__}: {err}")
            figure[e.tag] = {
                "tier": "inline" if e.size <= 256 * KIB else "s3",
                "outcome": e.outcome,
                "read_after_s": round(time.monotonic() - started, 1),
                "runs_s": TTL_RUN_S,
            }
        self.figures["short_ttl"] = {"result_ttl_s": SHORT_RESULT_TTL_S, "jobs": figure}
        r.event("short_ttl_results", **figure)
        r.daemons["dttl"].stop()
        client.close()

    # -- 5. polls of unknown queue names -----------------------------------------------------

    def ghost_keys(self) -> dict[str, int]:
        """Redis keys, and members of the namespace's sets/hashes, that carry a ghost name."""
        return self.read_redis(self._ghost_keys)

    def _ghost_keys(self, r: Any) -> dict[str, int]:
        keys_ = sum(1 for _ in r.scan_iter(match=f"*{GHOST_PREFIX}*", count=1000))
        members = 0
        for key in r.scan_iter(match=f"ps:{{ns:{NAMESPACE}}}:*", count=1000):
            kind = r.type(key).decode()
            if kind == "set":
                members += sum(1 for _ in r.sscan_iter(key, match=f"*{GHOST_PREFIX}*"))
            elif kind == "zset":
                members += sum(1 for _ in r.zscan_iter(key, match=f"*{GHOST_PREFIX}*"))
            elif kind == "hash":
                members += sum(1 for _ in r.hscan_iter(key, match=f"*{GHOST_PREFIX}*"))
        return {"keys": keys_, "members": members, "dbsize": int(r.dbsize())}

    def ghost_queues(self) -> None:
        r = self.run
        names = [f"{GHOST_PREFIX}{i:03d}" for i in range(GHOST_NAMES)]
        before = self.ghost_keys()
        # A daemon with a typo'd queue list: one real queue and 15 names nobody uses.
        self.daemon("dghost", [GHOSTQ, *names[:15]], 1)
        client = self.client()
        entry = r.submit(client, self.entry("ghost0", GHOSTQ, KIB, runs_rule="once"))
        # The other 285 names by raw polls, twice over (a daemon restarting in a loop).
        wire = self.client(role="daemon")
        answers: dict[str, int] = {}
        started = time.monotonic()
        for _ in range(2):
            for i in range(15, GHOST_NAMES, GHOST_PER_POLL):
                chunk = names[i : i + GHOST_PER_POLL]
                try:
                    got = wire.wire.poll(chunk, wait_s=0, daemon_id="ghost-poller")
                    answer = "job" if got is not None else "204"
                except PayloadStoreError as e:
                    answer = f"{getattr(e, 'status', None)} {type(e).__name__}"
                answers[answer] = answers.get(answer, 0) + 1
        polls_s = round(time.monotonic() - started, 1)
        self.wait_terminal(client, [entry], 30)
        after = self.ghost_keys()
        figure = {
            "names": GHOST_NAMES,
            "answers": answers,
            "polls_s": polls_s,
            "before": before,
            "after": after,
        }
        self.figures["ghost_queues"] = figure
        r.event("ghost_queue_polls", **figure)
        if after["keys"] or after["members"]:
            entry.problems.append(
                f"polls of {GHOST_NAMES} unknown queue names left {after['keys']} keys and "
                f"{after['members']} set/hash members naming them"
            )
        if "job" in answers:
            entry.problems.append("a poll of unknown queue names answered a job")
        r.daemons["dghost"].stop()
        wire.close()
        client.close()

    # -- 6. daemons whose clock is off by +-2x the visibility timeout ------------------------

    def clock_skew(self) -> None:
        r = self.run
        client = self.client()
        for name, queue, offset in (
            ("dskew-behind", SKEW_BEHIND, -SKEW_OFFSET_S),
            ("dskew-ahead", SKEW_AHEAD, SKEW_OFFSET_S),
        ):
            # Two workers: the idle one polls the same queue, so a lapsed lease is taken.
            self.daemon(name, [queue], 2, extra_args=["--clock-offset-s", str(offset)])
        time.sleep(2.0)
        for queue, offset in ((SKEW_BEHIND, -SKEW_OFFSET_S), (SKEW_AHEAD, SKEW_OFFSET_S)):
            e = r.submit(
                client,
                self.entry(
                    f"{queue}0",
                    queue,
                    KIB,
                    mode="long",
                    sleep_s=SKEW_RUN_S,
                    runs_rule="once",
                    attempts_rule=1,
                ),
            )
            self.skew_entries[e.tag] = e
            r.event(
                "clock_skew_job",
                tag=e.tag,
                job_id=e.job_id,
                clock_offset_s=offset,
                runs_s=SKEW_RUN_S,
            )
        self.wait_terminal(client, list(self.skew_entries.values()), SKEW_RUN_S + 6 * VT)
        time.sleep(VT + 1)  # a second run, if the lease lapsed, would have started by now
        for name in ("dskew-behind", "dskew-ahead"):
            r.daemons[name].stop()
        self.figures["clock_skew"] = {
            tag: self.beat_stats(e) for tag, e in self.skew_entries.items()
        }
        client.close()

    def beats_of(self, job_id: str) -> list[tuple[float, float | None, str]]:
        out = []
        for path in (self.run.state_dir / "beats").glob("*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 4 and parts[0] == job_id:
                    left = None if parts[2] == "?" else float(parts[2])
                    out.append((float(parts[1]), left, parts[3]))
        return sorted(out)

    def beat_stats(self, e: Entry) -> dict:
        beats = self.beats_of(e.job_id) if e.job is not None else []
        lefts = [left for _, left, _ in beats if left is not None]
        return {
            "beats": len(beats),
            "min_lease_left_s": round(min(lefts), 3) if lefts else None,
            "max_beats": int(2 * e.sleep_s / (VT / 3.0)) + 3,
        }

    # -- 7. Redis script replies held past the reply timeout --------------------------------

    def redis_delay(self) -> None:
        r = self.run
        proxy = r.stack.redis_proxy
        if proxy is None:
            return
        r.wait_submitted(0.7)
        client = self.client()
        shas = script_names()
        rules = {name: rule for names, rule in DELAY_SCRIPTS.items() for name in names}
        targets = {
            sha: {"p": rules[name][0], "max": rules[name][1]}
            for sha, name in shas.items()
            if name in rules
        }
        proxy.delay(
            seconds=DELAY_WINDOW_S, delay_s=DELAY_S, p=0.0, max_delays=DELAY_MAX, scripts=targets
        )
        opened = time.monotonic()
        r.event(
            "redis_delay_window",
            seconds=DELAY_WINDOW_S,
            delay_s=DELAY_S,
            max_delays=DELAY_MAX,
            scripts=sorted({shas[s] for s in targets}),
            submitted_so_far=r.submitted,
        )
        # a payload_lost round, then cancels of queued jobs (a queue nobody polls), in the window
        # Deliveries whose poll answered 503 (a reply held twice) count as attempts too.
        lost = self.lost_round(client, "dlost", 0, attempts=(2, MAX_DELIVERIES))
        parked = [
            r.submit(
                client,
                self.entry(f"dparked{i}", PARKED_LATE, KIB, expect="cancelled", runs_rule="never"),
            )
            for i in range(3)
        ]
        cancels = {}
        for e in parked:
            if e.job is None:
                continue
            try:
                cancels[e.tag] = e.job.cancel().state
            except PayloadStoreError as err:
                cancels[e.tag] = f"{type(err).__name__}: {err}"
                e.problems.append(f"cancel of a queued job raised {type(err).__name__}: {err}")
        left = DELAY_WINDOW_S - (time.monotonic() - opened)
        if left > 0:
            time.sleep(left)
        time.sleep(DELAY_S + 1)
        stats = proxy.stats()

        def named(counts: dict | None) -> dict:
            return {shas.get(k, k): v for k, v in (counts or {}).items()}

        figure = {
            "delayed": stats.get("delayed"),
            "delayed_by_script": named(stats.get("delayed_by_script")),
            "resent_same_bytes": stats.get("resent"),
            "resent_by_script": named(stats.get("resent_by_script")),
            "script_calls_in_window": stats.get("window_evalsha"),
            "cancels": cancels,
            "lost_jobs": [e.tag for e in lost],
        }
        self.figures["redis_delay"] = figure
        r.event("redis_delay_done", **figure)
        if not stats.get("delayed"):
            (parked or lost)[0].problems.append("the fault did not happen: no reply was held")
        client.close()

    # -- the ledger's extra checks -------------------------------------------------------------

    def judge(self, entry: Entry) -> list[str]:
        problems: list[str] = []
        if entry.value_rule == "varied" and entry.outcome == "ok":
            runs = self.vary_runs().get(entry.tag, [])
            first = {d for a, d in runs if a == "1"}
            later = {d for a, d in runs if a not in ("1", "None")}
            if entry.result_digest in first:
                problems.append("its result is the killed attempt's, not the last attempt's")
            elif entry.result_digest not in later:
                problems.append("its result is no run's of a later attempt")
            if len(runs) < 2:
                problems.append(f"{len(runs)} run(s), expected the killed one and another")
        if entry.tag in self.skew_entries:
            stats = self.beat_stats(entry)
            if stats["min_lease_left_s"] is None or stats["beats"] == 0:
                problems.append("no heartbeat recorded")
            elif stats["min_lease_left_s"] < SKEW_MIN_LEFT_S:
                problems.append(
                    f"a heartbeat left with {stats['min_lease_left_s']}s of the lease "
                    f"(< {SKEW_MIN_LEFT_S}s: the clock-skewed daemon beat too late)"
                )
            if stats["beats"] > stats["max_beats"]:
                problems.append(
                    f"{stats['beats']} heartbeats in {entry.sleep_s:.0f}s (at most "
                    f"{stats['max_beats']}: the clock-skewed daemon beat too often)"
                )
        return problems
