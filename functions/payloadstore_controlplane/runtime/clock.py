"""The control plane's clock: one function, so tests can move time (e.g. past the 48 h cutoff)."""

import time


def now() -> float:
    return time.time()
