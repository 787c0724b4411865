"""The table `payloadstore jobs QUEUE` prints: id, state, attempts, tier, age, error type."""

from __future__ import annotations

import time
from collections.abc import Iterable

from ._wire import JobInfo

COLUMNS = ("JOB ID", "STATE", "ATTEMPTS", "TIER", "AGE", "ERROR")


def age(seconds: float | None) -> str:
    """A short age: 42s, 7m, 3h, 2d."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def row(job: JobInfo, now: float) -> tuple[str, ...]:
    error = job.error or {}
    # Only while the request is pending: a job cancelled while queued reads `cancelled`.
    pending = job.cancel_requested and job.state in ("queued", "running")
    state = job.state + (" (cancel requested)" if pending else "")
    retried = f" ({job.retries} retried)" if job.retries else ""
    return (
        job.job_id,
        state,
        f"{job.attempts or 0}{retried}",
        job.tier or "-",
        age(now - job.created_at if job.created_at else None),
        str(error.get("type") or "-"),
    )


def jobs_table(jobs: Iterable[JobInfo], now: float | None = None) -> str:
    """Aligned columns, one job per line, a header first."""
    at = time.time() if now is None else now
    rows = [COLUMNS, *(row(j, at) for j in jobs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
