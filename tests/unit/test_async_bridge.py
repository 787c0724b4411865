"""The bridge between an AsyncClient's loop and its transfer threads (issue 47): a cancelled task
stops the download it awaits through the readinto path (a plain httpx client, against a real,
slow HTTP server on loopback), and the blocking wire calls of a transfer thread never wait on a
loop that cannot answer them."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from payloadstore import _cancel
from payloadstore._async_bridge import LoopThreadCall, OnLoop
from payloadstore._http import RetryPolicy
from payloadstore._multipart_download import download_parts
from payloadstore._transfer import download, upload

MiB = 1 << 20
SIZE = 40 * MiB
CHUNK = 256 * 1024
RATE = 10 * MiB  # the whole object takes 4 s


@pytest.fixture
def slow_object() -> Iterator[tuple[str, bytes, list[tuple[float, int]]]]:
    """(url, the object's bytes, (time, bytes) of each chunk the server wrote)."""
    data = os.urandom(MiB) * (SIZE // MiB)
    sent: list[tuple[float, int]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                for at in range(0, len(data), CHUNK):
                    time.sleep(CHUNK / RATE)
                    self.wfile.write(data[at : at + CHUNK])
                    sent.append((time.monotonic(), CHUNK))
            except OSError:
                pass  # the reader went away

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/obj", data, sent
    finally:
        server.shutdown()
        server.server_close()


class Wire:
    """A control plane whose calls answer after `delay_s` (on the loop, as AsyncWire's do)."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s

    async def presign_get(self, key: str) -> dict:
        await asyncio.sleep(self.delay_s)
        return {"url": key}


def test_a_cancelled_task_stops_its_direct_download_within_a_second(slow_object):
    url, data, sent = slow_object
    # Given a 40 MiB download through the readinto path that takes 4 s, run in a worker thread
    times: dict[str, float] = {}

    async def main() -> None:
        bridge = OnLoop(Wire(), asyncio.get_running_loop())
        task = asyncio.create_task(
            bridge.run(
                download,
                httpx.Client(timeout=30),
                {"url": url, "method": "GET"},
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                presign_again=lambda: {"url": url},
                retry=RetryPolicy(max_attempts=2, base_s=0.01),
            )
        )
        await asyncio.sleep(0.5)
        # When the awaiting task is cancelled 0.5 s in
        times["cancel"] = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        times["task"] = time.monotonic()

    asyncio.run(main())
    times["run"] = time.monotonic()
    late = sum(n for t, n in sent if t > times["cancel"])
    print(
        f"direct download: cancel->task {times['task'] - times['cancel']:.3f} s, "
        f"cancel->asyncio.run {times['run'] - times['cancel']:.3f} s; "
        f"served after the cancel {late / MiB:.2f} MiB of {SIZE / MiB:.0f}"
    )
    # Then the task and asyncio.run() returned within a second (the thread stopped at its next
    # 1 MiB slice), and the server was not read to the end
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
    assert sum(n for _, n in sent) < SIZE / 2


def test_a_wire_call_on_a_loop_that_is_not_running_fails_at_once():
    # Given a bridge to a loop that is open but not running (its asyncio.run ended elsewhere)
    loop = asyncio.new_event_loop()
    bridge = OnLoop(Wire(), loop)
    try:
        started = time.monotonic()
        # When a transfer thread makes a wire call through it
        with pytest.raises(RuntimeError, match="not running"):
            bridge.presign_get("k")
        # Then it fails at once instead of waiting forever
        assert time.monotonic() - started < 0.5
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        bridge.presign_get("k")


def test_a_wire_call_from_the_loops_own_thread_is_refused():
    async def main() -> None:
        bridge = OnLoop(Wire(), asyncio.get_running_loop())
        # When blocking code running on the loop's thread calls the wire (it would deadlock)
        with pytest.raises(LoopThreadCall, match="asyncio.to_thread"):
            bridge.presign_get("k")

    asyncio.run(asyncio.wait_for(main(), timeout=5))


def test_a_waiting_wire_call_ends_when_its_transfer_is_cancelled_or_the_loop_stops():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    bridge = OnLoop(Wire(delay_s=30), loop)
    try:
        # Given a wire call that takes 30 s, made for a transfer that is then cancelled
        token = _cancel.CancelToken()
        threading.Timer(0.2, token.cancel).start()
        started = time.monotonic()

        def call() -> None:
            _cancel.bind(token)
            bridge.presign_get("k")

        with pytest.raises(_cancel.TransferCancelled):
            contextvars.copy_context().run(call)
        # Then the call ends with the cancel
        assert time.monotonic() - started < 1.0
        # and a call whose loop stops meanwhile ends too, with a clear error
        threading.Timer(0.2, lambda: loop.call_soon_threadsafe(loop.stop)).start()
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="stopped"):
            OnLoop(Wire(delay_s=30), loop).presign_get("k")
        assert time.monotonic() - started < 1.0
    finally:
        runner.join(timeout=5)
        loop.close()


def test_a_bridge_refuses_to_run_from_another_event_loop():
    # Given a bridge bound to a loop that has ended
    async def bind() -> OnLoop:
        return OnLoop(Wire(), asyncio.get_running_loop())

    bridge = asyncio.run(bind())

    # When a transfer is started from a second loop
    async def second() -> None:
        await bridge.run(time.sleep, 0)

    # Then RuntimeError names the problem, at once
    with pytest.raises(RuntimeError, match="one AsyncClient per event loop"):
        asyncio.run(second())


@pytest.fixture
def stalled_server() -> Iterator[str]:
    """A base URL whose server goes silent: `/headers` answers nothing, `/body` sends its
    headers and 1 MiB of a 40 MiB body, then nothing (until the test ends), connection open."""
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path.startswith("/body"):
                self.send_response(206 if self.headers.get("Range") else 200)
                self.send_header("Content-Length", str(SIZE))
                self.end_headers()
                self.wfile.write(b"x" * MiB)
                self.wfile.flush()
            release.wait(60)
            self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def _cancel_stalled(fn, *args, **kwargs) -> dict[str, float]:
    """asyncio.run() of `fn` in a bridge's worker thread, cancelled 0.5 s in: when the cancel
    was sent, when the task ended, when asyncio.run() returned."""
    times: dict[str, float] = {}

    async def main() -> None:
        bridge = OnLoop(Wire(), asyncio.get_running_loop())
        task = asyncio.create_task(bridge.run(fn, *args, **kwargs))
        await asyncio.sleep(0.5)
        times["cancel"] = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        times["task"] = time.monotonic()

    asyncio.run(main())
    times["run"] = time.monotonic()
    print(
        f"stalled: cancel->task {times['task'] - times['cancel']:.3f} s, "
        f"cancel->asyncio.run {times['run'] - times['cancel']:.3f} s"
    )
    return times


@pytest.mark.parametrize("stall", ["headers", "body"])
def test_a_cancel_ends_a_direct_download_blocked_on_a_silent_server(stalled_server, stall):
    # Given a download through the readinto path from a server gone silent (before its
    # headers, or mid-body), the worker thread blocked in a socket read no slice check reaches
    url = f"{stalled_server}/{stall}"
    with httpx.Client(timeout=30) as client:
        # When its task is cancelled
        times = _cancel_stalled(
            download,
            client,
            {"url": url, "method": "GET"},
            size=SIZE,
            sha256=None,
            presign_again=lambda: {"url": url},
            retry=RetryPolicy(max_attempts=3, base_s=0.01),
        )
    # Then the blocked read ends with the cancel: the task and asyncio.run() (which waits for
    # the worker thread) return within a second, not after the 30 s read timeout
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0


def test_a_cancel_ends_a_ranged_download_blocked_on_a_silent_server(stalled_server, tmp_path):
    # Given a download in 5 MiB ranges, several at once, from a server gone silent mid-body
    url = f"{stalled_server}/body"
    with httpx.Client(timeout=30) as client:
        # When its task is cancelled
        times = _cancel_stalled(
            download_parts,
            client,
            {"url": url, "method": "GET"},
            size=SIZE,
            multipart={"part_bytes": 5 * MiB},
            presign_again=lambda: {"url": url},
            retry=RetryPolicy(max_attempts=3, base_s=0.01),
            into=tmp_path / "out.bin",
        )
    # Then every blocked range read ends with it, and no partial file is left
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
    assert list(tmp_path.iterdir()) == []


def test_a_cancel_ends_an_upload_blocked_on_a_silent_server():
    # Given a 64 MiB PUT to a server that takes its connection but reads nothing and never
    # answers: the worker thread blocks in a send once the socket's buffers are full
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held: list[socket.socket] = []
    threading.Thread(
        target=lambda: [held.append(listener.accept()[0]) for _ in range(4)], daemon=True
    ).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/put"
    data = os.urandom(64 * MiB)
    try:
        with httpx.Client(timeout=30) as client:
            # When its task is cancelled
            times = _cancel_stalled(
                upload,
                client,
                {"url": url, "method": "PUT"},
                [data],
                len(data),
                presign_again=lambda: {"url": url},
                retry=RetryPolicy(max_attempts=3, base_s=0.01),
            )
    finally:
        for conn in held:
            conn.close()
        listener.close()
    # Then the blocked send ends with the cancel: the task and asyncio.run() return within a
    # second, not after the 30 s write timeout
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
