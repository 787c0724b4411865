"""`payloadstore dashboard`: queues, jobs by state, a job's error and traceback, and cancel,
retry, redrive and purge, in a web page served on 127.0.0.1 (docs/operations.md, "Dashboard")."""

from __future__ import annotations

from .backend import Backend, ClientBackend
from .server import CSRF_HEADER, DEFAULT_HOST, DEFAULT_PORT, STATES, Dashboard

__all__ = [
    "CSRF_HEADER",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "STATES",
    "Backend",
    "ClientBackend",
    "Dashboard",
]
