"""A daemon process of the reliability suite: the SDK's Daemon running `work` below.

`work(tag, data, mode=...)` returns a value derived from its input (the tag, the sha256 of the
bytes and the bytes reversed), so a result handed to the wrong job, or mangled, shows. Every
call is appended to `<state dir>/runs/<pid>.log` before it does anything else, so the ledger can
count how often each job's function ran, and which jobs ran that nobody submitted.

Modes: `plain`; `slow` (sleeps, so the suite can SIGKILL its daemon mid-job); `long` (runs three
visibility timeouts, kept alive by the Daemon's heartbeats); `poison` (SIGKILLs its own daemon
every time); `wait_cancel` (runs until the job's cancel is requested); `vary` (returns a result
above INLINE_THRESHOLD with fresh random bytes at every run, so each attempt's result differs;
with `kill_after_store`, the daemon SIGKILLs itself at attempt 1 right after the Daemon uploaded
that result to S3 and before it posts it).

Every heartbeat the Daemon sends (and every lease its leases long-poll renews) is appended to `<state dir>/beats/<pid>.log` with the real
(unskewed) time it was sent and how much of the lease was left then, by the control plane's own
expiry (same host, so the same clock); the ledger checks the schedule from it.

Options for faults: `--clock-offset-s S` runs the process with `time.time()` off by S seconds
(a daemon whose clock is wrong); `--pause-file F` holds every poll while F exists (so the suite
can queue jobs and damage their payloads before a daemon that is already running takes them).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import sys
import time
from pathlib import Path

from payloadstore import Client, Daemon, RetryPolicy

STATE_DIR: Path = Path(".")
REAL_TIME = time.time  # the machine's clock, whatever --clock-offset-s does to time.time
KILL_AFTER_STORE: set[str] = set()  # job ids whose result upload ends this process
LEASE_EXPIRES: dict[str, float] = {}  # job id -> the current lease's expiry (real epoch s)


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def derived(tag: str, data: bytes) -> dict:
    """The result every job must end with: what the suite's ledger recomputes and compares."""
    return {"tag": tag, "sha256": hashlib.sha256(data).hexdigest(), "echo": bytes(data)[::-1]}


def _cancel_requested() -> bool:
    import payloadstore

    current = getattr(payloadstore, "current_job", None)
    job = current() if current is not None else None
    return bool(job is not None and job.cancel_requested)


def varied(tag: str, data: bytes, nonce: bytes, attempt: int | None) -> dict:
    """A `vary` run's result: the derived value plus bytes no other run returns."""
    return {
        **derived(tag, data),
        "attempt": attempt,
        "t": REAL_TIME(),
        "nonce": nonce,
        "nonce_sha256": hashlib.sha256(nonce).hexdigest(),
    }


def work(
    tag: str,
    data: bytes,
    mode: str = "plain",
    sleep_s: float = 0.0,
    kill_after_store: bool = False,
) -> dict:
    data = bytes(data)
    _append(STATE_DIR / "runs" / f"{os.getpid()}.log", f"{tag} {os.getpid()} {REAL_TIME():.3f}")
    if mode in ("slow", "long", "wait_cancel"):
        _append(STATE_DIR / "started.log", f"{tag} {os.getpid()} {REAL_TIME():.3f}")
    if mode == "vary":
        import payloadstore

        job = payloadstore.current_job()
        attempt = job.attempt if job is not None else None
        # Above INLINE_THRESHOLD (262,144), and of a different length at each run.
        nonce = os.urandom(300 * 1024 + int.from_bytes(os.urandom(2), "big") % 4096)
        value = varied(tag, data, nonce, attempt)
        _append(
            STATE_DIR / "vary.log",
            f"{tag} {os.getpid()} {attempt} {value['nonce_sha256']} {len(nonce)}",
        )
        if kill_after_store and attempt == 1 and job is not None:
            KILL_AFTER_STORE.add(job.job_id)
        return value
    if mode == "poison":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode in ("slow", "long"):
        time.sleep(sleep_s)
    if mode == "wait_cancel":
        deadline = time.monotonic() + sleep_s
        while time.monotonic() < deadline and not _cancel_requested():
            time.sleep(0.05)
    return derived(tag, data)


def _lease_expiry(answer: object, raw: dict | None, received: float) -> float | None:
    """The lease's expiry in real epoch seconds, from a poll or heartbeat answer: the control
    plane's absolute expiry when given (same host: same clock), else received + remaining."""
    for source in (raw or {}, answer):
        get = source.get if isinstance(source, dict) else lambda k, s=source: getattr(s, k, None)
        if get("lease_expires_at") is not None:
            return float(get("lease_expires_at"))
        if get("lease_expires_in_s") is not None:
            return received + float(get("lease_expires_in_s"))
    return None


