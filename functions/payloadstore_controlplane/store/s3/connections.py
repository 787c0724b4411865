"""The signed HEAD (and GetObjectTagging) sent over kept-alive connections, without botocore's
request pipeline; any answer this does not settle goes to the client."""

from __future__ import annotations

import os
import time
from typing import Any


def direct_head_allowed(environ: dict[str, str] | None = None) -> bool:
    """Whether the HEAD may go out on a socket of its own: not behind a proxy (botocore honours
    the proxy variables), not on FIPS or dual-stack endpoints (botocore picks those hosts), and
    not opted out with PAYLOADSTORE_DIRECT_AWS=0 (as aws_http decides for its calls)."""
    from ..aws_http import direct_calls_allowed

    return direct_calls_allowed(environ)


def _has_input(sock: Any) -> bool:
    """Whether an idle connection has something to read: the server closed or reset it (or
    sent what no request asked for). Either way it is not reused."""
    import select

    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class HeadConnections:
    """HEAD requests over kept-alive connections, one idle list per endpoint.

    A HEAD answer has no body, so the exchange is a request written by hand and a header block
    read back: no botocore request pipeline (~2 ms of CPU per HEAD through the client: events,
    the service model, the parser) and no new connection per call where the server keeps them.
    A connection is reused only after a complete answer that did not ask to close it, within
    MAX_IDLE_S of its last answer (S3 drops idle connections after ~20 s, and a frozen Lambda
    sandbox may hold one for minutes) and when nothing is waiting on it (a close or reset from
    the server); a reused one that fails before answering is replaced at once."""

    MAX_IDLE = 8
    MAX_IDLE_S = 10.0
    MAX_HEADER_BYTES = 64 << 10

    def __init__(self, connect_timeout_s: float = 2.0, read_timeout_s: float = 5.0):
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: dict[tuple[str, str], list[tuple[Any, float]]] = {}

    def head(
        self, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str]]:
        """(status, header fields with lower-case names); OSError when no answer came."""
        status, fields, _ = self.exchange("HEAD", scheme, netloc, path, headers)
        return status, fields

    def get_small(
        self, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """A GET whose answer is a small body with a Content-Length (GetObjectTagging's XML):
        (status, header fields, body); OSError when no such answer came."""
        return self.exchange("GET", scheme, netloc, path, headers)

    def exchange(
        self, method: str, scheme: str, netloc: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        request = (
            f"{method} {path} HTTP/1.1\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + "\r\n"
        ).encode("latin-1")
        idle = self._idle.setdefault((scheme, netloc), [])
        while True:
            try:
                sock, since = idle.pop()
                reused = True
            except IndexError:
                sock, reused = self._connect(scheme, netloc), False
            if reused and (time.monotonic() - since > self.MAX_IDLE_S or _has_input(sock)):
                sock.close()
                continue
            try:
                sock.sendall(request)
                status, fields, keep, body = self._read_answer(sock, with_body=method != "HEAD")
            except OSError:
                sock.close()
                if reused:
                    continue
                raise
            if keep and len(idle) < self.MAX_IDLE:
                idle.append((sock, time.monotonic()))
            else:
                sock.close()
            return status, fields, body

    def _connect(self, scheme: str, netloc: str):
        import socket

        from ..aws_http import _host_port, _tls_context

        host, port = _host_port(netloc, 443 if scheme == "https" else 80)
        sock = socket.create_connection((host, port), timeout=self.connect_timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.read_timeout_s)
            if scheme == "https":
                context = _tls_context(os.environ.get("AWS_CA_BUNDLE") or None)
                sock = context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return sock

    def _read_answer(
        self, sock: Any, with_body: bool = False
    ) -> tuple[int, dict[str, str], bool, bytes]:
        received = b""
        while (end := received.find(b"\r\n\r\n")) < 0:
            chunk = sock.recv(16384)
            if not chunk:
                raise ConnectionResetError("connection closed before the answer's headers")
            received += chunk
            if len(received) > self.MAX_HEADER_BYTES:
                raise OSError("answer headers too large")
        lines = received[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise OSError("malformed HTTP answer")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        body = b""
        rest = received[end + 4 :]
        if with_body:
            length = fields.get("content-length", "")
            if not length.isdigit() or int(length) > self.MAX_HEADER_BYTES:
                # Chunked or large: not an answer this reader takes (the caller falls back).
                raise OSError("answer without a small content-length")
            while len(rest) < int(length):
                chunk = sock.recv(16384)
                if not chunk:
                    raise ConnectionResetError("connection closed before the answer's body")
                rest += chunk
            body, rest = rest[: int(length)], rest[int(length) :]
        # Bytes past the answer: not an answer to this request; the connection is not reused.
        keep = (
            parts[0] == "HTTP/1.1" and fields.get("connection", "").lower() != "close" and not rest
        )
        return int(parts[1]), fields, keep, body
