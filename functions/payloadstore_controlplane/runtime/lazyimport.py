"""Deferred imports for cold start: a subpackage that a dependency imports eagerly but the control
plane never uses is replaced by a placeholder whose `__init__` runs only on first use.

A package whose `__init__` only re-exports names of its submodules (`from .x import A, B`) is
replaced by a placeholder that imports, for each name read, only the submodule defining it
(`defer_reexports`): Powertools' `event_handler` package imports every resolver it has (AppSync,
Bedrock, VPC Lattice, ...) and `utilities.data_classes` every event source (~40 modules), where
the REST resolver needs one of each (~15-20 ms of every cold start). Reading a name the
`__init__` does not re-export runs the real `__init__` into the placeholder, as above.

redis-py's `__init__` does `from redis import asyncio`, which pulls in asyncio and redis' whole
async client: ~60% of `import redis` (~0.15-0.25 s of every cold start); the functions use the
synchronous client only. The placeholder is a real package object (its `__path__` is the real
directory, so `redis.asyncio.x` submodules still import normally); reading any attribute it does
not have yet runs the real `redis/asyncio/__init__.py` into it, so code that does use
`redis.asyncio` is unaffected.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import threading
import types

_LOAD_LOCK = threading.RLock()

DEFERRED = (
    ("redis", "asyncio"),
    # Powertools' logger imports its JMESPath helpers (jmespath, gzip, ~5 ms) for
    # inject_lambda_context(correlation_id_path=...), which observability.lambda_entry does not
    # use: it reads the request id itself.
    ("aws_lambda_powertools.utilities", "jmespath_utils"),
)
# Packages of which a dependency imports a few names eagerly but the control plane uses none:
# only the submodules defining those names are imported, the rest on first use of anything else.
# redis-py's parsers do `from asyncio import IncompleteReadError, StreamReader` and its event
# module names `asyncio.Lock` (for its async client); asyncio's own __init__ imports its event loops, subprocess and SSL transports
# (~20-30 ms of every cold start) that a synchronous Redis client never runs.
PARTIAL = {
    "asyncio": {
        "IncompleteReadError": "asyncio.exceptions",
        "StreamReader": "asyncio.streams",
        # read at import by redis-py's annotations (evaluated eagerly before Python 3.14)
        "Lock": "asyncio.locks",
        "AbstractEventLoop": "asyncio.events",
        "Future": "asyncio.futures",
        "Task": "asyncio.tasks",
        # read by every logging.LogRecord once asyncio is in sys.modules (no loop runs: None)
        "current_task": "asyncio.tasks",
    },
}
# Packages whose __init__ only re-exports (checked when deferring: anything else in the file and
# the real __init__ runs as usual).
REEXPORTING = (
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.data_classes",
)


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
        if not attr.startswith("__"):
            self._run_init()
            if attr in self.__dict__:
                return self.__dict__[attr]
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")

    def _run_init(self) -> None:
        """Run the real __init__ in this very module object, once; another thread asking
        meanwhile waits for it (the thread running it sees only what is bound so far)."""
        with _LOAD_LOCK:
            if self.__dict__.get("_deferred_state") != "deferred":
                return
            self._deferred_state = "loading"
            spec = importlib.util.spec_from_file_location(
                self.__name__, self.__file__, submodule_search_locations=list(self.__path__)
            )
            assert spec is not None and spec.loader is not None
            try:
                spec.loader.exec_module(self)
            except BaseException:
                self._deferred_state = "deferred"
                raise
            self.__spec__ = spec
            self._deferred_state = "loaded"


def defer_subpackage(package: str, name: str) -> bool:
    """Put a placeholder for the subpackage `package.name` in place before `package` is
    imported. Returns whether it did (not when already imported, or not found)."""
    full = f"{package}.{name}"
    top, _, inner = package.partition(".")
    if full in sys.modules or top in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(top)  # a top-level package: this does not import it
    except (ImportError, ValueError):
        return False
    for base in (spec.submodule_search_locations or []) if spec else []:
        init = os.path.join(base, *(inner.split(".") if inner else ()), name, "__init__.py")
        if os.path.exists(init):
            sys.modules[full] = DeferredPackage(full, init)
            return True
    return False


def defer_unused() -> None:
    for package, name in DEFERRED:
        defer_subpackage(package, name)
    for package, names in PARTIAL.items():
        defer_names(package, names)
    # importlib.metadata (~10 ms with zipfile and the rest it imports) is imported at module level
    # by redis-py, for a version lookup the client is spared (store/redis_client.DRIVER_INFO), and
    # by pydantic's plugin loader, which reads it unless plugins are switched off: the stack sets
    # PYDANTIC_DISABLE_PLUGINS for the functions (the layer holds no pydantic plugin).
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true"):
        defer_submodule("importlib", "metadata")


def _unimported_package(full: str) -> str | None:
    """The `__init__` path of package `full` when it is installed and not imported yet."""
    if full in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(full)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return None
    return spec.origin


def defer_submodule(package: str, name: str) -> bool:
    """Put a placeholder for `package.name` in place, its package imported (a standard library
    package, say), bound as the package's attribute as an import would. Returns whether it did."""
    full = f"{package}.{name}"
    origin = _unimported_package(full)
    if origin is None:
        return False
    placeholder = DeferredPackage(full, origin)
    sys.modules[full] = placeholder
    setattr(sys.modules[package], name, placeholder)
    return True


