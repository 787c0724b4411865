"""A per-process cache that builds each value once, however many threads ask for it at once.

In Lambda a container serves one invocation at a time, so `functools.lru_cache` would do. The
local gateway serves every concurrent invocation from one process, and the code below the handler
modules (clients, token store, settings) is shared by all its containers, as a container's imports
are. `lru_cache` does not lock: 100 requests arriving together on a cold process each built their
own botocore client (~0.2 s of CPU each, under the GIL), and every other route waited ~30 s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def built_once(maxsize: int | None = 8) -> Callable[[F], F]:
    """`lru_cache(maxsize)` whose misses are built under a lock: concurrent callers of a value not
    yet built wait for the one build instead of each building their own."""

    def decorate(fn: F) -> F:
        cached = lru_cache(maxsize=maxsize)(fn)
        lock = threading.RLock()

        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return cached(*args, **kwargs)

        # lru_cache's own API on the wrapper, which mypy types as a plain function.
        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]  # see above
        wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]  # see above
        return wrapper  # type: ignore[return-value]  # wraps keeps fn's signature; mypy cannot see it

    return decorate
