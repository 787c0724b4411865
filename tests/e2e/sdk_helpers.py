"""Helpers for the SDK's end-to-end tests: clients of the local gateway and a daemon in a thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from payloadstore import Client, Daemon, codec


def clients(gateway, namespace: str = "dev", **kwargs) -> tuple[Client, Client]:
    """(client, daemon-side client) of one namespace."""
    return (
        Client(gateway.url, gateway.token(namespace, "client"), namespace, **kwargs),
        Client(gateway.url, gateway.token(namespace, "daemon"), namespace, **kwargs),
    )


def unique_queue(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextmanager
def daemon_thread(client: Client, queue: str, fn: Callable[..., Any], **kwargs) -> Iterator[Daemon]:
    """A helper-built daemon taking jobs in the background, stopped (after its job in hand) on exit."""
    daemon = Daemon(client, [queue], wait_s=1, install_signal_handlers=False, **kwargs)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            daemon.run(fn)
        except BaseException as e:  # noqa: BLE001 - surfaced to the test below
            errors.append(e)

    thread = threading.Thread(target=run, name=f"daemon-{queue}", daemon=True)
    thread.start()
    try:
        yield daemon
    finally:
        daemon.stop()
        thread.join(timeout=30)
    assert not thread.is_alive(), "daemon did not stop within 30 s"
    if errors:
        raise errors[0]


def bytes_len_for_encoded_size(target: int, wrap: Callable[[bytes], Any] = lambda b: b) -> int:
    """The length L of a bytes value such that encode(wrap(bytes(L))) is exactly `target` bytes."""
    guess = max(0, target - 64)
    for length in range(guess, target + 1):
        if codec.encode(wrap(bytes(length))).nbytes == target:
            return length
    raise AssertionError(f"no bytes length encodes to exactly {target} bytes")