def defer_names(package: str, names: dict[str, str]) -> bool:
    """Put a placeholder for the top-level package `package` in place that imports only
    `names[attr]` for each name of `names` read, and runs the real `__init__` on any other."""
    origin = _unimported_package(package)
    if origin is None:
        return False
    sys.modules[package] = ReexportingPackage(package, origin, dict(names), complete=False)
    return True


# `from .x import (A, B as C)` or `from pkg.sub.x import A`, one statement (possibly parenthesized).
_FROM_IMPORT = re.compile(r"^from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]+)", re.MULTILINE)
_DOCSTRING = re.compile(r'\A\s*(?:"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\')')
_ALL = re.compile(r"^__all__[ \t]*=[ \t]*\[[^\]]*\]", re.MULTILINE)
_COMMENT = re.compile(r"#[^\n]*")


def reexports(package: str, source: str) -> dict[str, str] | None:  # noqa: C901 - a table walk over the import forms it defers; split, it reads worse
    """{name: submodule} when the __init__ source does nothing but re-export names of its own
    submodules (docstring, comments, `__all__`, `from __future__`); None otherwise."""
    exports: dict[str, str] = {}
    for module, names in _FROM_IMPORT.findall(source):
        if module == "__future__":
            continue
        if module.startswith("."):
            if module.startswith(".."):
                return None
            module = f"{package}{module}"
        if not module.startswith(package + "."):
            return None
        for item in _COMMENT.sub("", names).strip("()").split(","):
            parts = item.split()
            if not parts:
                continue
            if len(parts) == 3 and parts[1] == "as":
                exports[parts[2]] = module
            elif len(parts) == 1 and parts[0] != "*":
                exports[parts[0]] = module
            else:
                return None
    rest = _FROM_IMPORT.sub("", _ALL.sub("", _DOCSTRING.sub("", source)))
    if _COMMENT.sub("", rest).strip():
        return None
    return exports


class ReexportingPackage(DeferredPackage):
    """A placeholder for a re-exporting package: a name it re-exports imports its submodule only."""

    def __init__(
        self, full_name: str, init_path: str, exports: dict[str, str], complete: bool = True
    ):
        super().__init__(full_name, init_path)
        self._deferred_exports = exports
        # complete: `exports` is all the real __init__ binds (parsed from it); else any other
        # name runs the real __init__.
        self._deferred_complete = complete

    def __getattr__(self, attr: str):
        if self.__dict__.get("_deferred_state") != "deferred":
            return super().__getattr__(attr)
        exports: dict[str, str] = self.__dict__["_deferred_exports"]
        module = exports.get(attr)
        if module is not None:
            value = getattr(importlib.import_module(module), attr)
            # Importing the submodule bound its own name here; the re-export wins, as in the
            # real __init__.
            setattr(self, attr, value)
            return value
        if not attr.startswith("__") and any(
            os.path.exists(os.path.join(base, attr + ".py"))
            or os.path.exists(os.path.join(base, attr, "__init__.py"))
            for base in self.__path__
        ):
            # A submodule (`from . import x` asks for it first): imported alone, which binds it
            # here as the real __init__ would have.
            return importlib.import_module(f"{self.__name__}.{attr}")
        if attr == "__all__" or not self.__dict__["_deferred_complete"]:
            self._run_init()  # `from package import *`, or a name not known: the real __init__
            if attr in self.__dict__:
                return self.__dict__[attr]
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        return super().__getattr__(attr)


def defer_reexports(full_name: str) -> bool:
    """Put a placeholder for the re-exporting package `full_name` in place (its parent package is
    imported normally). Returns whether it did."""
    if full_name in sys.modules:
        return False
    parent_name, _, name = full_name.rpartition(".")
    try:
        parent = importlib.import_module(parent_name)
    except ImportError:
        return False
    if full_name in sys.modules:  # the parent imported it
        return False
    for base in getattr(parent, "__path__", ()):
        init = os.path.join(base, name, "__init__.py")
        try:
            with open(init, encoding="utf-8") as f:
                source = f.read()
        except OSError:
            continue
        exports = reexports(full_name, source)
        if exports is None:
            return False
        placeholder = ReexportingPackage(full_name, init, exports)
        sys.modules[full_name] = placeholder
        setattr(parent, name, placeholder)
        return True
    return False


def defer_reexporting_packages() -> None:
    for full_name in REEXPORTING:
        defer_reexports(full_name)
