"""The lease keeper of a Daemon: keeps the lease of every job in hand and stops the jobs a
client cancels or whose lease was lost.

One leases long-poll per daemon while it holds jobs (`_LeaseKeeper`); against a control plane
without that route, one heartbeat thread per job (`_Heartbeat`). Each answer's lease is counted
on `time.monotonic()` from when it arrived; the daemon's wall clock plays a part only against a
control plane that says no more than the lease's absolute expiry (kept within bounds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ._daemon_job import CurrentJob
from ._wire import MAX_LEASES, HeartbeatAnswer, LeasesAnswer, PolledJob
from .client import Client
from .errors import ApiError, AuthError, JobNotFound, LeaseMismatch, PayloadStoreError

# The daemon's own logger: its lines read as the daemon's, whichever part of it logs them.
log = logging.getLogger("payloadstore.daemon")

# Heartbeat at a third of the lease, as SQS ChangeMessageVisibility guidance has it; never more
# often than this.
MIN_HEARTBEAT_S = 0.2
# A control plane before `lease_expires_in_s` says only the lease's absolute expiry, on its own
# clock; read against the daemon's wall clock that is off by the clocks' difference, so the
# guess is kept within these bounds: never more often than every second, and never later than a
# third of the longest lease assumed (the control plane's default VISIBILITY_TIMEOUT_S).
FALLBACK_MIN_HEARTBEAT_S = 1.0
FALLBACK_MAX_LEASE_S = 300.0
# The leases long-poll: how long each call waits for a cancel (the control plane caps it at
# POLL_MAX_WAIT_S, 20 s by default: one call per 20 s per busy daemon), and how old a job must be
# before it is waited on (a cancel of a younger job is answered by the first call after it).
LEASES_WAIT_S = 20.0
LEASES_GRACE_S = 1.0


class _LeaseOwner(Protocol):
    """What a lease keeper needs of its daemon: the client it calls with, the id it calls as."""

    client: Client
    daemon_id: str


class _Heartbeat:
    """Extends one delivery's lease on a thread of its own while the job is in hand."""

    def __init__(self, daemon: _LeaseOwner, job: PolledJob, current: CurrentJob):
        self.daemon = daemon
        self.job = job
        self.current = current
        self.stopped = threading.Event()
        self.beats = 0
        self.thread: threading.Thread | None = None

    @staticmethod
    def interval(
        answer: PolledJob | HeartbeatAnswer, wall_now: float | None = None
    ) -> float | None:
        """Seconds after `answer` (a delivery or a heartbeat answer) arrived to beat next: a third
        of the lease's remaining seconds as the control plane counted them, or None without a
        lease expiry (a control plane without leases)."""
        if answer.lease_expires_in_s is not None:
            return max(MIN_HEARTBEAT_S, answer.lease_expires_in_s / 3.0)
        if answer.lease_expires_at is None:
            return None
        # An older control plane: its absolute expiry against our wall clock, within bounds.
        remaining = answer.lease_expires_at - (time.time() if wall_now is None else wall_now)
        return min(max(FALLBACK_MIN_HEARTBEAT_S, remaining / 3.0), FALLBACK_MAX_LEASE_S / 3.0)

    @staticmethod
    def due(answer: PolledJob | HeartbeatAnswer, delay: float) -> float:
        """The time.monotonic() at which to beat: `delay` after the answer arrived."""
        arrived = answer.received_at
        return (time.monotonic() if arrived is None else arrived) + delay

    def start(self) -> _Heartbeat:
        lease, delay = self.job.lease, self.interval(self.job)
        if lease is None or delay is None:
            return self  # a control plane without leases
        self.thread = threading.Thread(
            target=self._run,
            args=(lease, self.due(self.job, delay), delay),
            name=f"payloadstore-heartbeat-{self.job.job_id}",
        )
        self.thread.daemon = True
        self.thread.start()
        return self

    def _run(self, lease: str, due: float, delay: float) -> None:
        wire, job, current = self.daemon.client.wire, self.job, self.current
        while not self.stopped.wait(max(0.0, due - time.monotonic())):
            try:
                answer = wire.heartbeat(job.job_id, lease)
            except (LeaseMismatch, JobNotFound) as e:
                if current._finishing.is_set() or self.stopped.is_set():
                    return  # our own result just ended the delivery
                log.warning("job taken from this daemon job_id=%s reason=%s", job.job_id, e)
                current._lost.set()
                current._changed.set()
                return
            except PayloadStoreError as e:
                # Keep trying: the lease is good until it expires, and a later beat may land.
                log.warning("heartbeat failed job_id=%s error=%s", job.job_id, e)
                due = time.monotonic() + MIN_HEARTBEAT_S * 5
                continue
            self.beats += 1
            delay = self.interval(answer) or delay
            due = self.due(answer, delay)
            if answer.cancel_requested and not current.cancel_requested:
                log.info("cancel requested job_id=%s", job.job_id)
                current._cancel.set()
                current._changed.set()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


def route_missing(e: PayloadStoreError) -> bool:
    """A control plane without the route: 404 (no such route) or API Gateway's 403 without an
    error code ("Missing Authentication Token" for an unknown path)."""
    if isinstance(e, AuthError):
        return e.status == 403 and not e.code
    return isinstance(e, ApiError) and e.status == 404


class _Held:
    def __init__(self, job: PolledJob, current: CurrentJob):
        self.job = job
        self.current = current
        self.added = time.monotonic()
        self.heartbeat: _Heartbeat | None = None  # after a fall back to per-job heartbeats

    def renewable(self) -> bool:
        """Still worth a renewal: not being posted, not cancelled, not lost (the daemon is done
        waiting for those; their leases need no keeping and the control plane would answer
        each call at once for them)."""
        c = self.current
        return not (c._finishing.is_set() or c.cancel_requested or c.lease_lost)

    def grace(self) -> float:
        lease = _Heartbeat.interval(self.job)
        return LEASES_GRACE_S if lease is None else min(LEASES_GRACE_S, lease)


