"""A daemon process of the reliability suite: the SDK's Daemon running `work` below.

`work(tag, data, mode=...)` returns a value derived from its input (the tag, the sha256 of the
bytes and the bytes reversed), so a result handed to the wrong job, or mangled, shows. Every
call is appended to `<state dir>/runs/<pid>.log` before it does anything else, so the ledger can
count how often each job's function ran, and which jobs ran that nobody submitted.

Modes: `plain`; `slow` (sleeps, so the suite can SIGKILL its daemon mid-job); `long` (runs three
visibility timeouts, kept alive by the Daemon's heartbeats); `poison` (SIGKILLs its own daemon
every time); `wait_cancel` (runs until the job's cancel is requested).
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


def work(tag: str, data: bytes, mode: str = "plain", sleep_s: float = 0.0) -> dict:
    data = bytes(data)
    _append(STATE_DIR / "runs" / f"{os.getpid()}.log", f"{tag} {os.getpid()} {time.time():.3f}")
    if mode in ("slow", "long", "wait_cancel"):
        _append(STATE_DIR / "started.log", f"{tag} {os.getpid()}")
    if mode == "poison":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode in ("slow", "long"):
        time.sleep(sleep_s)
    if mode == "wait_cancel":
        deadline = time.monotonic() + sleep_s
        while time.monotonic() < deadline and not _cancel_requested():
            time.sleep(0.05)
    return derived(tag, data)


def main(argv: list[str] | None = None) -> int:
    global STATE_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--queues", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    STATE_DIR = args.state_dir
    (STATE_DIR / "runs").mkdir(parents=True, exist_ok=True)
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
