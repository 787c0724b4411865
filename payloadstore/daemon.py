"""The daemon helper: poll a queue, fetch and verify the args, run the function, store the result.

    daemon = Daemon(Client.from_env(), queues=["resize"])

    @daemon.register
    def resize(image, width=256): ...

    daemon.run()          # until SIGTERM/SIGINT; the job in hand is finished first

Each delivery comes with a lease. While it holds jobs the Daemon keeps one leases long-poll open
(`POST /v1/daemon/leases`, a thread of its own): each call renews every lease it holds and then
waits up to LEASES_WAIT_S (20 s), answering at once when a client cancels one of its jobs. So a
cancel reaches the daemon within about a second, and a busy daemon makes one such call per 20 s
whatever its job count. A job younger than LEASES_GRACE_S is not waited on yet (a daemon of
short jobs makes no such calls at all): a cancel requested before then is answered by the first
call. Against a control plane without the route the Daemon heartbeats each job about every
VISIBILITY_TIMEOUT_S/3 instead (a third of `lease_expires_in_s`, counted on `time.monotonic()`
from when each answer arrived: the daemon's wall clock plays no part).

When a cancel is requested the Daemon stops waiting for the function and ends the job
`cancelled` at once, whether or not the function looks: its thread is left to run to its end
(Python cannot stop a thread), its return value or exception is dropped, and the Daemon goes on
to its next job meanwhile. A function that should stop early checks
`payloadstore.current_job().cancel_requested`. When a lease is lost (`lost` in the answer, or
`lease_mismatch`: its lease ran out and the job was delivered again) the Daemon stops waiting
the same way and posts nothing for it.

A job's payload `{"args": [...], "kwargs": {...}}` (what `Queue.add` sends) becomes
`fn(*args, **kwargs)`; any other payload value (e.g. from another client) is passed as `fn(value)`.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from . import codec
from ._multipart_download import interrupt_transfers
from ._wire import (
    MAX_LEASES,
    MAX_POLL_JOBS,
    HeartbeatAnswer,
    LeasesAnswer,
    NextJobs,
    PolledJob,
    polled_job,
)
from .client import Client
from .errors import (
    ApiError,
    AuthError,
    BlobSourceGone,
    ConfigError,
    ConflictError,
    InlineNever,
    InlineUnavailable,
    InvalidRequest,
    JobNotFound,
    LeaseMismatch,
    PayloadCorrupt,
    PayloadLost,
    PayloadStoreError,
    PayloadTooLarge,
    PolicyMismatch,
    ServiceUnavailable,
)

log = logging.getLogger("payloadstore.daemon")


class DeliveryOutcome(StrEnum):
    """How one delivery ended on this daemon, as counted in `Daemon.stats`. Not job states:
    REFUSED, ABANDONED and TAKEN say what the daemon did, and the job goes on elsewhere."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAYLOAD_CORRUPT = "payload_corrupt"
    PAYLOAD_LOST = "payload_lost"
    # The control plane would not take the result (409: redelivered elsewhere).
    REFUSED = "refused"
    # Could not fetch its arguments (S3 unreachable or refusing, an unwritable blob cache), store
    # or post its result, or any other error of this one delivery: nothing was posted, and the
    # job is delivered again when its lease runs out (VISIBILITY_TIMEOUT_S); the daemon goes on.
    ABANDONED = "abandoned"
    # A client cancelled the job while it ran; posted as error type Cancelled.
    CANCELLED = "cancelled"
    # The lease ran out and the job was delivered again: nothing posted.
    TAKEN = "taken"


SUCCEEDED, FAILED = DeliveryOutcome.SUCCEEDED, DeliveryOutcome.FAILED
PAYLOAD_CORRUPT, PAYLOAD_LOST = DeliveryOutcome.PAYLOAD_CORRUPT, DeliveryOutcome.PAYLOAD_LOST
REFUSED, ABANDONED = DeliveryOutcome.REFUSED, DeliveryOutcome.ABANDONED
CANCELLED, TAKEN = DeliveryOutcome.CANCELLED, DeliveryOutcome.TAKEN

CANCELLED_ERROR_TYPE = "Cancelled"
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

_current = threading.local()


