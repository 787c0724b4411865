"""Stopping a transfer that runs in a worker thread, from outside it.

An `AsyncClient` moves payload bytes in a worker thread; when the awaiting task is cancelled, the
thread must stop too, not read on to the end of a 1 GiB object. The task's side sets a
`CancelToken`; the transfer loops (`_transfer`, `_multipart`, `_blobs`, `_blob_cache`) call
`checkpoint()` between slices and parts, which raises `TransferCancelled` once it is set.

The token reaches the transfer code through a context variable (`cancelling`), bound in the
worker thread's context: no signature between the client and the socket loop carries it. The
threads of a multipart transfer's pool do not inherit contexts: their transfer links its own stop
event to the token (`CancelToken.link`) before starting them.

A thread blocked in a socket read (a server gone silent) reaches no checkpoint until the read
times out, minutes later, and `asyncio.run()` waits for that thread on its way out: the reads
register a way to cut their connection (`on_cancel`), which the cancel calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class TransferCancelled(BaseException):
    """The transfer's caller went away (its task was cancelled): stop, and clean up on the way
    out. A BaseException, as asyncio.CancelledError is: no retry loop or `except Exception`
    swallows it."""


class CancelToken:
    """Set once, by the side that wants the transfer stopped; read by the transfer's loops."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._linked: list[Callable[[], None]] = []

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            linked = list(self._linked)
        for callback in linked:
            callback()

    def is_cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, cut short by a cancel; True when cancelled."""
        return self._event.wait(seconds)

    @contextmanager
    def link(self, event: threading.Event) -> Iterator[None]:
        """`event` is set too when this token is cancelled (already set if it is), until the
        block ends: a transfer's own stop event, read by its pool's threads."""
        with self.calling(event.set):
            yield

    @contextmanager
    def calling(self, callback: Callable[[], None]) -> Iterator[None]:
        """`callback` is called (by the cancelling thread; at once if already cancelled) when
        this token is cancelled before the block ends. It must not raise."""
        with self._lock:
            self._linked.append(callback)
            cancelled = self._event.is_set()
        if cancelled:
            callback()
        try:
            yield
        finally:
            with self._lock:
                self._linked.remove(callback)


_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "payloadstore_cancel", default=None
)


def current() -> CancelToken | None:
    """The token of the transfer this thread runs for, if anyone can cancel it."""
    return _current.get()


def bind(token: CancelToken | None) -> contextvars.Token:
    """Make `token` the current one (in the caller's context; undo with `_current.reset`)."""
    return _current.set(token)


def checkpoint() -> None:
    """TransferCancelled once the current transfer was cancelled; nothing otherwise."""
    token = _current.get()
    if token is not None and token.is_cancelled():
        raise TransferCancelled()


def cancellable_sleep(sleep: Callable[[float], None]) -> Callable[[float], None]:
    """A retry's backoff that a cancel cuts short (the given `sleep` when it is not time.sleep:
    a test's clock, which a cancel does not reach)."""
    token = _current.get()
    if token is None or sleep is not time.sleep:
        return sleep

    def pause(seconds: float) -> None:
        if token.wait(seconds):
            raise TransferCancelled()

    return pause


@contextmanager
def on_cancel(callback: Callable[[], None]) -> Iterator[None]:
    """Within the block, a cancel of the current transfer calls `callback` (from the cancelling
    thread): it cuts a connection whose blocked read no checkpoint reaches. It must not raise."""
    token = _current.get()
    if token is None:
        yield
        return
    with token.calling(callback):
        yield


@contextmanager
def linked(event: threading.Event) -> Iterator[None]:
    """Within the block, a cancel of the current transfer sets `event` (a pool's stop)."""
    token = _current.get()
    if token is None:
        yield
        return
    with token.link(event):
        yield


def cut_connection(conn: Any) -> None:
    """Shut an http.client connection's socket down from another thread (a cancel): a read
    blocked on it returns at once (EOF or an OSError) instead of when the server speaks or the
    read times out. Its own thread closes it afterwards."""
    _shut(getattr(conn, "sock", None))


class SentRequests:
    """Marks the requests of one transfer (`extensions=`), so that a cancel (another thread)
    can shut down the sockets they are sent on in an httpx client's own connection pool: a
    send stuck on a full socket, or a wait for an answer, ends then. Nothing for a client whose
    transport is not httpx's own (its connections are out of reach)."""

    def __init__(self, client: Any):
        self._client = client
        self.extensions = {"payloadstore_transfer": self}

    def cut(self) -> None:
        pool = getattr(getattr(self._client, "_transport", None), "_pool", None)
        for waiting in list(getattr(pool, "_requests", ())):
            extensions = getattr(getattr(waiting, "request", None), "extensions", {})
            if extensions.get("payloadstore_transfer") is not self:
                continue
            http11 = getattr(getattr(waiting, "connection", None), "_connection", None)
            stream = getattr(http11, "_network_stream", None)
            _shut(stream.get_extra_info("socket") if stream is not None else None)


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):  # closed meanwhile: nothing blocks on it
            sock.shutdown(socket.SHUT_RDWR)
