"""`payloadstore dashboard`: a web page over the control plane, served from this process.

The standard library's threading HTTP server; the page is three static files shipped with the
package (no build step, nothing fetched from the internet). The bearer token stays in this
process: the page calls this server's JSON routes under /api/, which call the control plane
with the SDK.

Cross-site protection, for a server on a loopback port that acts with an operator's token:
- every request's Host must name the served address (a DNS-rebinding page's Host names its own
  domain and is refused, so another site cannot read the answers through a rebound name);
- state changes are POST only, with `Content-Type: application/json`, an `Origin` (when the
  browser sends one) equal to the served origin, and the `X-CSRF-Token` header equal to this
  process's random token, which only the page's HTML carries;
- answers carry `nosniff`, `no-store`, a Content-Security-Policy allowing only this origin's own
  scripts and styles, and no CORS headers at all;
- the token is scrubbed from every body sent to the browser, in case an error message ever
  quoted it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import secrets
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from ..errors import (
    ApiError,
    AuthError,
    ConflictError,
    InvalidRequest,
    JobNotFound,
    PayloadStoreError,
    QueueNotFound,
    ServiceUnavailable,
)
from .backend import Backend

log = logging.getLogger("payloadstore.dashboard")

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"
# The state tabs of the page, as `GET .../queues/{queue}/jobs?state=` takes them.
STATES = ("queued", "running", "failed", "cancelled", "succeeded")
MAX_LIMIT = 100
DEFAULT_LIMIT = 50
MAX_BODY_BYTES = 16 * 1024
MAX_CURSOR_CHARS = 1024
CSRF_HEADER = "X-CSRF-Token"
QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
JOB_ID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
STATE_NAME_RE = re.compile(r"^[A-Za-z_]{1,40}$")
STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class Refused(Exception):
    """An answer of this server's own (4xx) with a code and a reason for the page."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def static_text(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers that name this server: its address (and `localhost` for loopback)."""
    address = ipaddress.ip_address(host)
    shown = f"[{host}]" if address.version == 6 else host
    names = {f"{shown}:{port}"}
    if address.is_loopback:
        names.add(f"localhost:{port}")
    return frozenset(names)


def check_bind_host(host: str) -> None:
    """An IP address of this machine, never a wildcard: the Host check needs one name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as e:
        raise ValueError(f"--host takes an IP address (e.g. 127.0.0.1), not {host!r}") from e
    if address.is_unspecified:
        raise ValueError(f"--host {host} listens everywhere: give one address (e.g. 127.0.0.1)")


def api_status(error: PayloadStoreError) -> tuple[int, str]:
    """The status and code the page gets for an SDK error of the control plane's answer."""
    if isinstance(error, (JobNotFound, QueueNotFound)):
        return 404, "not_found"
    if isinstance(error, ConflictError):
        return 409, getattr(error, "code", None) or "conflict"
    if isinstance(error, InvalidRequest):
        return 400, getattr(error, "code", None) or "invalid_request"
    if isinstance(error, AuthError):
        # The dashboard's own token was refused: not the browser's fault, nothing it can fix.
        return 502, "control_plane_refused_token"
    if isinstance(error, ServiceUnavailable):
        return 503, "service_unavailable"
    if isinstance(error, ApiError):
        return 502, error.code or "control_plane_error"
    return 502, "control_plane_error"


def error_reason(error: BaseException) -> str | None:
    """The control plane's `error.reason` (e.g. a retry's `queued`, `arguments_expired`)."""
    details = getattr(error, "details", None)
    reason = details.get("reason") if isinstance(details, dict) else None
    return reason if isinstance(reason, str) else None


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise Refused(400, "bad_request", f"{name} is given more than once")
    return values[0]


