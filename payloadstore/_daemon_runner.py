"""The runner of a Daemon: polls its queues and hands each job to a worker, which fetches and
verifies the job's arguments and runs the function (`process`), watched for a cancel or the
loss of its lease; its poster (`_daemon_post`) then stores and posts the outcome.

With `concurrency` 1 the calling thread polls and runs each job (`_loop`); with more, one
poller asks for as many jobs as there are free workers (`_run_pool`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import codec
from ._daemon_job import (
    ABANDONED,
    CANCELLED,
    FAILED,
    PAYLOAD_CORRUPT,
    PAYLOAD_LOST,
    SUCCEEDED,
    TAKEN,
    CurrentJob,
    _current,
)
from ._daemon_lease import _LeaseKeeper
from ._daemon_post import _ResultPoster
from ._wire import MAX_POLL_JOBS, PolledJob, polled_job
from .errors import (
    AuthError,
    ConfigError,
    InvalidRequest,
    PayloadCorrupt,
    PayloadLost,
    PayloadStoreError,
)

# The daemon's own logger: its lines read as the daemon's, whichever part of it logs them.
log = logging.getLogger("payloadstore.daemon")


def remote_type_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def call_arguments(payload: Any) -> tuple[list, dict]:
    if (
        isinstance(payload, dict)
        and set(payload) == {"args", "kwargs"}
        and isinstance(payload["kwargs"], dict)
    ):
        return list(payload["args"]), dict(payload["kwargs"])
    return [payload], {}


# The polling and running half of a Daemon (the Daemon builds on it). No docstring: the
# Daemon's help is its own, not inherited from its parts.
class _JobRunner(_ResultPoster):
    # Set by Daemon.__init__.
    concurrency: int
    wait_s: float
    _fn: Callable[..., Any] | None
    _stop_when_idle: bool
    _poll_many: bool
    _leases: _LeaseKeeper

    # -- stopping -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop after the jobs in hand (thread-safe, signal-safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

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

    # -- concurrency 1: the loop ----------------------------------------------------------------

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

    # -- one job --------------------------------------------------------------------------------

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
        return self._store_result(job_id, value, current, lease)

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