class CurrentJob:
    """The job the calling thread's function runs for: `payloadstore.current_job()`."""

    def __init__(self, job_id: str, queue: str | None, attempt: int | None, lease: str | None):
        self.job_id = job_id
        self.queue = queue
        self.attempt = attempt
        self.lease = lease
        self._cancel = threading.Event()
        self._lost = threading.Event()
        self._changed = threading.Event()
        self._finishing = threading.Event()  # the outcome is being posted: heartbeats are moot
        self._ran_s: float | None = None  # the function's own time, once it returned or was left
        self._logged = ""  # the outcome its line was logged with (as it was posted)

    @property
    def cancel_requested(self) -> bool:
        """A client cancelled the job: stop early if you can (the Daemon has stopped waiting)."""
        return self._cancel.is_set()

    @property
    def lease_lost(self) -> bool:
        """The job was taken from this daemon (delivered again elsewhere): its result is moot."""
        return self._lost.is_set()

    def __repr__(self) -> str:
        return f"CurrentJob({self.job_id!r}, queue={self.queue!r}, attempt={self.attempt})"


def current_job() -> CurrentJob | None:
    """The job whose function is running on this thread, or None outside a Daemon's function."""
    return getattr(_current, "job", None)


class _Heartbeat:
    """Extends one delivery's lease on a thread of its own while the job is in hand."""

    def __init__(self, daemon: Daemon, job: PolledJob, current: CurrentJob):
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

    def __init__(self, daemon: Daemon):
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


# Failing checks a daemon starts anyway, because taking jobs is what clears them: a Redis past its
# hard memory mark refuses new jobs, while polls, acks and results through S3 still work there.
DRAINED_CHECKS = frozenset({"redis_memory"})


def failing_checks(body: dict) -> list[str]:
    """'name: detail' for each failing check of a /v1/health body."""
    out = []
    checks = body.get("checks") or {}
    for name, check in checks.items():
        if isinstance(check, dict):
            if not check.get("ok", True):
                out.append(f"{name}: {check.get('detail') or 'failing'}")
        elif check is False or (isinstance(check, str) and check.lower() not in ("ok", "pass")):
            out.append(f"{name}: {check}")
    return out


def logging_configured() -> bool:
    """Whether the application set up logging (a handler on the root or our loggers)."""
    return any(
        logging.getLogger(name).handlers for name in ("", "payloadstore", "payloadstore.daemon")
    )


def default_job_logging() -> Callable[[], None]:
    """When the application configured no logging, print the daemon's INFO lines (one per job)
    on stderr for the length of a run; returns the undo."""
    if logging_configured():
        return lambda: None
    from ._logtime import utc_handler

    handler = utc_handler(
        logging.StreamHandler(sys.stderr), "%(asctime)s %(levelname)s %(message)s"
    )
    saved_level = log.level
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)

    def undo() -> None:
        log.removeHandler(handler)
        log.setLevel(saved_level)

    return undo


def remote_type_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def function_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module else name


def call_arguments(payload: Any) -> tuple[list, dict]:
    if (
        isinstance(payload, dict)
        and set(payload) == {"args", "kwargs"}
        and isinstance(payload["kwargs"], dict)
    ):
        return list(payload["args"]), dict(payload["kwargs"])
    return [payload], {}


