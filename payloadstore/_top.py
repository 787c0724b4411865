"""`payloadstore queues` and `payloadstore top`: queue depth, in flight and oldest age as text.

Plain ANSI rather than rich or curses: the SDK keeps its three dependencies, the view is one
table redrawn in place on the terminal's alternate screen, and leaving it (Ctrl-C) restores the
screen and the cursor whatever happened.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 30  # samples of depth kept per queue for the sparkline

ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"
CURSOR_HIDE, CURSOR_SHOW = "\x1b[?25l", "\x1b[?25h"
HOME_CLEAR = "\x1b[H\x1b[2J"


def sparkline(values: Iterable[float]) -> str:
    values = list(values)
    if not values:
        return ""
    top = max(values)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(
        SPARK[min(int(v / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in values
    )


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    # Floored, as a clock reads: 100 s is 1m40s, 7,199 s is 1h59m (never 2m40s or 2h60m).
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def queue_table(
    queues: Sequence[Mapping[str, Any]], history: Mapping[str, Iterable[float]] | None = None
) -> str:
    """A fixed-width table, one row per queue; a DEPTH TREND column when history is given."""
    headers = ["QUEUE", "QUEUED", "IN FLIGHT", "FAILED", "OLDEST"]
    if history is not None:
        headers.append("DEPTH TREND")
    rows = []
    for q in queues:
        row = [
            str(q["name"]),
            str(q["queued"]),
            str(q["in_flight"]),
            str(q.get("failed") or 0),
            format_age(q.get("oldest_queued_age_s")),
        ]
        if history is not None:
            row.append(sparkline(history.get(q["name"], ())))
        rows.append(row)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    right = {1, 2, 3, 4}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ).rstrip()

    out = [line(headers)] + [line(r) for r in rows]
    if not rows:
        out.append("(no queues yet: enqueue a job)")
    return "\n".join(out)


def run_top(
    fetch: Callable[[], list[Mapping[str, Any]]],
    *,
    title: str,
    interval_s: float = 2.0,
    iterations: int | None = None,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Redraw the table every interval until Ctrl-C (or `iterations`); returns the frames drawn."""
    out = out or sys.stdout
    history: dict[str, collections.deque] = {}
    frames = 0
    out.write(ALT_SCREEN_ON + CURSOR_HIDE)
    out.flush()
    try:
        while iterations is None or frames < iterations:
            try:
                queues = fetch()
                error = ""
            except Exception as e:  # noqa: BLE001 - keep showing the last view; say what failed
                queues, error = [], f"error: {getattr(e, 'message', None) or e}"
            for q in queues:
                history.setdefault(q["name"], collections.deque(maxlen=HISTORY)).append(q["queued"])
            stamp = time.strftime("%H:%M:%S")
            body = queue_table(queues, history)
            footer = error or f"refreshing every {interval_s:g}s; Ctrl-C to quit"
            out.write(f"{HOME_CLEAR}{title}  {stamp}\n\n{body}\n\n{footer}\n")
            out.flush()
            frames += 1
            if iterations is not None and frames >= iterations:
                break
            sleep(interval_s)
    except KeyboardInterrupt:
        pass
    finally:
        out.write(CURSOR_SHOW + ALT_SCREEN_OFF)
        out.flush()
    return frames
