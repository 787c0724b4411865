"""The explorer: random runs of concurrent operations from a seed, each step checked, a failing
run shrunk to the shortest sequence that still fails, and replayed from its decisions.

A run is a list of decisions, each one of:
    ["start", label, operation, params]   an actor starts an operation (it runs up to its first
                                          call that leaves the process, and parks there)
    ["step", label]                       that operation makes its next call and runs on up to
                                          the one after (or its end)
    ["cut", label]                        as step, but the connection of that Redis call is cut
                                          once the command ran (its reply lost)
    ["advance", seconds]                  the clock moves (leases lapse, queues go idle); an hour
                                          or more: days pass (Redis's TTLs, the S3 lifecycle)
After the last decision every operation still in flight runs to its end, in start order.

Choosing: an operation in flight gets a random priority when it starts; the explorer steps the
highest, and now and then lowers the priority of the one it just stepped (so an operation is
held between two of its steps while others run whole: PCT-style scheduling). Which operation to
start, with which job, looks at the current state (a retry is tried on a failed job, a repeated
retry on a job just retried, a cancel on a queued or running one) so short runs reach the
interesting states.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from tests.races import invariants
from tests.races.ops import DAEMONS, OPERATIONS, Model, describe, started
from tests.races.sched import SCHEDULER, Op
from tests.races.world import (
    SETTING_VALUES,
    STALE_CONSUMER_IDLE_S,
    VISIBILITY_TIMEOUT_S,
    Stack,
    deploy,
    deployed_defaults,
    snapshot,
)

Decision = list[Any]
MAX_IN_FLIGHT = 3
SWARM_KEYS = (
    "enqueue",
    "enqueue_again",
    "poll",
    "heartbeat",
    "leases",
    "finish",
    "forget",
    "cancel",
    "retry",
    "purge",
    "redrive",
    "policy",
    "settings",
    "blob",
    "status",
    "view",
    "inline",
    "s3",
    "multipart",
    "large",
    "finish-inline",
    "finish-s3",
    "finish-multipart",
    "finish-error",
    "finish-payload_lost",
    "finish-cancelled",
    "next",
    "days",
    "cut",
    "memory",
    "ssm",
)


@dataclass
class Outcome:
    decisions: list[Decision]
    steps: int = 0
    interleavings: int = 0
    violation: tuple[str, str] | None = None
    at: int = -1  # index of the decision after which it was seen
    log: list[str] = field(default_factory=list)


def _script_names() -> dict[str, str]:
    from importlib import resources

    names = {}
    for f in resources.files("payloadstore_controlplane.store.jobs").iterdir():
        if f.name.endswith(".lua"):
            names[hashlib.sha1(f.read_bytes()).hexdigest()] = f.name[:-4]
    from payloadstore_controlplane.store import redis_queues

    names[hashlib.sha1(redis_queues._QUEUE_STATS.encode()).hexdigest()] = "queue_stats"
    return names


SCRIPTS: dict[str, str] = {}


def _call_name(op: Op) -> str:
    at = op.at
    if at.startswith("redis evalsha") and op.last_args:
        sha = op.last_args[1] if len(op.last_args) > 1 else ""
        sha = sha.decode() if isinstance(sha, bytes) else str(sha)
        return f"redis {SCRIPTS.get(sha, sha[:8])}.lua"
    return at


class Runner:
    """Executes decisions (given, or chosen from `rng` as it goes) against the world."""

    def __init__(
        self,
        world: Stack,
        namespace: str,
        rng: random.Random | None = None,
        length: int = 60,
        verbose: bool = False,
        weights: dict[str, float] | None = None,
    ):
        from tests.support.control_plane import ControlPlane

        if not SCRIPTS:
            SCRIPTS.update(_script_names())
        self.world, self.rng, self.length, self.verbose = world, rng, length, verbose
        self.ns = namespace
        cp = ControlPlane(namespace)
        cp.queue = "q1"
        self.model = Model(namespace, cp, world.client)
        self.model.deploy = lambda values: deploy(world.clock, values)
        self.model.s3 = world.s3
        self.model.ssm = world.ssm
        # The model's time: the control plane's clock and the days stored data has aged.
        self.model.clock = lambda: world.clock.now() + world.shift_s
        self.model.written = world.written
        self.ops: dict[str, Op] = {}
        self.priority: dict[str, float] = {}
        self.prev: dict[str, str | None] = {}
        self.snap = None
        self.serial = 0
        # Swarm testing: each run weighs the operations (and the tiers, the ways a delivery
        # ends) differently, some not at all, so some runs dwell on a few operations at once.
        self.swarm: dict[str, float] = {}
        if rng is not None:
            self.swarm = {k: rng.choice([0.0, 0.3, 1.0, 1.0, 3.0]) for k in SWARM_KEYS}
            for k in ("enqueue", "poll", "finish"):
                self.swarm[k] = max(self.swarm[k], 0.3)
            for k, w in (weights or {}).items():
                self.swarm[k] = w

    # -- set-up -----------------------------------------------------------------------------
    def setup(self) -> None:
        from tests.races import ops
        from tests.races.world import forget_container_state

        self.world.flush()
        self.world.clock.reset()
        deployed_defaults(self.world.clock)
        forget_container_state()
        self._past_first_hour()
        for i in range(2):
            ops.create_blob(self.model, f"{self.ns}-blob{i}")
        self.snap = snapshot(self.world, self.ns)

    def _past_first_hour(self) -> None:
        """The namespace as a control plane past its first hour has it: its keyed-since marker
        two hours back, so a repeated Idempotency-Key is found by its key field (the lookup that
        lives on; the per-minute one only serves the hour after an upgrade, and is tested in
        tests/integration/test_redis_layout.py)."""
        from payloadstore_controlplane.models.domain import job_id_time_chars
        from payloadstore_controlplane.store import keys

        since = job_id_time_chars(int((self.world.clock.now() - 7200) * 1000))
        self.world.client.set(keys.inline_keyed_since(self.ns), since)

    # -- one decision -------------------------------------------------------------------------
    def apply(self, d: Decision, out: Outcome) -> bool:
        """Apply a decision; False when it did nothing (an operation not in flight)."""
        kind = d[0]
        if kind == "advance":
            self.world.advance(float(d[1]))
            self.model.shift_s = self.world.shift_s
            out.log.append(f"clock +{d[1]} s")
            return True
        if kind == "start":
            _, label, name, params = d
            fn = OPERATIONS[name]
            op = Op(label, name, lambda: started(self.model, lambda: fn(self.model, **params)))
            op.last_args = None
            self.ops[label] = op
            self.priority[label] = self.rng.random() if self.rng else 0.0
            mid = self._mid_flight(exclude=op)
            SCHEDULER.start(op)
            out.interleavings += mid
            out.log.append(f"start {label} {describe(name, params)} -> {self._where(op)}")
            self._reap(op)
            return True
        label = d[1]
        op = self.ops.get(label)
        if op is None or op.state != "parked":
            return False
        if kind == "cut":
            if not op.at.startswith("redis"):
                return False
            op.cut = True
            self.model.cuts += 1
        mid = self._mid_flight(exclude=op)
        call = _call_name(op)
        SCHEDULER.resume(op)
        out.interleavings += mid
        cut = " (its connection cut after the command ran)" if kind == "cut" else ""
        out.log.append(f"  {label} {op.name}: {call}{cut} -> {self._where(op)}")
        self._reap(op)
        return True

    def _where(self, op: Op) -> str:
        return "done" if op.state == "done" else f"parked before {_call_name(op)}"

    def _mid_flight(self, exclude: Op) -> int:
        """1 when another operation is held between two of its steps (a forced interleaving)."""
        return int(
            any(o is not exclude and o.calls > 0 and o.state == "parked" for o in self.ops.values())
        )

    def _reap(self, op: Op) -> None:
        if op.state == "done":
            self.ops.pop(op.label, None)
            self.priority.pop(op.label, None)
            if op.error is not None:
                self.model.violation(
                    "explorer_error", f"{op.label} {op.name} raised:\n{op.error_tb}"
                )

    def check(self) -> tuple[str, str] | None:
        if self.model.violations:
            return self.model.violations[0]
        busy: set[str] = set()
        for op in self.ops.values():
            busy |= op.touched
        snap = snapshot(self.world, self.ns)
        found = invariants.check(snap, self.prev, self.model, busy)
        for job_id, state in invariants.states(snap).items():
            if state is not None:
                self.prev[job_id] = state
        self.snap = snap
        return found[0] if found else None

    # -- whole runs -----------------------------------------------------------------------------
    def run(self, decisions: list[Decision] | None = None) -> Outcome:
        """Replay `decisions`, or choose `self.length` of them; then drain; check every step."""
        self.setup()
        out = Outcome(decisions=[])
        planned = list(decisions) if decisions is not None else None
        i = 0
        while True:
            if planned is not None:
                if i >= len(planned):
                    break
                d = planned[i]
            else:
                if i >= self.length:
                    break
                d = self.choose()
            i += 1
            if not self.apply(d, out):
                continue
            out.decisions.append(d)
            out.steps += 1
            v = self.check()
            if v:
                out.violation, out.at = v, len(out.decisions) - 1
                self.abandon()
                return out
        # Drain: every operation still in flight runs to its end, in start order.
        while self.ops:
            label = next(iter(self.ops))
            d = ["step", label]
            self.apply(d, out)
            out.decisions.append(d)
            out.steps += 1
            v = self.check()
            if v:
                out.violation, out.at = v, len(out.decisions) - 1
                self.abandon()
                return out
        assert self.snap is not None
        found = invariants.s3_after_run(self.world, self.model, self.snap)
        if found:
            out.violation, out.at = found[0], len(out.decisions) - 1
        return out

    def abandon(self) -> None:
        """Let the operations still in flight finish (unchecked) so no thread stays parked."""
        while self.ops:
            op = next(iter(self.ops.values()))
            SCHEDULER.resume(op)
            if op.state == "done":
                self.ops.pop(op.label, None)

    # -- choosing -------------------------------------------------------------------------------
    def choose(self) -> Decision:
        rng = self.rng
        assert rng is not None
        parked = [o for o in self.ops.values() if o.state == "parked"]
        r = rng.random()
        if parked and (len(parked) >= MAX_IN_FLIGHT or r < 0.55):
            op = max(parked, key=lambda o: self.priority[o.label])
            if rng.random() < 0.25:
                self.priority[op.label] = rng.random() * 0.5
            if op.at.startswith("redis") and rng.random() < 0.01 * self.swarm.get("cut", 1.0):
                return ["cut", op.label]
            return ["step", op.label]
        if r < 0.62:
            return ["advance", VISIBILITY_TIMEOUT_S + 1]
        if r < 0.63:
            return ["advance", STALE_CONSUMER_IDLE_S + 1]
        if r < 0.63 + 0.004 * self.swarm.get("days", 1.0):
            # Days pass (Redis's TTLs and the bucket's lifecycle with them).
            return ["advance", rng.choice([1, 2, 7]) * 86_400]
        self.serial += 1
        name, params = self.choose_operation()
        return ["start", f"op{self.serial}", name, params]

    def _jobs_in(self, *states: str) -> list[int]:
        snap = self.snap
        jobs = self.model.jobs()
        return [i for i, j in enumerate(jobs) if snap and snap.state(j.job_id or "") in states]

    def _pick_job(self, preferred: list[int]) -> int:
        rng = self.rng
        assert rng is not None
        n = len(self.model.jobs())
        if preferred and rng.random() < 0.85:
            return rng.choice(preferred)
        return rng.randrange(max(n, 1))

    def _weighted(self, weights: dict[str, float], prefix: str = "") -> str:
        rng = self.rng
        assert rng is not None
        w = {k: v * self.swarm.get(prefix + k, 1.0) for k, v in weights.items()}
        if not any(w.values()):
            w = weights
        return rng.choices(list(w), list(w.values()))[0]

    def choose_operation(self) -> tuple[str, dict]:
        rng = self.rng
        assert rng is not None
        m = self.model
        held = {d: len(m.held[d]) for d in DAEMONS}
        njobs = len(m.jobs())
        weights = {
            "enqueue": 3.0 if njobs < 6 else 0.6,
            "enqueue_again": 0.3,
            "poll": 3.0,
            "heartbeat": 1.0 if any(held.values()) else 0.0,
            "leases": 0.7 if any(held.values()) else 0.0,
            "finish": 3.5 if any(held.values()) else 0.0,
            "forget": 0.3 if any(held.values()) else 0.0,
            "cancel": 1.0 if njobs else 0.0,
            "retry": 2.0 if njobs else 0.0,
            "purge": 0.7,
            "redrive": 0.6,
            "policy": 0.3,
            "settings": 0.3,
            "memory": 0.15,
            # (rare: each one takes up to a second of real time, SSM_WAIT_S and the back-off,
            # where another operation takes milliseconds; `--weight ssm=N` dwells on it)
            "ssm": 0.03,
            "status": 0.2 if njobs else 0.0,
            "view": 0.2 if njobs else 0.0,
            "blob": 0.4,
        }
        # A change bites what it lands under: a policy change is likelier while an upload is
        # in flight, a deploy while jobs a raised limit let in are still queued.
        if any(o.name in ("finish", "blob", "enqueue") and o.calls > 0 for o in self.ops.values()):
            weights["policy"] *= 4
        large_queued = [
            j for j in self._jobs_in("queued") if len(m.jobs()[j].inline or b"") > 262_144
        ]
        if len(large_queued) >= 2:
            weights["settings"] *= 4
        weights = {k: w * self.swarm.get(k, 1.0) for k, w in weights.items()}
        names = [k for k, w in weights.items() if w > 0]
        name = rng.choices(names, [weights[k] for k in names])[0]
        queue = "q1" if rng.random() < 0.85 else "q2"
        daemon = rng.choice([d for d in DAEMONS if held[d]] or list(DAEMONS))
        if name == "enqueue":
            tier = self._weighted({"inline": 0.5, "s3": 0.42, "multipart": 0.08})
            # The largest inline payload the settings allow, now and then (more often when a
            # deploy raised INLINE_THRESHOLD: what a lowered one must still deliver).
            raised = int(os.environ.get("INLINE_THRESHOLD", "0")) > 262_144
            large = tier == "inline" and rng.random() < (0.5 if raised else 0.1) * min(
                self.swarm.get("large", 1.0), 2.0
            )
            params = {
                "label": f"e{self.serial}",
                "tier": tier,
                "queue": queue,
                "blobs": rng.choice([0, 1, 2]),
                "idem": tier == "inline" and rng.random() < 0.3,
                "wait": rng.random() < 0.2,
            }
            if large:
                params["large"] = rng.choice([True, 0.8])
            return name, params
        if name == "enqueue_again":
            return name, {"job": rng.randrange(8)}
        if name == "poll":
            daemon = rng.choice(DAEMONS)
            return name, {
                "daemon": daemon,
                "queues": ["q1"] if rng.random() < 0.8 else ["q1", "q2"],
                "max_jobs": rng.choice([None, 2, 2] if len(large_queued) >= 2 else [None, None, 2]),
            }
        if name == "leases":
            return name, {"daemon": daemon}
        if name in ("heartbeat", "forget"):
            return name, {"daemon": daemon, "hold": rng.randrange(4)}
        if name == "finish":
            how = self._weighted(
                {
                    "inline": 0.25,
                    "s3": 0.17,
                    "multipart": 0.08,
                    "error": 0.25,
                    "payload_lost": 0.15,
                    "cancelled": 0.1,
                },
                prefix="finish-",
            )
            nxt = rng.choice([0, 0, 1, 2]) if self.swarm.get("next", 1.0) else 0
            return name, {"daemon": daemon, "hold": rng.randrange(4), "how": how, "next": nxt}
        if name == "cancel":
            return name, {"job": self._pick_job(self._jobs_in("queued", "running"))}
        if name == "retry":
            return name, {"job": self._pick_job(self._jobs_in(*invariants.RETRYABLE, "queued"))}
        if name in ("status", "view"):
            return name, {"job": self._pick_job([])}
        if name == "blob":
            params = {"label": f"b{self.serial}"}
            if rng.random() < 0.5 * min(self.swarm.get("multipart", 1.0), 1.0):
                params["multipart"] = True
            return name, params
        if name == "purge":
            return name, {"queue": queue}
        if name == "policy":
            return name, {
                "inline": rng.choice(["allowed", "allowed", "never"]),
                "retention": rng.choice(["consume", "1d", "2d", "2d", "7d", "30d"]),
                "kms_key": rng.choice(["none", "none", "stack"]),
            }
        if name == "memory":
            return name, {"full": not m.memory_full and rng.random() < 0.8}
        if name == "ssm":
            return name, {"how": rng.choice(["stall", "throttle"]), "calls": rng.choice([1, 2, 3])}
        if name == "settings":
            # INLINE_THRESHOLD twice as often (what it lets in lives on after it is lowered),
            # and mostly it while it is raised.
            raised = os.environ.get("INLINE_THRESHOLD") != SETTING_VALUES["INLINE_THRESHOLD"][0]
            setting = rng.choice(["INLINE_THRESHOLD", *sorted(SETTING_VALUES)])
            if raised and rng.random() < 0.5:
                setting = "INLINE_THRESHOLD"
            values = SETTING_VALUES[setting]
            now = os.environ.get(setting)
            if now != values[0] and rng.random() < 0.6:
                # Back to the default, mostly: a limit raised then lowered under the jobs it
                # let in (or a lowered one raised again) is where a change bites.
                return name, {"name": setting, "value": values[0]}
            return name, {"name": setting, "value": rng.choice(values)}
        if name == "redrive":
            return name, {"queue": queue, "cancelled": rng.random() < 0.5}
        raise AssertionError(name)


# -- shrinking ------------------------------------------------------------------------------------


def shrink(
    world: Stack, decisions: list[Decision], kind: str, namespace_of, budget_s: float, say=print
) -> list[Decision]:
    """Delta debugging (ddmin) over the decisions: the shortest list found that still fails with
    a violation of the same kind."""
    deadline = time.monotonic() + budget_s
    tries = [0]

    def fails(ds: list[Decision]) -> bool:
        tries[0] += 1
        out = Runner(world, namespace_of(), random.Random(0)).run(ds)
        return out.violation is not None and out.violation[0] == kind

    current = list(decisions)
    n = 2
    while len(current) >= 2 and time.monotonic() < deadline:
        chunk = max(len(current) // n, 1)
        reduced = False
        for start in range(0, len(current), chunk):
            if time.monotonic() >= deadline:
                break
            candidate = current[:start] + current[start + chunk :]
            if candidate and fails(candidate):
                current, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(n * 2, len(current))
    say(f"shrunk to {len(current)} decisions in {tries[0]} replays")
    return current


def dumps(decisions: list[Decision]) -> str:
    return json.dumps(decisions)