class Daemon:
    def __init__(
        self,
        client: Client,
        queues: list[str] | tuple[str, ...] | str,
        *,
        concurrency: int = 1,
        wait_s: float = 10.0,
        daemon_id: str | None = None,
        check_health: bool = True,
        progress: bool | None = False,
        install_signal_handlers: bool = True,
    ):
        if isinstance(queues, str):
            queues = [queues]
        if not queues:
            raise ValueError("give at least one queue")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.client = client
        self.queues = list(queues)
        self.concurrency = concurrency
        self.wait_s = wait_s
        self.daemon_id = daemon_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.check_health = check_health
        self.progress = progress
        self.install_signal_handlers = install_signal_handlers
        self.stats: collections.Counter[str] = collections.Counter()
        self._fn: Callable[..., Any] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._max_jobs: int | None = None
        self._stop_when_idle = False
        self._signals_seen = 0
        self._held = threading.local()  # the job this worker thread has in hand
        # Whether the control plane takes `max_jobs` (one poll for several jobs); a control plane
        # before it answers 422 to the unknown field, and the poller then polls one job at a time.
        self._poll_many = True
        # Whether the control plane takes `next` on result posts (the daemon's next job in the
        # answer, issue 34); one before it refuses the field (422) or ignores it (204), and the
        # daemon then polls for every job as before.
        self._result_next = True
        self._in_hand = 0  # jobs taken (in a worker's hand or handed over) and not done yet
        self._leases = _LeaseKeeper(self)

    # -- registration and control ---------------------------------------------------------------

    def register(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the function `run()` calls for each job.

        A Daemon runs one function (a job carries its arguments, not a function name). A second,
        different function is refused with ValueError naming both; registering the same function
        again is a no-op. Serve several functions with one Daemon per queue.
        """
        self._check_one_function(fn)
        self._fn = fn
        return fn

    __call__ = register

    def _check_one_function(self, fn: Callable[..., Any]) -> None:
        if self._fn is not None and self._fn is not fn:
            raise ValueError(
                f"this Daemon already runs {function_name(self._fn)}; refusing a second function "
                f"{function_name(fn)} (a Daemon runs one function: use one Daemon per queue)"
            )

    def stop(self) -> None:
        """Ask the loop to stop after the jobs in hand (thread-safe, signal-safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def ensure_healthy(self) -> None:
        # The details (each failing check's reason) need a token, which the daemon holds.
        healthy, body = self.client.health(details=True)
        if healthy:
            return
        checks = body.get("checks") or {}
        drained = failing_checks({"checks": {n: checks[n] for n in DRAINED_CHECKS if n in checks}})
        others = failing_checks(
            {"checks": {n: c for n, c in checks.items() if n not in DRAINED_CHECKS}}
        )
        if drained and not others:
            log.warning("starting on a control plane that needs draining: %s", "; ".join(drained))
            return
        if not healthy:
            problems = failing_checks(body) or [f"status {body.get('status')!r}"]
            raise ServiceUnavailable(
                "control plane is not healthy, refusing to take jobs: " + "; ".join(problems),
                checks=body.get("checks") or {},
            )

    def run(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        max_jobs: int | None = None,
        stop_when_idle: bool = False,
    ) -> collections.Counter:
        """Take jobs until stopped (signal, `stop()`, `max_jobs` done, or idle when asked).
        Returns the count of jobs by outcome."""
        if fn is not None:
            self._check_one_function(fn)
        fn = fn or self._fn
        if fn is None:
            raise ValueError("no function: pass run(fn) or decorate one with @daemon.register")
        self._fn = fn
        self._max_jobs = max_jobs
        self._stop_when_idle = stop_when_idle
        self._stop.clear()
        if self.check_health:
            self.ensure_healthy()
        undo_logging = default_job_logging()
        try:
            self._run_loops()
        finally:
            undo_logging()
        return self.stats

    def _run_loops(self) -> None:
        restore = self._install_signals()
        log.info(
            "daemon started daemon_id=%s namespace=%s queues=%s concurrency=%d",
            self.daemon_id,
            self.client.namespace,
            ",".join(self.queues),
            self.concurrency,
        )
        try:
            if self.concurrency == 1:
                self._loop(self.daemon_id)
            else:
                self._run_pool()
        finally:
            restore()
        log.info(
            "daemon stopped daemon_id=%s %s",
            self.daemon_id,
            " ".join(f"{k}={v}" for k, v in sorted(self.stats.items())),
        )

    def _run_pool(self) -> None:
        """`concurrency` workers fed by one poller (this thread): each poll asks for as many jobs
        as there are free workers (`max_jobs`), so an idle daemon holds one long-poll, not one
        per worker. Heartbeats stay per job, on each job's own thread."""
        handed: queue.Queue[PolledJob | None] = queue.Queue()
        free = threading.Semaphore(self.concurrency)
        crashed: list[BaseException] = []
        workers = [
            threading.Thread(
                target=self._work,
                args=(handed, free, crashed),
                name=f"payloadstore-worker-{i}",
                daemon=True,
            )
            for i in range(self.concurrency)
        ]
        for w in workers:
            w.start()
        try:
            self._poller(handed, free)
        finally:
            # The jobs already handed over are leased to this daemon: the workers finish them.
            for _ in workers:
                handed.put(None)
            while any(w.is_alive() for w in workers):
                for w in workers:
                    w.join(timeout=0.2)
        if crashed:
            raise crashed[0]

    def _work(
        self,
        handed: queue.Queue[PolledJob | None],
        free: threading.Semaphore,
        crashed: list[BaseException],
    ) -> None:
        while (job := handed.get()) is not None:
            # A job handed over with a result post's answer keeps this worker (and its slot):
            # at steady load a worker makes one control-plane call per job.
            following: PolledJob | None = job
            while following is not None:
                taken: list[PolledJob] = []
                # No wait: an idle queue is the poller's to long-poll (one poller per process).
                self._held.next_wait = 0.0
                try:
                    if not crashed:
                        self.process(following)
                except BaseException as e:  # noqa: BLE001 - re-raised by run()
                    crashed.append(e)
                    self.stop()
                finally:
                    self._held.next_wait = None
                    taken = self._take_next()
                    with self._lock:
                        self._in_hand -= 1
                        if self._max_jobs is not None and self._done() >= self._max_jobs:
                            self.stop()
                following = taken[0] if taken else None
                for extra in taken[1:]:
                    handed.put(extra)  # never with max_jobs=1; kept for the count's sake
            free.release()

    def _done(self) -> int:
        return sum(self.stats.values())

    def _take_slots(self, free: threading.Semaphore) -> int:
        """Wait (briefly) for a free worker, then take every other free one without waiting,
        up to 16 and to what `run(max_jobs=)` leaves; 0 when none."""
        if not free.acquire(timeout=0.2):
            return 0
        slots = 1
        while slots < min(self.concurrency, MAX_POLL_JOBS) and free.acquire(blocking=False):
            slots += 1
        if self._max_jobs is not None:
            with self._lock:
                left = max(self._max_jobs - self._done() - self._in_hand, 0)
            if left < slots:
                self._release(free, slots - left)
                slots = left
                if slots == 0:
                    self._stop.wait(0.05)
        return slots

    def _poller(self, handed: queue.Queue[PolledJob | None], free: threading.Semaphore) -> None:
        failures = 0
        while not self._stop.is_set():
            slots = self._take_slots(free)
            if slots == 0:
                continue
            try:
                jobs = self._poll_jobs(slots)
                failures = 0
            except PayloadStoreError as e:
                self._release(free, slots)
                if isinstance(e, AuthError):
                    self.stop()
                    raise
                failures += 1
                delay = self.client.retry.backoff(min(failures, 6))
                log.warning("poll failed error=%s delay_s=%.2f", e, delay)
                self._stop.wait(delay)
                continue
            except BaseException:
                self._release(free, slots)
                raise
            self._release(free, slots - len(jobs))
            with self._lock:
                self._in_hand += len(jobs)
            for job in jobs:
                handed.put(job)
            if not jobs and self._stop_when_idle:
                self.stop()

    @staticmethod
    def _release(free: threading.Semaphore, n: int) -> None:
        for _ in range(n):
            free.release()

    def _poll_jobs(self, slots: int) -> list[PolledJob]:
        """One poll for up to `slots` jobs: with `max_jobs` where the control plane takes it,
        else (a control plane before it, or one slot) one job."""
        wire = self.client.wire
        if self._poll_many and slots > 1:
            try:
                return wire.poll(
                    self.queues, wait_s=self.wait_s, daemon_id=self.daemon_id, max_jobs=slots
                )
            except InvalidRequest as e:
                if "max_jobs" not in e.message:
                    raise
                log.info("control plane takes no max_jobs: polling one job at a time")
                self._poll_many = False
        job = wire.poll(self.queues, wait_s=self.wait_s, daemon_id=self.daemon_id)
        return [] if job is None else [job]

    def _install_signals(self) -> Callable[[], None]:
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return lambda: None

        def on_signal(signum, frame):
            self._signals_seen += 1
            if self._signals_seen > 1:
                # The worker threads' downloads (concurrency > 1) get no KeyboardInterrupt:
                # stopped here, or leaving the process would wait for every range they queued.
                interrupt_transfers()
                raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping now")
            log.info(
                "stopping signal=%s finishing jobs in hand (signal again to quit now)",
                signal.Signals(signum).name,
            )
            self.stop()

        saved = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        self._signals_seen = 0

        def restore() -> None:
            for s, handler in saved.items():
                signal.signal(s, handler)

        return restore

    # -- the loop -----------------------------------------------------------------------------

    def _loop(self, worker_id: str) -> None:
        failures = 0
        # Jobs the last result post's answer carried: leased to this daemon, run before any
        # poll (and even after a stop was asked for).
        pending: list[PolledJob] = []
        while pending or not self._stop.is_set():
            if pending:
                message: PolledJob = pending.pop(0)
            else:
                try:
                    polled = self._poll(worker_id)
                    failures = 0
                except AuthError:
                    self.stop()
                    raise
                except PayloadStoreError as e:
                    failures += 1
                    delay = self.client.retry.backoff(min(failures, 6))
                    log.warning("poll failed worker=%s error=%s delay_s=%.2f", worker_id, e, delay)
                    self._stop.wait(delay)
                    continue
                if polled is None:
                    if self._stop_when_idle:
                        self.stop()
                    continue
                message = polled
                with self._lock:
                    self._in_hand += 1
            # The result post asks for the next job, waiting as a poll would: one call per job.
            self._held.next_wait = None if pending else self.wait_s
            try:
                self.process(message)
            finally:
                self._held.next_wait = None
                pending.extend(self._take_next())
                with self._lock:
                    self._in_hand -= 1
            with self._lock:
                if self._max_jobs is not None and sum(self.stats.values()) >= self._max_jobs:
                    self.stop()

    def poll(self, worker_id: str | None = None) -> dict | None:
        """One long poll; the job message as the control plane sent it, or None when the queues
        stayed empty."""
        job = self._poll(worker_id)
        return None if job is None else job.raw

    def _poll(self, worker_id: str | None = None) -> PolledJob | None:
        return self.client.wire.poll(
            self.queues, wait_s=self.wait_s, daemon_id=worker_id or self.daemon_id
        )

    def process(self, message: PolledJob | dict, fn: Callable[..., Any] | None = None) -> str:
        """Run one polled job end to end and report it; returns the outcome."""
        fn = fn or self._fn
        if fn is None:
            raise ValueError("no function: pass process(message, fn) or register one")
        job = message if isinstance(message, PolledJob) else polled_job(message)
        self._held.polled = job
        try:
            outcome = self._process(job, fn)
        except (AuthError, ConfigError):
            raise  # a revoked token or a wrong setup stops the daemon (one line from the CLI)
        except Exception:  # one job's error never stops the daemon
            log.exception("job abandoned on an unexpected error job_id=%s", job.job_id)
            outcome = ABANDONED
        finally:
            self._held.polled = None
        with self._lock:
            self.stats[outcome] += 1
        current = getattr(self._held, "ended", None)
        self._held.ended = None
        if current is None or current.job_id != job.job_id:
            self._log_job(job, None, outcome)  # nothing was posted (taken, abandoned)
        elif current._logged != outcome:
            log.info(
                "job job_id=%s outcome=%s (posted as %s)", job.job_id, outcome, current._logged
            )
        return outcome

    def _log_job(self, job: PolledJob, current: CurrentJob | None, outcome: str) -> None:
        """The job's line, once its outcome is known: `seconds` is the function's own time
        (0 when it never ran), logged as the outcome is posted, not when the post's answer
        (which may wait for the next job) comes back."""
        ran_s = None if current is None else current._ran_s
        log.info(
            "job job_id=%s queue=%s tier=%s seconds=%.3f outcome=%s attempt=%s",
            job.job_id,
            job.queue,
            "inline" if job.payload_inline is not None else "s3",
            ran_s or 0.0,
            outcome,
            job.attempt,
        )

    def _process(self, job: PolledJob, fn: Callable[..., Any]) -> str:
        current = CurrentJob(job.job_id, job.queue, job.attempt, job.lease)
        self._held.job = current
        release = self._leases.keep(job, current)
        try:
            # Its blobs stay in the host's cache (another process's eviction skips them) from
            # before they are fetched until the result is posted.
            with self.client.blobs.pinned(job.raw.get("blobs")):
                return self._process_held(job, fn, current)
        finally:
            release()
            self._held.job = None

    def _process_held(self, job: PolledJob, fn: Callable[..., Any], current: CurrentJob) -> str:  # noqa: C901 - one delivery from payload to post: each failure mode is a branch the docs list
        client = self.client
        job_id, lease = job.job_id, job.lease
        # 1. the args' bytes, verified
        try:
            if job.payload_inline is not None:
                data: Any = job.payload_inline
            elif job.payload_ref is not None:
                data = client.payloads.fetch(
                    job.payload_ref, job_id=job_id, progress=self.progress, grant=job.download
                )
            else:
                return self._post_error(
                    job_id, "PayloadMissing", "the delivery carries no payload", None, lease=lease
                )
            # The blobs it references, into the host's cache before the function starts (a
            # cached blob costs no download).
            blobs = job.raw.get("blobs") or []
            client.blobs.grant(blobs)
            for d in blobs:
                client.blobs.fetch(d["sha256"])
        except PayloadCorrupt as e:
            log.error(
                "payload corrupt job_id=%s key=%s expected=%s actual=%s",
                job_id,
                e.key,
                e.expected_crc64nvme or e.expected_sha256,
                e.actual_crc64nvme or e.actual_sha256,
            )
            self._report_failure(
                job_id,
                PAYLOAD_CORRUPT,
                e.message,
                e.expected_sha256,
                e.actual_sha256,
                lease=lease,
                crc64nvme=(e.expected_crc64nvme, e.actual_crc64nvme),
            )
            return PAYLOAD_CORRUPT
        except PayloadLost as e:
            log.error("payload lost job_id=%s key=%s", job_id, e.key)
            self._report_failure(job_id, PAYLOAD_LOST, e.message, lease=lease)
            return PAYLOAD_LOST
        except AuthError:
            raise  # a revoked token stops the daemon
        except (PayloadStoreError, OSError) as e:
            # S3 unreachable through every retry, a refused download, an unwritable blob cache:
            # the host's trouble or a passing one, not the job's. Nothing is reported; the job is
            # delivered again when its lease runs out, and this daemon takes the next one.
            log.error(
                "arguments not fetched, job left for redelivery job_id=%s error=%s", job_id, e
            )
            return ABANDONED
        # 2. decode and call (blobs in the value read through this daemon's cache)
        reading = client.blobs.reading(job.raw.get("blobs"))
        try:
            payload = codec.decode(data, copy=False)
        except Exception as e:  # noqa: BLE001 - any decode failure is the job's failure, reported
            return self._post_error(
                job_id,
                "CodecError",
                f"cannot decode the job's payload: {e}",
                traceback.format_exc(),
                lease=lease,
            )
        finally:
            client.blobs.done_reading(reading)
        args, kwargs = call_arguments(payload)
        status, value, tb = self._call(fn, args, kwargs, current)
        if status == TAKEN:
            return TAKEN
        if status == CANCELLED:
            return self._post_cancelled(job_id, lease)
        if status == FAILED:
            return self._post_error(job_id, remote_type_name(value), str(value), tb, lease=lease)
        # 3. store the result by tier and post it
        try:
            encoded = codec.encode(value, where="result")
        except Exception as e:  # noqa: BLE001
            return self._post_error(
                job_id,
                "CodecError",
                f"cannot encode the function's return value: {e}",
                traceback.format_exc(),
                lease=lease,
            )
        try:
            # Blobs the function made (payloadstore.blob(path)) are uploaded first, once.
            blobs = client.blobs.send(encoded.blobs)
        except PayloadStoreError as e:
            return self._post_error(
                job_id,
                "BlobUploadFailed",
                f"cannot store a blob of the result: {e}",
                None,
                lease=lease,
            )
        try:
            if encoded.nbytes <= client.config.inline_limit:
                try:
                    return self._post_result(
                        job_id,
                        SUCCEEDED,
                        inline=encoded.tobytes(),
                        lease=lease,
                        blobs=blobs,
                        sent=encoded.blobs,
                    )
                except (InlineUnavailable, InlineNever, PayloadTooLarge) as e:
                    # Redis is above its high-water mark (or the namespace keeps nothing inline): the result goes through S3 instead.
                    # (413: INLINE_THRESHOLD was lowered since the config was read.)
                    log.info(
                        "inline result refused, storing through S3 job_id=%s bytes=%d reason=%s",
                        job_id,
                        encoded.nbytes,
                        e.code,
                    )
            elif (
                encoded.nbytes > client.config.max_payload_bytes
                # The cap as the stack has it now, not as it was at the daemon's start.
                and encoded.nbytes > client.refresh_config().max_payload_bytes
            ):
                return self._too_large(job_id, encoded.nbytes, client.config, lease)
            for first in (True, False):
                try:
                    ref, _ = client.payloads.store(
                        encoded, "result", job_id=job_id, lease=lease, progress=self.progress
                    )
                except PayloadTooLarge:
                    # MAX_PAYLOAD_BYTES was lowered since the config was read: the job fails
                    # on the cap the stack has now (abandoned, it would run again later).
                    if encoded.nbytes <= client.refresh_config().max_payload_bytes:
                        raise
                    return self._too_large(job_id, encoded.nbytes, client.config, lease)
                if current.lease_lost:
                    return TAKEN
                try:
                    return self._post_result(
                        job_id,
                        SUCCEEDED,
                        ref=ref,
                        lease=lease,
                        blobs=blobs,
                        sent=encoded.blobs,
                        policy_mismatch_raises=first,
                    )
                except PolicyMismatch:
                    # The namespace's policy changed between the presign and the post: the
                    # same key is presigned again under the new policy and uploaded once more.
                    log.info(
                        "namespace policy changed during the result upload, uploading again "
                        "job_id=%s",
                        job_id,
                    )
            return REFUSED
        except AuthError:
            raise
        except (PayloadStoreError, OSError) as e:
            log.error("result not stored job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _too_large(self, job_id: str, nbytes: int, config: Any, lease: str | None) -> str:
        limit = config.max_payload_bytes
        return self._post_error(
            job_id,
            "PayloadTooLarge",
            f"result is {nbytes} bytes encoded, over the {limit} byte cap (MAX_PAYLOAD_BYTES)",
            None,
            lease=lease,
        )

    def _mark_finishing(self, outcome: str) -> None:
        held = getattr(self._held, "job", None)
        if held is not None:
            held._finishing.set()
            polled = getattr(self._held, "polled", None)
            if not held._logged and polled is not None and polled.job_id == held.job_id:
                self._log_job(polled, held, outcome)
                held._logged = outcome
                self._held.ended = held

    def _call(  # noqa: C901 - runs the function with cancel, lease loss and timeouts watched, one branch each
        self, fn: Callable[..., Any], args: list, kwargs: dict, current: CurrentJob
    ) -> tuple[str, Any, str | None]:
        """Run the function on a thread of its own and wait for it, or for a cancel request or
        the loss of the lease (then the function's thread is left to finish on its own).
        Returns (SUCCEEDED, value, None), (FAILED, exception, traceback), (CANCELLED, ..) or
        (TAKEN, ..)."""
        if current.lease_lost:
            return TAKEN, None, None
        if current.cancel_requested:
            return CANCELLED, None, None
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            _current.job = current
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                box["error"], box["traceback"] = e, traceback.format_exc()
            finally:
                _current.job = None
                done.set()
                current._changed.set()

        runner = threading.Thread(target=target, name=f"payloadstore-job-{current.job_id}")
        runner.daemon = True
        started = time.monotonic()
        runner.start()
        while True:
            current._changed.wait()
            current._changed.clear()
            if done.is_set():
                break
            if current.lease_lost or current.cancel_requested:
                # The function's time so far: the daemon stops waiting for it here.
                current._ran_s = time.monotonic() - started
            if current.lease_lost:
                log.warning("job taken, not waiting for its function job_id=%s", current.job_id)
                return TAKEN, None, None
            if current.cancel_requested:
                log.info("job cancelled, not waiting for its function job_id=%s", current.job_id)
                return CANCELLED, None, None
        current._ran_s = time.monotonic() - started
        error = box.get("error")
        if error is not None:
            # Whatever the function raised is the job's, SystemExit and KeyboardInterrupt too:
            # it ran on a thread of its own, where no signal lands (the daemon's signals reach
            # the main thread), so a sys.exit() in a job fails that job, not the daemon.
            return FAILED, error, box.get("traceback")
        if current.lease_lost:
            return TAKEN, None, None
        if current.cancel_requested:
            return CANCELLED, None, None
        return SUCCEEDED, box.get("value"), None

    def _post_cancelled(self, job_id: str, lease: str | None) -> str:
        error = {"type": CANCELLED_ERROR_TYPE, "message": "cancelled by a client while running"}
        try:
            return self._post_result(job_id, CANCELLED, error=error, lease=lease)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("cancel not posted job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _post_error(
        self,
        job_id: str,
        type_name: str,
        message: str,
        tb: str | None,
        *,
        lease: str | None = None,
    ) -> str:
        error = {"type": type_name, "message": message}
        if tb:
            error["traceback"] = tb
        try:
            return self._post_result(job_id, FAILED, error=error, lease=lease)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("error not posted job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _post_result(
        self,
        job_id: str,
        outcome: str,
        *,
        sent: Any = (),
        policy_mismatch_raises: bool = False,
        **result: Any,
    ) -> str:
        """Post exactly one of inline=, ref=, error= (with lease=); REFUSED when the control plane
        says 409 (lease_mismatch: the job was delivered again; conflict: another result stands).
        In run()'s loops the post also asks for the worker's next job (`next`).
        `sent`: the result's blobs: one the namespace let go since this process uploaded it
        (`409 unknown_blob`) is checked or uploaded again from its source and the post sent once
        more; with its source gone, the job fails `BlobUploadFailed`."""
        self._mark_finishing(outcome)
        wire = self.client.wire
        try:
            self._with_next(
                lambda nxt: self.client.blobs.resend_on_unknown(
                    sent, lambda: wire.post_result(job_id, **result, next=nxt)
                )
            )
        except BlobSourceGone as e:
            return self._post_error(
                job_id,
                "BlobUploadFailed",
                f"cannot store a blob of the result: {e}",
                None,
                lease=result.get("lease"),
            )
        except PolicyMismatch as e:
            if policy_mismatch_raises:
                raise
            log.warning("result refused job_id=%s reason=%s", job_id, e.message)
            return REFUSED
        except InlineNever:
            # Not a refusal of the result: of its form. The caller sends it through S3 (an
            # InlineNever is a ConflictError, which would otherwise end the delivery REFUSED and
            # the job, delivered again and refused again, DeliveryLimitExceeded).
            if "inline" in result:
                raise
            log.warning("error refused inline job_id=%s", job_id)
            return REFUSED
        except ConflictError as e:
            log.warning("result refused job_id=%s reason=%s", job_id, e.message)
            return REFUSED
        return outcome

    def _next_request(self) -> NextJobs | None:
        """The `next` of this worker's post: one job for the worker about to be free, reserved
        in the count of jobs in hand (run(max_jobs=) is never passed), or None outside run()'s
        loops, while stopping, and with a control plane before `next`."""
        wait = getattr(self._held, "next_wait", None)
        if wait is None or not self._result_next or self._stop.is_set():
            return None
        with self._lock:
            if self._max_jobs is not None and self._max_jobs - self._done() - self._in_hand < 1:
                return None
            self._in_hand += 1
        self._held.reserved = True
        return NextJobs(tuple(self.queues), max_jobs=1, wait_s=wait, daemon_id=self.daemon_id)

    def _with_next(self, send: Callable[[NextJobs | None], list[PolledJob] | None]) -> None:
        """Send a post, with `next` when this worker takes a job next; keeps what it answers
        for `_take_next`. A control plane before `next` refuses the field (400/422: the post was
        not stored, so it goes again without it) or answers 204 (stored, `next` ignored): the
        daemon stops asking and polls for each job as before."""
        nxt = self._next_request()
        if nxt is None:
            send(None)
            return
        try:
            jobs = send(nxt)
        except InvalidRequest as e:
            if "next" not in e.message:
                raise
            log.info("control plane takes no next on result posts: polling for each job")
            self._result_next = False
            send(None)
            return
        if jobs is None:
            log.info("control plane answered no next jobs (204): polling for each job")
            self._result_next = False
            return
        self._held.next_jobs = jobs

    def _take_next(self) -> list[PolledJob]:
        """The jobs this worker's last post answered (leased to this daemon: they must run),
        counted as in hand in place of the reservation."""
        jobs: list[PolledJob] = getattr(self._held, "next_jobs", None) or []
        reserved = getattr(self._held, "reserved", False)
        self._held.next_jobs, self._held.reserved = [], False
        if jobs or reserved:
            with self._lock:
                self._in_hand += len(jobs) - (1 if reserved else 0)
        for job in jobs:
            log.debug("next job handed over job_id=%s", job.job_id)
        return jobs

    def _report_failure(
        self,
        job_id: str,
        state: str,
        detail: str,
        expected: str | None = None,
        actual: str | None = None,
        *,
        lease: str | None = None,
        crc64nvme: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self._mark_finishing(state)
        wire = self.client.wire
        try:
            self._with_next(
                lambda nxt: wire.report_failure(
                    job_id,
                    state=state,
                    detail=detail,
                    expected_sha256=expected,
                    actual_sha256=actual,
                    lease=lease,
                    next=nxt,
                    expected_crc64nvme=crc64nvme[0],
                    actual_crc64nvme=crc64nvme[1],
                )
            )
        except ConflictError as e:
            log.warning("failure report refused job_id=%s reason=%s", job_id, e.message)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("failure not reported job_id=%s state=%s error=%s", job_id, state, e)
