"""Lambda-like containers for the local gateway.

Lambda runs one invocation per container at a time; concurrent requests get more containers.
Handler modules rely on that: a Powertools resolver keeps the current event and route in module
state. Running one module instance on several threads at once would let one request read another's
event (its body, even its authorizer identity). So each container here is a private instance of the
handler module, loaded on demand and serving one invocation at a time; the shared code below it
(clients, caches in `handlers/_deps.py`, logic, store) is thread-safe, like a container's imports would be.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict, Any], Any]


def per_thread_router_state() -> None:
    """Make Powertools' current event and Lambda context per thread, in this process.

    `ApiGatewayResolver.resolve` stores the event in class attributes of `BaseRouter`
    (`BaseRouter.current_event = ...`), which every resolver in the process reads, whatever module
    instance it lives in. In Lambda one container serves one invocation at a time, so that is
    harmless; here, two concurrent requests read each other's event (another request's body,
    path parameters, even caller identity). Both attributes become thread-local: the instance
    reads go through a descriptor on `BaseRouter`, the class-level writes and reads through the
    same descriptor on its metaclass. Idempotent.
    """
    from aws_lambda_powertools.event_handler import api_gateway

    base = api_gateway.BaseRouter
    if getattr(type(base), "_per_thread_state", False):
        return
    local = threading.local()

    class PerThread:
        def __init__(self, name: str):
            self.name = name

        def __get__(self, obj: Any, objtype: Any = None) -> Any:
            try:
                return getattr(local, self.name)
            except AttributeError:
                raise AttributeError(self.name) from None

        def __set__(self, obj: Any, value: Any) -> None:
            setattr(local, self.name, value)

    names = ("current_event", "lambda_context")
    for name in names:
        setattr(base, name, PerThread(name))  # instance reads: app.current_event
    meta = type(
        "PerThreadRouterMeta",
        (type(base),),
        {"_per_thread_state": True, **{name: PerThread(name) for name in names}},
    )
    base.__class__ = meta  # type: ignore[method-assign]  # class-level writes: BaseRouter.current_event = event


class HandlerPool:
    """Calls `module.function` in an idle container, starting a new one when all are busy."""

    _serial = itertools.count(1)

    def __init__(self, handler: str):
        module_name, _, attr = handler.rpartition(".")
        if not module_name:
            raise ValueError(f"handler {handler!r} is not of the form module.function")
        self.handler = handler
        per_thread_router_state()
        self._module_name, self._attr = module_name, attr
        # The first container is the canonical import: an import error surfaces here, at warm-up.
        self._idle: list[Handler] = [getattr(importlib.import_module(module_name), attr)]
        self._lock = threading.Lock()
        self.containers = 1

    def _new_container(self) -> Handler:
        canonical = sys.modules[self._module_name]
        name = f"{self._module_name}__container{next(self._serial)}"
        spec = importlib.util.spec_from_file_location(name, canonical.__file__)
        # The canonical module was imported from its .py file, so that file has a spec and loader.
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, self._attr)

    def __call__(self, event: dict, context: Any) -> Any:
        with self._lock:
            fn = self._idle.pop() if self._idle else None
            if fn is None:
                self.containers += 1
        if fn is None:
            fn = self._new_container()
        try:
            return fn(event, context)
        finally:
            with self._lock:
                self._idle.append(fn)
