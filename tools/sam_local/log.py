"""Progress lines of `make sam-local`, with the seconds since it started."""

from __future__ import annotations

import sys
import time

STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[sam-local {time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


def elapsed() -> float:
    return time.monotonic() - STARTED


def err(message: str) -> None:
    print(f"[sam-local {time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)