def instrument(client: Client, pause_file: Path | None) -> None:
    """Wrap the client's poll, heartbeat and result upload for the suite's faults and checks."""
    wire, payloads = client.wire, client.payloads
    poll, heartbeat, leases, store = wire.poll, wire.heartbeat, wire.leases, payloads.store
    beats = STATE_DIR / "beats" / f"{os.getpid()}.log"

    def paused_poll(*a, **kw):
        while pause_file is not None and pause_file.exists():
            time.sleep(0.05)
        answer = poll(*a, **kw)
        # One job, or (poll with max_jobs: a Daemon with several workers) a list of them.
        for job in answer if isinstance(answer, list) else [answer]:
            if job is not None:
                LEASE_EXPIRES[job.job_id] = _lease_expiry(job, job.raw, REAL_TIME()) or 0.0
        return answer

    def logged_heartbeat(job_id, lease, *a, **kw):
        sent = REAL_TIME()
        expires = LEASE_EXPIRES.get(job_id)
        left = f"{expires - sent:.3f}" if expires else "?"
        try:
            answer = heartbeat(job_id, lease, *a, **kw)
        except Exception as e:
            _append(beats, f"{job_id} {sent:.3f} {left} error:{type(e).__name__}")
            raise
        LEASE_EXPIRES[job_id] = _lease_expiry(answer, None, REAL_TIME()) or 0.0
        _append(beats, f"{job_id} {sent:.3f} {left} ok")
        return answer

    def logged_leases(daemon_id, held, *a, **kw):
        """The leases long-poll renews every job it names: one beat line per job, as a
        heartbeat would write."""
        sent = REAL_TIME()
        lefts = {}
        for job_id in held:
            expires = LEASE_EXPIRES.get(job_id)
            lefts[job_id] = f"{expires - sent:.3f}" if expires else "?"
        try:
            answer = leases(daemon_id, held, *a, **kw)
        except Exception as e:
            for job_id, left in lefts.items():
                _append(beats, f"{job_id} {sent:.3f} {left} error:{type(e).__name__}")
            raise
        # The control plane renews as the call reaches it, then waits up to `wait_s` before it
        # answers: the renewal was at `received - wait_s` at the earliest, and not before the
        # call was sent. (Counting from `sent` alone made a call held up on its way, by a
        # stalled gateway or Redis, look like a renewal that came after the lease had lapsed.)
        received = REAL_TIME()
        renewed = max(sent, received - float(kw.get("wait_s") or 0.0))
        for job_id, left in lefts.items():
            if job_id not in answer.lost:
                LEASE_EXPIRES[job_id] = renewed + answer.lease_expires_in_s
            _append(beats, f"{job_id} {sent:.3f} {left} ok")
        return answer

    def store_then_maybe_die(encoded, kind, *a, **kw):
        out = store(encoded, kind, *a, **kw)
        job_id = kw.get("job_id")
        if kind == "result" and job_id in KILL_AFTER_STORE:
            ref = out[0] if isinstance(out, tuple) else out
            _append(
                STATE_DIR / "killed_after_store.log",
                f"{job_id} {os.getpid()} {getattr(ref, 'key', '?')} {getattr(ref, 'sha256', '?')}",
            )
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    wire.poll = paused_poll  # type: ignore[method-assign]  # the suite's instrumentation
    wire.heartbeat = logged_heartbeat  # type: ignore[method-assign]  # the suite's instrumentation
    wire.leases = logged_leases  # type: ignore[method-assign]  # the suite's instrumentation
    payloads.store = store_then_maybe_die  # type: ignore[method-assign]  # the suite's instrumentation


def main(argv: list[str] | None = None) -> int:
    global STATE_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--queues", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--clock-offset-s", type=float, default=0.0)
    parser.add_argument("--pause-file", type=Path, default=None)
    args = parser.parse_args(argv)
    STATE_DIR = args.state_dir
    (STATE_DIR / "runs").mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "beats").mkdir(parents=True, exist_ok=True)
    if args.clock_offset_s:
        offset = args.clock_offset_s
        time.time = lambda: REAL_TIME() + offset  # type: ignore[assignment]  # a wrong clock
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stdout,
        format=f"%(asctime)s {args.name} %(name)s %(levelname)s %(message)s",
    )
    client = Client(
        args.endpoint,
        os.environ["PAYLOADSTORE_TOKEN"],
        args.namespace,
        retry=RetryPolicy(max_attempts=10, max_backoff_s=2.0),
    )
    instrument(client, args.pause_file)
    daemon = Daemon(
        client,
        args.queues.split(","),
        concurrency=args.concurrency,
        wait_s=2,
        daemon_id=f"{args.name}-{os.getpid()}",
        check_health=False,
    )
    stats = daemon.run(work)
    print(f"{args.name} pid={os.getpid()} stopped {dict(stats)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
