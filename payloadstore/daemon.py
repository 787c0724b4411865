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
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ._daemon_job import (
    ABANDONED,
    CANCELLED,
    CANCELLED_ERROR_TYPE,
    FAILED,
    PAYLOAD_CORRUPT,
    PAYLOAD_LOST,
    REFUSED,
    SUCCEEDED,
    TAKEN,
    CurrentJob,
    DeliveryOutcome,
    current_job,
)
from ._daemon_lease import (
    FALLBACK_MAX_LEASE_S,
    FALLBACK_MIN_HEARTBEAT_S,
    LEASES_GRACE_S,
    LEASES_WAIT_S,
    MIN_HEARTBEAT_S,
    _Heartbeat,
    _Held,
    _LeaseKeeper,
    route_missing,
)
from ._daemon_runner import _JobRunner, call_arguments, remote_type_name
from ._multipart_download import interrupt_transfers
from .client import Client
from .errors import ServiceUnavailable

# The Daemon is built from parts by what each does: the job's context and outcomes
# (_daemon_job), the lease keeper (_daemon_lease), the poster (_daemon_post) and the runner
# (_daemon_runner). Their names are this module's too, as they were before the split.
__all__ = [
    "ABANDONED",
    "CANCELLED",
    "CANCELLED_ERROR_TYPE",
    "DRAINED_CHECKS",
    "FAILED",
    "FALLBACK_MAX_LEASE_S",
    "FALLBACK_MIN_HEARTBEAT_S",
    "LEASES_GRACE_S",
    "LEASES_WAIT_S",
    "MIN_HEARTBEAT_S",
    "PAYLOAD_CORRUPT",
    "PAYLOAD_LOST",
    "REFUSED",
    "SUCCEEDED",
    "TAKEN",
    "CurrentJob",
    "Daemon",
    "DeliveryOutcome",
    "_Heartbeat",
    "_Held",
    "_LeaseKeeper",
    "call_arguments",
    "current_job",
    "default_job_logging",
    "failing_checks",
    "function_name",
    "logging_configured",
    "remote_type_name",
    "route_missing",
]

log = logging.getLogger("payloadstore.daemon")

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


def function_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module else name


class Daemon(_JobRunner):
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