def parse_limit(text: str | None, default: int, top: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise Refused(400, "bad_request", f"limit must be a whole number, not {text!r}") from None
    if not 1 <= value <= top:
        raise Refused(400, "bad_request", f"limit must be between 1 and {top}")
    return value


def check_queue(name: str) -> str:
    if not QUEUE_RE.match(name):
        raise Refused(400, "bad_request", "a queue name is 1-63 of [A-Za-z0-9_.-]")
    return name


def check_job_id(job_id: str) -> str:
    if not JOB_ID_RE.match(job_id):
        raise Refused(400, "bad_request", "a job id is 26 characters of Crockford base32 (a ULID)")
    return job_id


class IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class Dashboard:
    """The server: `Dashboard(backend).start()` serves in a thread; `.url`; `.close()`."""

    def __init__(
        self,
        backend: Backend,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        secrets_to_hide: tuple[str, ...] = (),
        refresh_s: float = 3.0,
    ):
        check_bind_host(host)
        self.backend = backend
        self.csrf_token = secrets.token_urlsafe(32)
        self.refresh_s = refresh_s
        self._hide = tuple(s for s in secrets_to_hide if s)
        server_class = (
            IPv6Server if ipaddress.ip_address(host).version == 6 else ThreadingHTTPServer
        )
        self.httpd = server_class((host, port), DashboardHandler)
        self.httpd.daemon_threads = True
        self.httpd.dashboard = self  # type: ignore[attr-defined]
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.hosts = allowed_hosts(host, self.port)
        self.origins = frozenset(f"http://{name}" for name in self.hosts)
        self._thread: threading.Thread | None = None
        self.index_html = (
            static_text("index.html")
            .replace("{{csrf_token}}", self.csrf_token)
            .replace("{{refresh_ms}}", str(int(refresh_s * 1000)))
        )

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/"

    def scrub(self, text: str) -> str:
        for secret in self._hide:
            text = text.replace(secret, "[redacted]")
        return text

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.05)

    def start(self) -> Dashboard:
        self._thread = threading.Thread(
            target=self.serve_forever, name="payloadstore-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Route = Callable[["DashboardHandler", "re.Match[str]", dict[str, list[str]]], Any]


class DashboardHandler(BaseHTTPRequestHandler):
    server_version = "payloadstore-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    @property
    def dashboard(self) -> Dashboard:
        return self.server.dashboard  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("request %s", format % args)

    # -- answers ----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", CSP)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, value: Any, **headers: str) -> None:
        text = self.dashboard.scrub(json.dumps(value, ensure_ascii=False))
        self._send(status, text.encode(), "application/json; charset=utf-8", **headers)

    def send_refusal(
        self, status: int, code: str, message: str, reason: str | None = None, **headers: str
    ) -> None:
        error = {"code": code, "message": message}
        if reason:
            error["reason"] = reason
        self.send_json(status, {"error": error}, **headers)

    # -- checks -----------------------------------------------------------------------------

    def check_host(self) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in self.dashboard.hosts:
            raise Refused(403, "bad_host", f"Host {host[:80]!r} is not this dashboard's address")

    def check_post(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None and origin.lower() not in self.dashboard.origins:
            raise Refused(403, "bad_origin", f"Origin {origin[:80]!r} is not this dashboard")
        site = self.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(403, "bad_origin", f"a {site} request may not change anything")
        given = self.headers.get(CSRF_HEADER) or ""
        if not hmac.compare_digest(given.encode(), self.dashboard.csrf_token.encode()):
            raise Refused(403, "csrf_token", f"missing or wrong {CSRF_HEADER} header")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise Refused(415, "unsupported_media_type", "send Content-Type: application/json")

    def read_json_body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise Refused(400, "bad_request", "bad Content-Length") from None
        if length > MAX_BODY_BYTES:
            raise Refused(413, "payload_too_large", f"a body is at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise Refused(400, "bad_request", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise Refused(400, "bad_request", "the body must be a JSON object")
        return body

    # -- dispatch ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch(GET_ROUTES, post=False)

    def do_HEAD(self) -> None:
        self._dispatch(GET_ROUTES, post=False)

    def do_POST(self) -> None:
        self._dispatch(POST_ROUTES, post=True)

    def _refuse_method(self) -> None:
        self.close_connection = True
        self.send_refusal(
            405, "method_not_allowed", f"{self.command} is not used here", Allow="GET, POST"
        )

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    def _dispatch(self, routes: list[tuple[re.Pattern[str], Route]], *, post: bool) -> None:
        parts = urlsplit(self.path)
        try:
            self.check_host()
            if post:
                self.check_post()
            route, match = self._find(routes, parts.path)
            route(self, match, parse_qs(parts.query, keep_blank_values=True))
        except Refused as e:
            if post:
                self.close_connection = True  # an unread body must not be taken for a request
            self.send_refusal(e.status, e.code, e.message)
        except PayloadStoreError as e:
            status, code = api_status(e)
            message = getattr(e, "message", None) or str(e)
            log.info("control plane refused path=%s status=%d code=%s", parts.path, status, code)
            self.send_refusal(status, code, message, error_reason(e))
        except Exception:  # the page gets a 500, the log the reason
            log.exception("dashboard error path=%s", parts.path)
            self.send_refusal(500, "internal_error", "the dashboard failed: see its log")

    def _find(
        self, routes: list[tuple[re.Pattern[str], Route]], path: str
    ) -> tuple[Route, re.Match[str]]:
        for pattern, route in routes:
            match = pattern.fullmatch(path)
            if match:
                return route, match
        other = POST_ROUTES if routes is GET_ROUTES else GET_ROUTES
        if any(p.fullmatch(path) for p, _ in other):
            raise Refused(405, "method_not_allowed", f"{self.command} is not allowed on {path}")
        raise Refused(404, "not_found", f"no such page: {path[:80]}")

    # -- GET routes -------------------------------------------------------------------------

    def page(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        body = self.dashboard.index_html.encode()
        self._send(200, body, "text/html; charset=utf-8")

    def static(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        name = match.group("name")
        body = static_text(name).encode()
        self._send(200, body, STATIC[name])

    def info(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        backend = self.dashboard.backend
        endpoint = urlsplit(backend.endpoint)
        try:
            policy: dict[str, Any] | None = backend.policy()
        except PayloadStoreError as e:  # the page still works without it
            log.info("policy not read code=%s", getattr(e, "code", None))
            policy = None
        self.send_json(
            200,
            {
                "namespace": backend.namespace,
                # scheme://host[:port]/path only: no user info or query from the setting
                "endpoint": f"{endpoint.scheme}://{endpoint.hostname or ''}"
                + (f":{endpoint.port}" if endpoint.port else "")
                + endpoint.path,
                "states": list(STATES),
                "refresh_s": self.dashboard.refresh_s,
                "policy": policy,
            },
        )

    def throughput(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        queue = _one(query, "queue") or None
        if queue is not None:
            check_queue(queue)
        self.send_json(200, self.dashboard.backend.throughput(queue))

    def payloads(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        job_id = check_job_id(match.group("job_id"))
        self.send_json(200, self.dashboard.backend.payloads(job_id))

    def download(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        """The job's arguments or result as a file: streamed through this process from the
        presigned GET it fetches (the browser never sees the URL), never shown inline."""
        job_id = check_job_id(match.group("job_id"))
        kind = match.group("kind")
        with self.dashboard.backend.download(job_id, kind) as found:
            if found is None:
                raise Refused(404, "not_found", f"job {job_id} has no {kind} to download")
            log.info("dashboard download job_id=%s kind=%s", job_id, kind)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header(
                "Content-Disposition", f'attachment; filename="{job_id}-{kind}.msgpack"'
            )
            if found.size is not None:
                self.send_header("Content-Length", str(found.size))
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy", "default-src 'none'; sandbox")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                for chunk in found.chunks:
                    self.wfile.write(chunk)
            except Exception:  # the answer has begun: cut it short, the browser sees a failure
                log.exception("dashboard download cut short job_id=%s kind=%s", job_id, kind)
                self.close_connection = True

    def queues(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        self.send_json(200, {"queues": self.dashboard.backend.queues()})

    def jobs(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        queue = check_queue(match.group("queue"))
        state = _one(query, "state") or "failed"
        if state not in STATES:
            raise Refused(400, "bad_request", f"state must be one of {', '.join(STATES)}")
        limit = parse_limit(_one(query, "limit"), DEFAULT_LIMIT, MAX_LIMIT)
        cursor = _one(query, "cursor") or None
        if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
            raise Refused(400, "bad_request", "cursor is too long")
        self.send_json(200, self.dashboard.backend.jobs(queue, state, limit, cursor))

    def job(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        self.send_json(200, self.dashboard.backend.job(check_job_id(match.group("job_id"))))

    # -- POST routes ------------------------------------------------------------------------

    def cancel(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        job_id = check_job_id(match.group("job_id"))
        self.read_json_body()
        log.info("dashboard cancel job_id=%s", job_id)
        self.send_json(200, self.dashboard.backend.cancel(job_id))

    def retry(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        job_id = check_job_id(match.group("job_id"))
        self.read_json_body()
        log.info("dashboard retry job_id=%s", job_id)
        self.send_json(200, self.dashboard.backend.retry(job_id))

    def redrive(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        queue = check_queue(match.group("queue"))
        body = self.read_json_body()
        states = body.get("states")
        if states is not None and not (
            isinstance(states, list)
            and states
            and all(isinstance(s, str) and STATE_NAME_RE.match(s) for s in states)
        ):
            raise Refused(400, "bad_request", "states must be a non-empty list of state names")
        limit = body.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise Refused(400, "bad_request", "limit must be a whole number")
        log.info("dashboard redrive queue=%s", queue)
        self.send_json(200, self.dashboard.backend.redrive(queue, states, limit))

    def purge(self, match: re.Match[str], query: dict[str, list[str]]) -> None:
        queue = check_queue(match.group("queue"))
        self.read_json_body()
        log.info("dashboard purge queue=%s", queue)
        self.send_json(200, self.dashboard.backend.purge(queue))


_SEGMENT = r"[^/]+"
GET_ROUTES: list[tuple[re.Pattern[str], Route]] = [
    (re.compile(r"/"), DashboardHandler.page),
    (re.compile(r"/static/(?P<name>app\.js|app\.css)"), DashboardHandler.static),
    (re.compile(r"/api/info"), DashboardHandler.info),
    (re.compile(r"/api/queues"), DashboardHandler.queues),
    (re.compile(rf"/api/queues/(?P<queue>{_SEGMENT})/jobs"), DashboardHandler.jobs),
    (re.compile(rf"/api/jobs/(?P<job_id>{_SEGMENT})"), DashboardHandler.job),
    (re.compile(r"/api/throughput"), DashboardHandler.throughput),
    (re.compile(rf"/api/jobs/(?P<job_id>{_SEGMENT})/payloads"), DashboardHandler.payloads),
    (
        re.compile(rf"/api/jobs/(?P<job_id>{_SEGMENT})/(?P<kind>args|result)/download"),
        DashboardHandler.download,
    ),
]
POST_ROUTES: list[tuple[re.Pattern[str], Route]] = [
    (re.compile(rf"/api/jobs/(?P<job_id>{_SEGMENT})/cancel"), DashboardHandler.cancel),
    (re.compile(rf"/api/jobs/(?P<job_id>{_SEGMENT})/retry"), DashboardHandler.retry),
    (re.compile(rf"/api/queues/(?P<queue>{_SEGMENT})/redrive"), DashboardHandler.redrive),
    (re.compile(rf"/api/queues/(?P<queue>{_SEGMENT})/purge"), DashboardHandler.purge),
]

__all__ = [
    "CSRF_HEADER",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "STATES",
    "Dashboard",
]
