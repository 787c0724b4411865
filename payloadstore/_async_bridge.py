"""Between an `AsyncClient`'s event loop and the blocking transfer code it runs in worker threads.

`OnLoop.run(fn, ...)` runs the blocking code (hashing, S3 transfers, the blob cache) in a worker
thread and awaits it; cancelling the awaiting task cancels the thread's transfer
(`_cancel.CancelToken`: it stops at its next slice or part) and waits, a bounded time, for the
thread to stop before the CancelledError goes on. Without that, a cancelled `await job.result()`
read on to the end of its object, and `asyncio.run()` waited for it on its way out.

The blocking code calls the control plane (presigns, blob checks) through the same `OnLoop`, as
a blocking facade of `AsyncWire`: each call runs on the client's loop and the worker thread waits
for it. Those waits never hang: they end on a cancel, when the loop stops or closes, or after
WIRE_CALL_MAX_S; and a call from the loop's own thread (a blocking read such as `Blob.path` in a
coroutine) is refused at once, since waiting there would deadlock the loop.

An AsyncClient belongs to the event loop it is first used on (its httpx.AsyncClient's
connections do): a transfer started from another loop raises RuntimeError at once, rather than
waiting on a loop that may never run again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from . import _cancel
from .errors import ServiceUnavailable

log = logging.getLogger("payloadstore")

T = TypeVar("T")

# How long a cancelled task waits for its worker thread to stop (it stops at its next slice, well
# under a second): past this it lets the thread finish on its own.
STOP_WAIT_S = 2.0
# A control-plane call made for a worker thread: its own timeouts and retries end it well before.
WIRE_CALL_MAX_S = 600.0
# How often a waiting worker thread looks for a cancel or a stopped loop.
POLL_S = 0.05


class LoopThreadCall(RuntimeError):
    """A blocking control-plane call from the event loop's own thread: it would deadlock."""


class OnLoop:
    """A blocking facade of `AsyncWire` for the transfer code running in a worker thread: each
    call is run on the client's event loop and waited for (cancellable, bounded)."""

    def __init__(self, wire: Any, loop: asyncio.AbstractEventLoop):
        self._wire = wire
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._wire, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, method, args, kwargs)

        return call

    def _call(self, name: str, method: Any, args: tuple, kwargs: dict) -> Any:
        self._check_callable(name)
        future = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)
        token = _cancel.current()
        deadline = time.monotonic() + WIRE_CALL_MAX_S
        while True:
            try:
                return future.result(timeout=POLL_S)
            except concurrent.futures.TimeoutError:
                pass
            if token is not None and token.is_cancelled():
                future.cancel()
                raise _cancel.TransferCancelled()
            if self._loop.is_closed() or not self._loop.is_running():
                future.cancel()
                raise RuntimeError(
                    f"the AsyncClient's event loop stopped during its {name} call: a transfer "
                    "cannot outlive the loop of the client that started it"
                )
            if time.monotonic() > deadline:
                future.cancel()
                raise ServiceUnavailable(
                    f"control-plane call {name} did not answer within {WIRE_CALL_MAX_S:.0f} s"
                )

    def _check_callable(self, name: str) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise LoopThreadCall(
                f"a blocking control-plane call ({name}) was made on the AsyncClient's event "
                "loop thread, where waiting for it would deadlock the loop: run the blocking "
                "code in a worker thread (await asyncio.to_thread(...))"
            )
        if self._loop.is_closed():
            raise RuntimeError(
                f"the AsyncClient's event loop is closed: its {name} call cannot run (an "
                "AsyncClient belongs to the event loop it was first used on)"
            )
        if not self._loop.is_running():
            raise RuntimeError(
                f"the AsyncClient's event loop is not running: its {name} call would wait "
                "forever (an AsyncClient belongs to the event loop it was first used on)"
            )

    def check_running_loop(self) -> None:
        """RuntimeError unless called from this client's loop (its own, running)."""
        running = asyncio.get_running_loop()
        if running is not self._loop:
            state = "closed" if self._loop.is_closed() else "another"
            raise RuntimeError(
                f"this AsyncClient was first used on {state} event loop and is used now from a "
                "second one: an AsyncClient (its httpx.AsyncClient's connections) belongs to "
                "one event loop. Make one AsyncClient per event loop (per asyncio.run call, per "
                "thread running a loop)"
            )

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in a worker thread; cancelling the awaiting task cancels it
        (its transfer stops at its next slice or part) and waits up to STOP_WAIT_S for it."""
        self.check_running_loop()
        token = _cancel.CancelToken()
        context = contextvars.copy_context()
        context.run(_cancel.bind, token)
        future = self._loop.run_in_executor(None, partial(context.run, fn, *args, **kwargs))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            token.cancel()
            started = time.monotonic()
            await asyncio.wait({future}, timeout=STOP_WAIT_S)
            if future.done():
                _retrieved(future)
                log.info(
                    "transfer cancelled stopped_in_s=%.3f fn=%s",
                    time.monotonic() - started,
                    getattr(fn, "__qualname__", fn),
                )
            else:
                future.add_done_callback(_retrieved)
                log.warning(
                    "transfer cancelled but its thread is still running after %.1f s fn=%s",
                    STOP_WAIT_S,
                    getattr(fn, "__qualname__", fn),
                )
            raise


def _retrieved(future: asyncio.Future) -> None:
    """The cancelled thread's outcome, read so asyncio does not report it as never retrieved."""
    if not future.cancelled():
        future.exception()
