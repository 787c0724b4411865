"""Log lines that start with an ISO-8601 UTC time to the millisecond (2026-12-06T22:10:01.123Z):
one clock for the daemon's lines, the control plane's and the dashboard's, whatever the host's
time zone."""

from __future__ import annotations

import logging
import time


class UtcIsoFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def utc_handler(handler: logging.Handler, fmt: str) -> logging.Handler:
    handler.setFormatter(UtcIsoFormatter(fmt))
    return handler
