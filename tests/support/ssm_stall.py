"""A loopback TCP proxy in front of the emulator's SSM that can stall or throttle it.

`mode` is read per connection: "pass" forwards to the upstream as is; "stall" reads the request
and never answers (Parameter Store unreachable: the caller's socket timeout ends it); "throttle"
answers 400 ThrottlingException, as SSM does past its per-account rate; "slow_listing" forwards
every call but holds each GetParametersByPath page `page_delay_s` first (a listing of many
pages, progressing). Connections held by a
stall are closed when the proxy stops. Listens on 127.0.0.1 only; threads of this process."""

from __future__ import annotations

import socket
import threading
import time

_THROTTLED_BODY = b'{"__type":"ThrottlingException","message":"Rate exceeded"}'
THROTTLED = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.1\r\n"
    + f"Content-Length: {len(_THROTTLED_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _THROTTLED_BODY
)


class SsmStall:
    def __init__(self, upstream: str):
        host, _, port = upstream.split("://", 1)[-1].rstrip("/").partition(":")
        self._upstream = (host, int(port or 80))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.mode = "pass"
        self.page_delay_s = 0.35
        self.requests = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self.requests += 1
        mode = self.mode
        if mode == "stall":
            self._held.append(client)
            return
        if mode == "throttle":
            try:
                client.recv(65536)
                client.sendall(THROTTLED)
            finally:
                client.close()
            return
        first = client.recv(65536)
        if mode == "slow_listing" and b"GetParametersByPath" in first:
            time.sleep(self.page_delay_s)
        upstream = socket.create_connection(self._upstream, timeout=10)
        upstream.sendall(first)
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        _pump(upstream, client)

    def release(self) -> None:
        """SSM answers again: new connections are forwarded, and the ones a stall held are
        closed (their callers see a cut connection, as when the stall ends in a reset)."""
        self.mode = "pass"
        held, self._held = self._held, []
        for conn in held:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        for held in self._held:
            held.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
