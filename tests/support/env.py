"""Set environment variables for a session-scoped fixture and put the old values back after."""

from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def patched_environ(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield values
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def single_server_env(url: str) -> dict[str, str]:
    """The handlers' settings for one private redis-server, whatever PAYLOADSTORE_REDIS says:
    tests that read a server's own figures (commandstats, used memory) start one of these."""
    return {"REDIS_URL": url, "REDIS_CLUSTER": "false", "REDIS_MIN_REPLICA_ACKS": "0"}
