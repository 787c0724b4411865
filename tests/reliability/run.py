"""`make reliability`: a load of jobs through a stack of our own while faults hit it, then a ledger
that checks every job.

Load: JOBS jobs (default 2,000) from 4 client threads, sizes mixing 1 KiB (inline), 300 KiB and
2 MiB (S3), taken by daemon processes (tests/reliability/worker.py) that a supervisor restarts
when they die. Each result is derived from its input (tag, sha256, bytes reversed).

Faults during the load (see RELIABILITY.md for what each one did on the last run):
  - SIGKILL of a daemon in the middle of a job (a `slow` job, killed once it has started), and of
    another daemon at a random moment of the load;
  - SIGKILL of redis-server, restarted on the same port from its append-only file;
  - deletion of a queued job's S3 object (-> payload_lost after the one requeue);
  - corruption of another's (-> payload_corrupt, never run);
  - with the job life cycle (leases, heartbeats, cap, cancel) in the SDK and control plane:
    a job running 3x the visibility timeout (heartbeats; must run exactly once), a poison job
    that SIGKILLs its daemon at every delivery (must end failed DeliveryLimitExceeded), cancels
    of queued jobs (must end cancelled and never run) and of a running job (must end cancelled);
  - the job-integrity faults of issue 21 (integrity.py): payload_lost reports while other daemons
    block in polls of the queue, a redelivery whose result differs from the killed attempt's, a
    dead daemon's job behind 11 live heartbeating deliveries, jobs that outlive a short
    RESULT_TTL_S while heartbeating, polls of 300 unknown queue names, daemons whose clock is off
    by +-2x the visibility timeout, and Redis script replies held past the reply timeout.

Ledger, per job: exactly one terminal state that stays put, the right result or the expected
error; `lost` = the client holds a job id that never reached a terminal state (or 404);
`phantom` = a job id handed out for a job that is in no queue and never ends, or a function run
for a job no client was given (or whose submit raised); `wrong` = anything else unexpected.
The last line is `reliability: N jobs, N ok, 0 lost, 0 wrong, 0 phantom`; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import payloadstore
from payloadstore import (
    Client,
    JobFailed,
    JobNotFound,
    PayloadCorrupt,
    PayloadLost,
    PayloadStoreError,
    ResultTimeout,
    RetryPolicy,
)
from tests.reliability.integrity import IntegrityFaults, add_integrity_flags
from tests.reliability.stack import (
    BUCKET,
    NAMESPACE,
    DaemonProcess,
    ReliabilityStack,
    Supervisor,
)
from tests.reliability.worker import derived, varied

KIB, MIB = 1024, 1024 * 1024
CLIENT_THREADS = 4
VISIBILITY_TIMEOUT_S = 5
MAX_DELIVERIES = 5
WORK, SLOW, FAULTS, PARKED, POISON, LONG, CANCEL = (
    "work",
    "slow",
    "faults",
    "parked",
    "poison",
    "long",
    "cancel",
)

log = logging.getLogger("reliability")


def lifecycle_available() -> bool:
    """Leases, heartbeats, the delivery cap and cancel, in this SDK (and so in its control plane)."""
    from payloadstore.client import Job

    return hasattr(Job, "cancel") and hasattr(payloadstore, "current_job")


def size_for(index: int) -> int:
    """5 % 2 MiB, 15 % 300 KiB, 80 % 1 KiB, interleaved through the load."""
    slot = index % 20
    if slot == 0:
        return 2 * MIB
    if slot in (5, 10, 15):
        return 300 * KIB
    return KIB


def data_for(tag: str, size: int) -> bytes:
    return random.Random(tag).randbytes(size)


@dataclass
class Entry:
    tag: str
    queue: str
    size: int
    mode: str = "plain"
    sleep_s: float = 0.0
    expect: str = "ok"  # ok | payload_lost | payload_corrupt | cancelled | DeliveryLimitExceeded
    runs_rule: str = "any"  # any | once | never | capped
    kwargs: dict = field(default_factory=dict)  # more keyword arguments for the function
    value_rule: str = "derived"  # derived | varied (a fresh result per run; see worker.vary)
    attempts_rule: int | tuple[int, int] | None = None  # exactly this, or within (lo, hi)
    problems: list[str] = field(default_factory=list)  # what its fault itself saw go wrong
    early: bool = False  # read by its fault (results that expire soon), not again at the end
    early_status: Any = None
    result_digest: str | None = None  # varied: the nonce digest of the result read
    job: Any = None
    submit_error: str | None = None
    outcome: str | None = None
    state: str | None = None
    verdict: str | None = None  # ok | lost | wrong | phantom
    detail: str = ""
    runs: int = 0
    attempts: int | None = None

    @property
    def job_id(self) -> str | None:
        return self.job.job_id if self.job is not None else None


@dataclass
class Ledger:
    entries: list[Entry] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry: Entry) -> Entry:
        with self.lock:
            self.entries.append(entry)
        return entry


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lifecycle = lifecycle_available() and not args.no_lifecycle
        self.integrity = IntegrityFaults(self, args)
        self.state_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="payloadstore-rel-"))
        settings = {
            "VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
            "MAX_DELIVERIES": str(MAX_DELIVERIES),
            "POLL_MAX_WAIT_S": "2",
        }
        self.stack = ReliabilityStack(
            self.state_dir, settings, with_redis_proxy=self.integrity.wants_redis_proxy
        )
        self.ledger = Ledger()
        self.events: list[dict] = []
        self.t0 = time.monotonic()
        self.submitted = 0
        self.submitted_lock = threading.Lock()
        self.load_done = threading.Event()
        self.supervisor: Supervisor | None = None
        self.daemons: dict[str, DaemonProcess] = {}
        self.fault_error: str | None = None
        self.figures: dict[str, Any] = {}  # what the faults measured, for summary.json

    # -- helpers --------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def event(self, fault: str, **what: Any) -> None:
        record = {"t_s": round(self.elapsed(), 1), "fault": fault, **what}
        self.events.append(record)
        log.info("fault %s", json.dumps(record, default=str))

    def client(self) -> Client:
        return Client(
            self.stack.endpoint,
            self.stack.token("client"),
            NAMESPACE,
            retry=RetryPolicy(max_attempts=10, max_backoff_s=2.0),
        )

    def submit(self, client: Client, entry: Entry) -> Entry:
        self.ledger.add(entry)
        data = data_for(entry.tag, entry.size)
        try:
            entry.job = client.queue(entry.queue).add(
                entry.tag, data, mode=entry.mode, sleep_s=entry.sleep_s, **entry.kwargs
            )
        except PayloadStoreError as e:
            entry.submit_error = f"{type(e).__name__}: {e}"
            log.warning("submit failed tag=%s error=%s", entry.tag, entry.submit_error)
        with self.submitted_lock:
            self.submitted += 1
        return entry

    def started_pid(self, tag: str, timeout_s: float) -> int | None:
        """The pid of the daemon process whose function started `tag` (worker's started.log)."""
        path = self.state_dir / "started.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                for line in path.read_text().splitlines():
                    parts = line.split()
                    if len(parts) >= 2 and parts[0] == tag:
                        return int(parts[1])
            time.sleep(0.05)
        return None

    def wait_submitted(self, fraction: float) -> None:
        while self.submitted < fraction * self.args.jobs and not self.load_done.is_set():
            time.sleep(0.1)

    def daemon_by_pid(self, pid: int) -> DaemonProcess | None:
        for d in self.daemons.values():
            if d.pid == pid:
                return d
        return None

    # -- the run --------------------------------------------------------------------------

    def start(self) -> None:
        log.info("state dir %s", self.state_dir)
        self.stack.start()
        log.info(
            "stack up in %.1fs: gateway %s, redis %s (AOF), s3 %s",
            self.elapsed(),
            self.stack.endpoint,
            self.stack.redis.url,
            self.stack.moto.endpoint,
        )
        s, d = self.stack, DaemonProcess
        self.daemons = {
            "d0": d("d0", [SLOW, WORK], 1, s),
            "d1": d("d1", [SLOW, WORK], 1, s),
            "d2": d("d2", [WORK], 1, s),
            # Never killed by the suite: the long job's exactly-once and the running cancel.
            # Three workers, so an idle one is polling `long` while another runs the long job.
            "d4": d("d4", [LONG, CANCEL], 3, s),
        }
        self.supervisor = Supervisor(list(self.daemons.values())).start()

    def load(self, thread_index: int, count: int) -> None:
        client = self.client()
        for i in range(count):
            index = thread_index + CLIENT_THREADS * i
            tag = f"w{index:05d}"
            self.submit(client, Entry(tag=tag, queue=WORK, size=size_for(index)))
        client.close()

    def faults(self) -> None:
        try:
            self._faults()
        except BaseException as e:
            self.fault_error = f"{type(e).__name__}: {e}"
            log.exception("the fault schedule failed")

    def _faults(self) -> None:
        threads = self.integrity.start()
        try:
            self._classic_faults()
        finally:
            for t in threads:
                t.join()
        if self.integrity.errors:
            raise RuntimeError("; ".join(self.integrity.errors))

    def _classic_faults(self) -> None:
        client = self.client()
        time.sleep(1.0)
        # 1. damaged payloads and queued cancels, on queues no daemon polls yet
        lost = [
            self.submit(client, Entry(f"lost{i}", FAULTS, 300 * KIB, expect="payload_lost"))
            for i in range(2)
        ]
        corrupt = [
            self.submit(client, Entry(f"corrupt{i}", FAULTS, 300 * KIB, expect="payload_corrupt"))
            for i in range(2)
        ]
        for e in lost + corrupt:
            e.runs_rule = "never"
        for e in lost:
            key = e.job.status().payload_ref["key"]
            self.stack.s3.delete_object(Bucket=BUCKET, Key=key)
            self.event("s3_object_deleted", tag=e.tag, job_id=e.job_id, key=key)
        for e in corrupt:
            key = e.job.status().payload_ref["key"]
            body = bytearray(self.stack.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
            body[len(body) // 2] ^= 0xFF
            self.stack.s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
            self.event("s3_object_corrupted", tag=e.tag, job_id=e.job_id, key=key)
        parked = [self.submit(client, Entry(f"parked{i}", PARKED, KIB)) for i in range(3)]
        if self.lifecycle:
            for e in parked:
                reply = e.job.cancel()
                e.expect, e.runs_rule = "cancelled", "never"
                self.event("cancel_queued", tag=e.tag, job_id=e.job_id, answer=reply.state)
            poison = self.submit(client, Entry("poison0", POISON, KIB, mode="poison"))
            poison.expect, poison.runs_rule = "DeliveryLimitExceeded", "capped"
            self.event("poison_submitted", tag=poison.tag, job_id=poison.job_id)
        self.daemons["d3"] = DaemonProcess("d3", [FAULTS, PARKED, POISON], 1, self.stack)
        self.supervisor.add(self.daemons["d3"])

        # 2. SIGKILL of a daemon in the middle of a job
        slow = self.submit(client, Entry("slow0", SLOW, 300 * KIB, mode="slow", sleep_s=3.0))
        pid = self.started_pid(slow.tag, 60)
        victim = self.daemon_by_pid(pid) if pid else None
        if victim is not None:
            victim.kill()
            self.event(
                "daemon_sigkill_mid_job",
                daemon=victim.name,
                pid=pid,
                tag=slow.tag,
                job_id=slow.job_id,
                submitted_so_far=self.submitted,
            )
        else:
            self.event("daemon_sigkill_mid_job", error="the slow job never started", pid=pid)

        # 3. the long job and the running cancel, on the daemon nobody kills
        if self.lifecycle:
            long_job = self.submit(
                client,
                Entry("long0", LONG, KIB, mode="long", sleep_s=3.0 * VISIBILITY_TIMEOUT_S),
            )
            long_job.runs_rule = "once"
            self.event("long_job_submitted", tag=long_job.tag, job_id=long_job.job_id, runs_s=15.0)
            running = self.submit(
                client, Entry("cancel0", CANCEL, KIB, mode="wait_cancel", sleep_s=120.0)
            )
            running.expect = "cancelled"
            if self.started_pid(running.tag, 60):
                reply = running.job.cancel()
                self.event(
                    "cancel_running", tag=running.tag, job_id=running.job_id, answer=reply.state
                )

        # 4. SIGKILL of redis-server mid-load (40 % submitted), restarted from its AOF
        self.wait_submitted(0.4)
        aof_before = _dir_size(self.stack.state_dir / "redis")
        killed_at = time.monotonic()
        self.stack.kill_redis()
        time.sleep(1.0)
        self.stack.start_redis()
        self.event(
            "redis_sigkill_restart",
            down_s=round(time.monotonic() - killed_at, 2),
            aof_bytes=aof_before,
            submitted_so_far=self.submitted,
        )

        # 5. a daemon SIGKILLed at an arbitrary moment of the load (60 % submitted)
        self.wait_submitted(0.6)
        blind = self.daemons["d2"]
        pid = blind.pid
        blind.kill()
        self.event("daemon_sigkill_blind", daemon="d2", pid=pid, submitted_so_far=self.submitted)
        client.close()

    # -- the ledger -----------------------------------------------------------------------

    def check(self, entry: Entry, client: Client, deadline: float) -> None:
        if entry.job is None:
            entry.outcome = "submit_failed"
            return
        if entry.early:
            return  # its fault read it while it was still kept (short RESULT_TTL_S)
        entry.outcome = self.read_outcome(entry, client.job(entry.job_id), deadline)

    def value_ok(self, entry: Entry, value: Any) -> bool:
        data = data_for(entry.tag, entry.size)
        if entry.value_rule == "derived":
            return value == derived(entry.tag, data)
        # varied: the derived part, and a nonce whose digest is the one it carries
        try:
            nonce = bytes(value["nonce"])
            entry.result_digest = str(value["nonce_sha256"])
            return value == varied(entry.tag, data, nonce, value["attempt"]) | {"t": value["t"]}
        except (KeyError, TypeError):
            return False

    def read_outcome(self, entry: Entry, job: Any, deadline: float) -> str | None:
        outcome = None
        for _ in range(3):
            try:
                value = job.result(timeout=max(1.0, deadline - time.monotonic()))
                outcome = "ok" if self.value_ok(entry, value) else "wrong_value"
            except ResultTimeout as e:
                outcome = f"pending:{e.state}"
            except JobNotFound:
                outcome = "not_found"
            except PayloadLost:
                outcome = "payload_lost"
            except PayloadCorrupt:
                outcome = "payload_corrupt"
            except JobFailed as e:
                outcome = f"failed:{e.type}"
            except PayloadStoreError as e:
                if type(e).__name__ == "JobCancelled":
                    outcome = "cancelled"
                else:
                    outcome = f"error:{type(e).__name__}: {e}"
                    time.sleep(1.0)
                    continue
            break
        return outcome

    def judge(self, entry: Entry, runs: collections.Counter, final: dict[str, Any]) -> None:
        entry.runs = runs.get(entry.tag, 0)
        if entry.job is None:
            entry.verdict = "phantom" if entry.runs else "ok"
            entry.detail = f"submit raised ({entry.submit_error}); runs={entry.runs}"
            return
        status = entry.early_status if entry.early else final.get(entry.job_id)
        entry.state = status.state if status is not None else None
        entry.attempts = status.attempts if status is not None else None
        outcome = entry.outcome or ""
        if outcome == "not_found" or outcome.startswith("pending:"):
            entry.verdict = "phantom" if self.in_no_queue(entry) else "lost"
            entry.detail = outcome
            return
        expected = "ok" if entry.expect == "ok" else entry.expect
        if entry.expect == "DeliveryLimitExceeded":
            expected = "failed:DeliveryLimitExceeded"
        problems = []
        if outcome != expected:
            problems.append(f"outcome {outcome}, expected {expected}")
        terminal_state = {
            "ok": "succeeded",
            "payload_lost": "payload_lost",
            "payload_corrupt": "payload_corrupt",
            "cancelled": "cancelled",
            "DeliveryLimitExceeded": "failed",
        }[entry.expect]
        if entry.state != terminal_state:
            problems.append(f"final state {entry.state}, expected {terminal_state}")
        if entry.runs_rule == "once" and entry.runs != 1:
            problems.append(f"ran {entry.runs} times, expected exactly once")
        if entry.runs_rule == "never" and entry.runs:
            problems.append(f"ran {entry.runs} times, expected never")
        if entry.runs_rule == "capped" and not 1 <= entry.runs <= MAX_DELIVERIES:
            problems.append(f"ran {entry.runs} times, expected 1..{MAX_DELIVERIES}")
        if entry.expect == "ok" and entry.runs < 1:
            problems.append("succeeded without its function running")
        rule = entry.attempts_rule
        if rule is not None:
            lo, hi = rule if isinstance(rule, tuple) else (rule, rule)
            if entry.attempts is None or not lo <= entry.attempts <= hi:
                expected = f"{lo}" if lo == hi else f"{lo}..{hi}"
                problems.append(f"attempts {entry.attempts}, expected {expected}")
        problems += self.integrity.judge(entry) + entry.problems
        entry.verdict = "wrong" if problems else "ok"
        entry.detail = "; ".join(problems)

    def in_no_queue(self, entry: Entry) -> bool:
        """True when the job's id is in no entry of its queue stream (a phantom, not a slow job)."""
        import redis

        from payloadstore_devstack.gateway import ensure_functions_on_path

        ensure_functions_on_path()
        from payloadstore_controlplane.store import keys

        r = redis.Redis.from_url(self.stack.redis.url)
        try:
            for _id, fields in r.xrange(keys.queue(NAMESPACE, entry.queue)):
                if entry.job_id.encode() in fields.values():
                    return False
            return True
        except redis.RedisError:
            return False
        finally:
            r.close()

    def read_runs(self) -> collections.Counter:
        runs: collections.Counter = collections.Counter()
        for path in (self.state_dir / "runs").glob("*.log"):
            for line in path.read_text().splitlines():
                if line.strip():
                    runs[line.split()[0]] += 1
        return runs

    # -- main -----------------------------------------------------------------------------

    def execute(self) -> int:
        self.start()
        total = self.args.jobs
        per_thread = [total // CLIENT_THREADS + (i < total % CLIENT_THREADS) for i in range(4)]
        threads = [
            threading.Thread(target=self.load, args=(i, n), name=f"client-{i}", daemon=True)
            for i, n in enumerate(per_thread)
        ]
        fault_thread = threading.Thread(target=self.faults, name="faults")
        load_started = self.elapsed()
        for t in threads:
            t.start()
        fault_thread.start()
        for t in threads:
            t.join()
        self.load_done.set()
        fault_thread.join()
        submitted_s = self.elapsed() - load_started
        log.info("%d jobs submitted in %.1fs", len(self.ledger.entries), submitted_s)

        # Results, from 4 client threads again; one deadline for the whole load.
        deadline = time.monotonic() + self.args.result_deadline_s
        entries = list(self.ledger.entries)
        shards = [entries[i::CLIENT_THREADS] for i in range(CLIENT_THREADS)]

        def collect(shard: list[Entry]) -> None:
            client = self.client()
            for entry in shard:
                self.check(entry, client, deadline)
            client.close()

        collectors = [threading.Thread(target=collect, args=(s,)) for s in shards]
        for t in collectors:
            t.start()
        for t in collectors:
            t.join()
        drained_s = self.elapsed() - load_started
        log.info("every result read %.1fs after the load started", drained_s)

        dead = self.stack.dead()
        if dead:
            # Not a verdict on the product: something outside the suite killed the stack.
            log.error("aborted: the stack's %s exited on its own", ", ".join(dead))
            self.supervisor.stop()
            self.stack.stop()
            print(f"reliability: aborted, the stack's {', '.join(dead)} died", flush=True)
            return 2
        # Exactly one terminal state: after one more visibility timeout (any late redelivery
        # would have happened by then), every job still reads the same terminal state.
        time.sleep(VISIBILITY_TIMEOUT_S + 2)
        final = self.final_status(entries)
        self.supervisor.stop()
        runs = self.read_runs()
        for entry in entries:
            self.judge(entry, runs, final)
        known = {e.tag for e in entries}
        phantom_runs = sorted(tag for tag in runs if tag not in known)
        return self.report(entries, runs, phantom_runs, submitted_s, drained_s)

    def final_status(self, entries: list[Entry]) -> dict[str, Any]:
        """Every job's status once more, from 4 client threads."""
        out: dict[str, Any] = {}

        def read(shard: list[Entry]) -> None:
            client = self.client()
            for entry in shard:
                if entry.job is None or entry.early:
                    continue
                try:
                    out[entry.job_id] = client.job(entry.job_id).status()
                except PayloadStoreError:
                    continue
            client.close()

        shards = [entries[i::CLIENT_THREADS] for i in range(CLIENT_THREADS)]
        readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in shards]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        return out

    def report(self, entries, runs, phantom_runs, submitted_s, drained_s) -> int:
        verdicts = collections.Counter(e.verdict for e in entries)
        phantom = verdicts["phantom"] + len(phantom_runs)
        lost, wrong, ok = verdicts["lost"], verdicts["wrong"], verdicts["ok"]
        bad = [e for e in entries if e.verdict != "ok"]
        for e in bad[:30]:
            log.error(
                "%s tag=%s job_id=%s queue=%s size=%d state=%s runs=%d attempts=%s %s",
                e.verdict,
                e.tag,
                e.job_id,
                e.queue,
                e.size,
                e.state,
                e.runs,
                e.attempts,
                e.detail,
            )
        for tag in phantom_runs[:10]:
            log.error("phantom run of tag %s (no client was given this job)", tag)
        by_size = collections.Counter(e.size for e in entries)
        redelivered = sum(1 for e in entries if (e.attempts or 0) > 1)
        extra_runs = sum(max(0, e.runs - 1) for e in entries if e.expect == "ok")
        summary = {
            "jobs": len(entries),
            "ok": ok,
            "lost": lost,
            "wrong": wrong,
            "phantom": phantom,
            "submit_errors": sum(1 for e in entries if e.submit_error),
            "fault_schedule_error": self.fault_error,
            "lifecycle_faults": self.lifecycle,
            "by_size": {str(k): v for k, v in sorted(by_size.items())},
            "jobs_redelivered": redelivered,
            "extra_function_runs": extra_runs,
            "submit_s": round(submitted_s, 1),
            "drain_s": round(drained_s, 1),
            "total_s": round(self.elapsed(), 1),
            "daemon_restarts": {n: d.deaths for n, d in self.daemons.items()},
            "faults": self.events,
            "figures": self.figures,
            "special": [
                {
                    "tag": e.tag,
                    "expect": e.expect,
                    "outcome": e.outcome,
                    "state": e.state,
                    "attempts": e.attempts,
                    "runs": e.runs,
                    "verdict": e.verdict,
                    "detail": e.detail,
                }
                for e in entries
                if not e.tag.startswith("w")
            ],
        }
        (self.state_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        ledger = [
            {k: getattr(e, k) for k in ("tag", "job_id", "queue", "size", "expect", "outcome")}
            | {"state": e.state, "runs": e.runs, "verdict": e.verdict, "detail": e.detail}
            for e in entries
        ]
        (self.state_dir / "ledger.json").write_text(json.dumps(ledger, indent=0))
        print(json.dumps(summary, indent=1), file=sys.stderr)
        if self.fault_error:
            log.error("the fault schedule did not complete: %s", self.fault_error)
        failed = lost or wrong or phantom or self.fault_error
        if not failed and not self.args.keep:
            self.stack.stop()
            shutil.rmtree(self.state_dir, ignore_errors=True)
        else:
            self.stack.stop()
            log.info("state kept in %s", self.state_dir)
        print(
            f"reliability: {len(entries)} jobs, {ok} ok, {lost} lost, {wrong} wrong, "
            f"{phantom} phantom",
            flush=True,
        )
        return 1 if failed else 0


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make reliability", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--result-deadline-s", type=float, default=360.0)
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the state dir even when green")
    parser.add_argument(
        "--no-lifecycle", action="store_true", help="skip the lease/heartbeat/cap/cancel faults"
    )
    add_integrity_flags(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("payloadstore").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    run = Run(args)
    try:
        return run.execute()
    except BaseException:
        if run.supervisor is not None:
            run.supervisor.stop()
        run.stack.stop()
        log.error("aborted; state kept in %s", run.state_dir)
        raise


if __name__ == "__main__":
    sys.exit(main())
