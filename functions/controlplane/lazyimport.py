"""Deferred imports for cold start: a subpackage that a dependency imports eagerly but the control
plane never uses is replaced by a placeholder whose `__init__` runs only on first use.

redis-py's `__init__` does `from redis import asyncio`, which pulls in asyncio and redis' whole
async client: ~60% of `import redis` (~0.15-0.25 s of every cold start); the functions use the
synchronous client only. The placeholder is a real package object (its `__path__` is the real
directory, so `redis.asyncio.x` submodules still import normally); reading any attribute it does
not have yet runs the real `redis/asyncio/__init__.py` into it, so code that does use
`redis.asyncio` is unaffected.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

DEFERRED = (("redis", "asyncio"),)


class DeferredPackage(types.ModuleType):
    def __init__(self, full_name: str, init_path: str):
        super().__init__(full_name)
        self.__file__ = init_path
        self.__path__ = [os.path.dirname(init_path)]
        self.__package__ = full_name
        # None: the import system reads __spec__ of modules it finds in sys.modules, and that
        # must not count as a use.
        self.__spec__ = None
        self._deferred_state = "deferred"

    def __getattr__(self, attr: str):
        if attr.startswith("__") or self.__dict__.get("_deferred_state") != "deferred":
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        self._deferred_state = "loading"
        spec = importlib.util.spec_from_file_location(
            self.__name__, self.__file__, submodule_search_locations=list(self.__path__)
        )
        spec.loader.exec_module(self)  # the real __init__, run in this very module object
        self.__spec__ = spec
        self._deferred_state = "loaded"
        return object.__getattribute__(self, attr)


def defer_subpackage(package: str, name: str) -> bool:
    """Put a placeholder for the subpackage `package.name` in place before `package` is
    imported. Returns whether it did (not when already imported, or not found)."""
    full = f"{package}.{name}"
    if full in sys.modules or package in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(package)  # a top-level package: this does not import it
    except (ImportError, ValueError):
        return False
    for base in (spec.submodule_search_locations or []) if spec else []:
        init = os.path.join(base, name, "__init__.py")
        if os.path.exists(init):
            sys.modules[full] = DeferredPackage(full, init)
            return True
    return False


def defer_unused() -> None:
    for package, name in DEFERRED:
        defer_subpackage(package, name)
