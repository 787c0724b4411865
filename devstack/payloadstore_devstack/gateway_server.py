"""The HTTP server of the local gateway: HTTP/1.1 keep-alive, body limits, any method.

The server only frames requests and responses; `LocalGateway.handle` (gateway.py) decides every
answer. A method no route serves (TRACE, QUERY, anything) reaches it too, so it gets API
Gateway's 403 `Missing Authentication Token` rather than this server's 501 page."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from payloadstore_devstack.gateway_events import IncomingRequest, gateway_response, too_large

log = logging.getLogger("devstack.gateway")

DEFAULT_PORT = 8080
# Past the body limit we still read (and drop) this much so the client gets to see the 413
# instead of a reset connection; anything larger than that is cut off.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "payloadstore-local-gateway"
    # Headers and body leave in separate writes; with Nagle on, the body then waits for the
    # client's delayed ACK: ~40 ms added to every keep-alive request (measured: 44 ms -> <1 ms).
    disable_nagle_algorithm = True
    gateway: Any  # the LocalGateway; set on the subclass the server builds

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is written by _serve instead

    def __getattr__(self, name: str):
        # http.server looks up do_<METHOD>; every method goes to the gateway, which answers the
        # ones no route serves as API Gateway does.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def _read_body(self) -> tuple[bytes, bool]:  # noqa: C901 - the body rules of API Gateway (length, chunked, limits), one branch each
        """The request body, and whether it went over the limit (then it is read and dropped)."""
        limit = self.gateway.max_body_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            total, over = 0, False
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data = self.rfile.read(size)
                self.rfile.readline(3)
                total += size
                if total > limit:
                    over = True
                    chunks = []
                    if total > DRAIN_LIMIT_BYTES:
                        self.close_connection = True
                        break
                else:
                    chunks.append(data)
            return b"".join(chunks), over
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        if length > limit:
            remaining = min(length, DRAIN_LIMIT_BYTES)
            while remaining > 0:
                got = self.rfile.read(min(remaining, 1 << 20))
                if not got:
                    break
                remaining -= len(got)
            if length > DRAIN_LIMIT_BYTES:
                self.close_connection = True
            return b"", True
        return (self.rfile.read(length) if length else b""), False

    def _serve(self) -> None:
        started = time.monotonic()
        try:
            body, over = self._read_body()
        except (ValueError, ConnectionError) as e:
            log.warning("bad request framing error=%s", e)
            self.close_connection = True
            return
        if over:
            resp = gateway_response(too_large(), str(uuid.uuid4()))
        else:
            req = IncomingRequest(
                method=self.command.upper(),
                raw_path=self.path,
                headers=[
                    (k, v)
                    for k, v in self.headers.items()
                    if k.lower() not in ("transfer-encoding", "connection")
                ],
                body=body,
                source_ip=self.client_address[0],
            )
            resp = self.gateway.handle(req)
        try:
            self.send_response(resp.status)
            for name, value in resp.headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(resp.body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(resp.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        elapsed_ms = (time.monotonic() - started) * 1000
        # The path only: query strings may carry values worth keeping out of logs.
        log.info(
            "request method=%s path=%s status=%d ms=%.1f",
            self.command,
            self.path.split("?", 1)[0],
            resp.status,
            elapsed_ms,
        )


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(gateway: Any, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> GatewayServer:
    """Bind the gateway to host:port (port 0 picks a free one). Raises OSError if taken."""
    handler_cls = type("BoundRequestHandler", (_RequestHandler,), {"gateway": gateway})
    return GatewayServer((host, port), handler_cls)


class PortInUseError(RuntimeError):
    pass


def bind_or_explain(gateway: Any, host: str, port: int) -> GatewayServer:
    try:
        return make_server(gateway, host, port)
    except OSError as e:
        raise PortInUseError(
            f"port {port} on {host} is taken ({e.strerror}); stop what uses it or set PAYLOADSTORE_PORT"
        ) from e


@dataclass
class RunningGateway:
    """A gateway serving on a background thread (tests, the demo)."""

    server: GatewayServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_in_thread(gateway: Any, host: str = "127.0.0.1", port: int = 0) -> RunningGateway:
    server = bind_or_explain(gateway, host, port)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="local-gateway",
        daemon=True,
    )
    thread.start()
    return RunningGateway(server, thread)