class _LeaseKeeper:
    """One leases long-poll per daemon while it holds jobs (a thread that ends when it holds
    none): renews every lease, and stops the jobs a client cancels or whose lease was lost."""

    def __init__(self, daemon: _LeaseOwner):
        self.daemon = daemon
        self.cond = threading.Condition()
        self.held: dict[str, _Held] = {}
        self.thread: threading.Thread | None = None
        # None: not known yet (the first call says); False: per-job heartbeats instead.
        self.supported: bool | None = None
        self.calls = 0

    def keep(self, job: PolledJob, current: CurrentJob) -> Callable[[], None]:
        """Keep the job's lease while it is in hand; returns the stop."""
        if job.lease is None:
            return lambda: None  # a control plane without leases
        entry = _Held(job, current)
        with self.cond:
            # Read under the lock: a fall back between reading it and adding the job would leave
            # the job to a keeper thread that no longer renews anything.
            if self.supported is False:
                return _Heartbeat(self.daemon, job, current).start().stop
            superseded = self.held.get(job.job_id)
            self.held[job.job_id] = entry
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="payloadstore-leases", daemon=True
                )
                self.thread.start()
            self.cond.notify_all()
        if superseded is not None and not superseded.current._finishing.is_set():
            # The job was delivered again (its lease ran out while it was in hand here): the
            # older delivery's lease is gone, as a heartbeat's lease_mismatch would say.
            log.warning("job taken from this daemon job_id=%s reason=delivered again", job.job_id)
            superseded.current._lost.set()
            superseded.current._changed.set()
        return lambda: self._release(entry)

    def _release(self, entry: _Held) -> None:
        with self.cond:
            # Only this delivery's: the job may be held again under a newer one.
            if self.held.get(entry.job.job_id) is entry:
                del self.held[entry.job.job_id]
            self.cond.notify_all()
        if entry.heartbeat is not None:
            entry.heartbeat.stop()

    def _due(self) -> dict[str, _Held] | None:
        """Wait until a held job is past its grace (the first call of all at once: it tells
        whether the control plane has the route); the jobs to renew, or None when none is held
        (the thread then ends)."""
        with self.cond:
            while True:
                if not self.held:
                    self.thread = None
                    return None
                due = {j: e for j, e in self.held.items() if e.renewable()}
                if not due:
                    # Every job is being posted or stopped: woken when one is released or
                    # added (a second, at most, re-checks the ones being posted).
                    self.cond.wait(1.0)
                    continue
                if self.supported is None:
                    return due
                now = time.monotonic()
                left = min(e.added + e.grace() for e in due.values()) - now
                if left <= 0:
                    return due
                self.cond.wait(left)

    def _run(self) -> None:
        failures = 0
        while (held := self._due()) is not None:
            intervals = [_Heartbeat.interval(e.job) for e in held.values()]
            wait_s = min([LEASES_WAIT_S, *(i for i in intervals if i is not None)])
            ids = list(held)
            chunks = [ids[i : i + MAX_LEASES] for i in range(0, len(ids), MAX_LEASES)]
            try:
                for n, chunk in enumerate(chunks):
                    answer = self.daemon.client.wire.leases(
                        self.daemon.daemon_id,
                        {j: held[j].job.lease or "" for j in chunk},
                        # Only the last call waits: the others renew and answer at once.
                        wait_s=wait_s if n == len(chunks) - 1 else 0.0,
                    )
                    self.calls += 1
                    self.supported = True
                    self._apply(answer, held)
                failures = 0
            except PayloadStoreError as e:
                if self.supported is None and route_missing(e):
                    log.info("control plane without the leases route: heartbeating each job")
                    self._fall_back()
                    return
                with self.cond:
                    if not any(j in self.held for j in held):
                        continue  # those jobs are done with: nothing to keep
                # Keep trying: the leases are good until they expire, and a later call may land.
                failures += 1
                delay = min(MIN_HEARTBEAT_S * 5 * failures, wait_s)
                log.warning("leases renewal failed error=%s delay_s=%.2f", e, delay)
                time.sleep(delay)
            except Exception:  # the keeper outlives any surprise: its jobs' leases depend on it
                with self.cond:
                    if not any(j in self.held for j in held):
                        continue  # e.g. the client closed after the daemon stopped
                log.exception("leases renewal failed unexpectedly; trying again in 1 s")
                time.sleep(1.0)

    def _apply(self, answer: LeasesAnswer, held: dict[str, _Held]) -> None:
        for job_id in answer.cancel_requested:
            entry = held.get(job_id)
            if entry is not None and not entry.current.cancel_requested:
                log.info("cancel requested job_id=%s", job_id)
                entry.current._cancel.set()
                entry.current._changed.set()
        for job_id in answer.lost:
            entry = held.get(job_id)
            if entry is None or entry.current._finishing.is_set():
                continue  # our own result just ended the delivery
            with self.cond:
                still = self.held.get(job_id) is entry
            if still:
                log.warning("job taken from this daemon job_id=%s reason=lease lost", job_id)
                entry.current._lost.set()
                entry.current._changed.set()

    def _fall_back(self) -> None:
        with self.cond:
            self.supported = False
            self.thread = None
            for entry in self.held.values():
                entry.heartbeat = _Heartbeat(self.daemon, entry.job, entry.current).start()
