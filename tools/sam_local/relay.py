"""TCP relays from the containers' network to the local stack's loopback-only services.

Redis and the S3/SSM emulator keep listening on 127.0.0.1 only. For each, a relay listens on the
host's address on the containers' bridge (reachable from this machine and its containers,
nothing else) and forwards every connection to the loopback port.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading

CHUNK = 256 * 1024


class _Forward(socketserver.BaseRequestHandler):
    target: tuple[str, int]

    def handle(self) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        for s in (self.request, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(CHUNK):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join()
        upstream.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class Relay:
    def __init__(self, listen_host: str, target_port: int, target_host: str = "127.0.0.1"):
        handler = type("Forward", (_Forward,), {"target": (target_host, target_port)})
        self.server = _Server((listen_host, 0), handler)
        self.host, self.port = self.server.server_address[:2]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
