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
