"""A local stand-in for API Gateway (REST API, Lambda proxy integration) in front of the handlers.

It serves the route table of `controlplane.routes` with the very handler strings the CDK stack
deploys, and behaves like API Gateway where a client or handler could notice the difference:

- each request becomes a REST proxy event (v1 payload): path and query parameters, repeated
  query keys in `multiValueQueryStringParameters`, bodies of the binary media types as base64
  with `isBase64Encoded`, `requestContext.authorizer` filled from the authorizer's context;
- routes with roles first go through the REQUEST authorizer: no `Authorization` header is 401
  without calling it, `Exception("Unauthorized")` is 401, an explicit Deny (or no matching
  Allow) is 403, and results are cached per header value for `authorizer_cache_s`, with the
  cached policy evaluated against each new method ARN exactly like API Gateway does;
- unknown routes get 403 `Missing Authentication Token`, bodies over 10 MB 413, handlers
  slower than 29 s 504, handler exceptions and malformed responses 502.

Handlers run on the request thread's own worker thread inside this process (concurrently, so
long-polls never block other callers), each invocation in a container of its own: a private
instance of the handler module, as Lambda would give it (containers.py).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from payloadstore.devstack.containers import HandlerPool

# Not under "payloadstore": that is the handlers' Powertools logger (service name), whose level
# and JSON format must not swallow or restyle the gateway's own lines.
log = logging.getLogger("devstack.gateway")

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"

DEFAULT_PORT = 8080
ACCOUNT_ID = "123456789012"
API_ID = "local"
STAGE = "local"
# Lambda's synchronous invocation payload limit (request event and response), 6 MB.
LAMBDA_PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
# Past the body limit we still read (and drop) this much so the client gets to see the 413
# instead of a reset connection; anything larger than that is cut off.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024

Handler = Callable[[dict, Any], Any]


def ensure_functions_on_path() -> None:
    """Handler strings are relative to the `functions/` code asset, as in Lambda."""
    path = str(FUNCTIONS_DIR)
    if path not in sys.path:
        sys.path.insert(0, path)


def import_handler(handler: str) -> Handler:
    """`package.module.function` -> the function, like the Lambda runtime resolves `Handler`."""
    ensure_functions_on_path()
    module_name, _, attr = handler.rpartition(".")
    if not module_name:
        raise ValueError(f"handler {handler!r} is not of the form module.function")
    return getattr(importlib.import_module(module_name), attr)


class GatewayError(Exception):
    """An API Gateway-generated response (not from a handler)."""

    def __init__(self, status: int, message: str | None, error_type: str):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


def missing_route() -> GatewayError:
    return GatewayError(403, "Missing Authentication Token", "MissingAuthenticationTokenException")


def unauthorized() -> GatewayError:
    return GatewayError(401, "Unauthorized", "UnauthorizedException")


def explicit_deny() -> GatewayError:
    return GatewayError(
        403,
        "User is not authorized to access this resource with an explicit deny",
        "AccessDeniedException",
    )


def not_allowed() -> GatewayError:
    return GatewayError(
        403, "User is not authorized to access this resource", "AccessDeniedException"
    )


def internal_error() -> GatewayError:
    return GatewayError(502, "Internal server error", "InternalServerErrorException")


def authorizer_failure() -> GatewayError:
    # API Gateway answers a broken authorizer with 500 and a null message.
    return GatewayError(500, None, "AuthorizerConfigurationException")


def too_large() -> GatewayError:
    return GatewayError(413, "Request Too Long", "RequestTooLongException")


def timed_out() -> GatewayError:
    return GatewayError(504, "Endpoint request timed out", "IntegrationTimeout")


# ---------------------------------------------------------------------------------------------
# Routes


@dataclass(frozen=True)
class CompiledRoute:
    method: str
    resource: str
    function: str
    roles: tuple[str, ...] | None
    pattern: re.Pattern
    literal_segments: int


def compile_routes(routes) -> list[CompiledRoute]:
    compiled = []
    for route in routes:
        parts = route.path.strip("/").split("/")
        regex = "".join(
            f"/(?P<{p[1:-1]}>[^/]+)"
            if p.startswith("{") and p.endswith("}")
            else "/" + re.escape(p)
            for p in parts
        )
        literal = sum(1 for p in parts if not p.startswith("{"))
        compiled.append(
            CompiledRoute(
                route.method.upper(),
                route.path,
                route.function,
                route.roles,
                re.compile(f"^{regex}$"),
                literal,
            )
        )
    # API Gateway prefers the most specific resource: literal segments beat path parameters.
    compiled.sort(key=lambda r: -r.literal_segments)
    return compiled


def match_route(
    routes: list[CompiledRoute], method: str, path: str
) -> tuple[CompiledRoute, dict[str, str]]:
    for route in routes:
        m = route.pattern.match(path)
        if m and route.method == method:
            return route, {k: unquote(v) for k, v in m.groupdict().items()}
    # API Gateway answers both an unknown path and an unknown method on a known path this way.
    raise missing_route()


# ---------------------------------------------------------------------------------------------
# Authorizer policy evaluation


def method_arn(region: str, method: str, path: str) -> str:
    return f"arn:aws:execute-api:{region}:{ACCOUNT_ID}:{API_ID}/{STAGE}/{method}{path}"


def _arn_matches(pattern: str, arn: str) -> bool:
    # IAM wildcards: `*` any run of characters (including `/`), `?` exactly one.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn) is not None


def evaluate_policy(policy: dict, arn: str) -> str:
    """'allow', 'deny' (explicit), or 'none' (no statement matched), as IAM decides."""
    statements = policy.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    allowed = False
    for st in statements:
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if not any(_arn_matches(a, "execute-api:Invoke") for a in actions):
            continue
        resources = st.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        if not any(_arn_matches(r, arn) for r in resources):
            continue
        effect = str(st.get("Effect", "")).lower()
        if effect == "deny":
            return "deny"
        if effect == "allow":
            allowed = True
    return "allow" if allowed else "none"


@dataclass
class AuthorizerResult:
    policy: dict
    context: dict
    principal_id: str
    expires_at: float


# ---------------------------------------------------------------------------------------------
# Lambda context


@dataclass
class LocalLambdaContext:
    """What the Lambda runtime hands a handler as `context` (Powertools reads these names)."""

    function_name: str
    aws_request_id: str
    deadline: float
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    invoked_function_arn: str = ""
    log_group_name: str = ""
    log_stream_name: str = "local"
    identity: Any = None
    client_context: Any = None

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


# ---------------------------------------------------------------------------------------------
# The gateway


@dataclass
class IncomingRequest:
    method: str
    raw_path: str  # path and query as sent
    headers: list[tuple[str, str]]
    body: bytes
    source_ip: str


@dataclass
class OutgoingResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class LocalGateway:
    """Routes -> handlers, with API Gateway's authorizer, limits and event shapes."""

    routes: Any = None  # iterable of controlplane.routes.Route; defaults to ROUTES
    functions: dict[str, str | Handler] | None = None  # group -> handler string or callable
    authorizer: str | Handler | None = None  # defaults to FUNCTIONS["authorizer"]
    binary_media_types: tuple[str, ...] | None = None
    region: str = field(default_factory=lambda: os.environ.get("AWS_REGION", "us-east-1"))
    authorizer_cache_s: float = 0.0
    timeout_s: float | None = None
    max_body_bytes: int | None = None

    def __post_init__(self) -> None:
        ensure_functions_on_path()
        from controlplane import routes as route_module

        self._routes = compile_routes(
            self.routes if self.routes is not None else route_module.ROUTES
        )
        functions = dict(route_module.FUNCTIONS)
        functions.update(self.functions or {})
        self._functions = functions
        self._authorizer_ref = (
            self.authorizer if self.authorizer is not None else functions["authorizer"]
        )
        if self.binary_media_types is None:
            self.binary_media_types = route_module.BINARY_MEDIA_TYPES
        if self.timeout_s is None:
            self.timeout_s = float(route_module.API_GATEWAY_TIMEOUT_S)
        if self.max_body_bytes is None:
            self.max_body_bytes = route_module.API_GATEWAY_MAX_BODY_BYTES
        self._resolved: dict[str, Handler] = {}
        self._resolve_lock = threading.Lock()
        self._auth_cache: dict[str, AuthorizerResult] = {}
        self._auth_lock = threading.Lock()

    # -- handlers ------------------------------------------------------------------------------

    def _resolve(self, ref: str | Handler) -> Handler:
        if callable(ref):
            return ref
        with self._resolve_lock:
            fn = self._resolved.get(ref)
            if fn is None:
                ensure_functions_on_path()
                # One container per concurrent invocation, as Lambda does (see containers.py).
                fn = HandlerPool(ref)
                self._resolved[ref] = fn
            return fn

    def warm(self) -> list[str]:
        """Import every handler now; returns the ones that failed (logged, not fatal)."""
        failed = []
        refs = {r.function: self._functions[r.function] for r in self._routes}
        refs["authorizer"] = self._authorizer_ref
        for group, ref in refs.items():
            try:
                self._resolve(ref)
            except Exception as e:  # noqa: BLE001 - reported, the route then answers 502
                log.warning("handler import failed group=%s handler=%s error=%s", group, ref, e)
                failed.append(group)
        return failed

    def _invoke(self, fn: Handler, event: dict, function_name: str, request_id: str) -> Any:
        """Run a handler under the integration timeout, on a thread of its own.

        A handler still running at the timeout is abandoned (threads cannot be killed); its
        result is dropped, as API Gateway drops a Lambda reply that comes too late.
        """
        ctx = LocalLambdaContext(
            function_name=function_name,
            aws_request_id=request_id,
            deadline=time.monotonic() + self.timeout_s,
            invoked_function_arn=f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{function_name}",
            log_group_name=f"/aws/lambda/{function_name}",
        )
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = fn(event, ctx)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                outcome["error"] = e

        worker = threading.Thread(target=run, name=f"lambda-{function_name}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise TimeoutError(f"{function_name} ran past {self.timeout_s}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    # -- events --------------------------------------------------------------------------------

    @staticmethod
    def _header_maps(headers: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for name, value in headers:
            single[name] = value  # like API Gateway: the last one wins in `headers`
            multi.setdefault(name, []).append(value)
        return single, multi

    @staticmethod
    def _query_maps(query: str) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
        pairs = parse_qsl(query, keep_blank_values=True)
        if not pairs:
            return None, None
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for k, v in pairs:
            single[k] = v
            multi.setdefault(k, []).append(v)
        return single, multi

    def _is_binary(self, content_type: str | None) -> bool:
        if not content_type:
            return False
        media = content_type.split(";", 1)[0].strip().lower()
        for t in self.binary_media_types:
            t = t.lower()
            if t == media or t == "*/*" or (t.endswith("/*") and media.startswith(t[:-1])):
                return True
        return False

    def _request_context(
        self,
        req: IncomingRequest,
        route: CompiledRoute,
        path: str,
        request_id: str,
        user_agent: str | None,
    ) -> dict:
        now = datetime.now(UTC)
        return {
            "accountId": ACCOUNT_ID,
            "apiId": API_ID,
            "resourceId": "local",
            "stage": STAGE,
            "requestId": request_id,
            "extendedRequestId": request_id,
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "path": f"/{STAGE}{path}",
            "resourcePath": route.resource,
            "httpMethod": req.method,
            "protocol": "HTTP/1.1",
            "domainName": "localhost",
            "identity": {"sourceIp": req.source_ip, "userAgent": user_agent},
        }

    # -- the request path ----------------------------------------------------------------------

    def handle(self, req: IncomingRequest) -> OutgoingResponse:
        request_id = str(uuid.uuid4())
        try:
            return self._handle(req, request_id)
        except GatewayError as e:
            return self._gateway_response(e, request_id)

    def _gateway_response(self, e: GatewayError, request_id: str) -> OutgoingResponse:
        body = json.dumps({"message": e.message}).encode()
        return OutgoingResponse(
            e.status,
            [
                ("Content-Type", "application/json"),
                ("x-amzn-RequestId", request_id),
                ("x-amzn-ErrorType", e.error_type),
            ],
            body,
        )

    def _handle(self, req: IncomingRequest, request_id: str) -> OutgoingResponse:
        split = urlsplit(req.raw_path)
        path = unquote(split.path) or "/"
        route, path_params = match_route(self._routes, req.method, path)
        if len(req.body) > self.max_body_bytes:
            raise too_large()

        headers, multi_headers = self._header_maps(req.headers)
        lower = {k.lower(): v for k, v in headers.items()}
        query, multi_query = self._query_maps(split.query)
        request_context = self._request_context(
            req, route, path, request_id, lower.get("user-agent")
        )

        if route.roles is not None:
            request_context["authorizer"] = self._authorize(
                req,
                route,
                path,
                path_params,
                headers,
                multi_headers,
                query,
                multi_query,
                request_context,
            )

        binary = self._is_binary(lower.get("content-type"))
        if not req.body:
            body = None
        elif binary:
            body = base64.b64encode(req.body).decode("ascii")
        else:
            body = req.body.decode("utf-8", errors="replace")
        event = {
            "resource": route.resource,
            "path": path,
            "httpMethod": req.method,
            "headers": headers or None,
            "multiValueHeaders": multi_headers or None,
            "queryStringParameters": query,
            "multiValueQueryStringParameters": multi_query,
            "pathParameters": path_params or None,
            "stageVariables": None,
            "requestContext": request_context,
            "body": body,
            "isBase64Encoded": bool(body) and binary,
        }
        event_json = json.dumps(event)
        if len(event_json) > LAMBDA_PAYLOAD_LIMIT_BYTES:
            log.warning(
                "lambda request payload over 6 MB bytes=%d request_id=%s",
                len(event_json),
                request_id,
            )
            raise too_large()

        function_ref = self._functions[route.function]
        try:
            fn = self._resolve(function_ref)
        except Exception as e:
            log.error("handler import failed function=%s error=%r", route.function, e)
            raise internal_error() from e
        # Hand the handler its own copy, as the JSON round trip through Lambda would.
        try:
            result = self._invoke(fn, json.loads(event_json), route.function, request_id)
        except TimeoutError as e:
            log.warning("integration timeout function=%s request_id=%s", route.function, request_id)
            raise timed_out() from e
        except Exception as e:
            log.error(
                "handler raised function=%s request_id=%s error=%r",
                route.function,
                request_id,
                e,
                exc_info=e,
            )
            raise internal_error() from e
        return self._to_http(result, route.function, request_id)

    def _to_http(self, result: Any, function: str, request_id: str) -> OutgoingResponse:
        try:
            # Lambda serialises the return value; anything that does not survive JSON is a 502.
            raw = json.dumps(result)
        except (TypeError, ValueError) as e:
            log.error("handler response not json function=%s error=%s", function, e)
            raise internal_error() from e
        if len(raw) > LAMBDA_PAYLOAD_LIMIT_BYTES:
            log.error("lambda response payload over 6 MB function=%s bytes=%d", function, len(raw))
            raise internal_error()
        if not isinstance(result, dict) or not isinstance(result.get("statusCode"), int):
            log.error("malformed lambda proxy response function=%s", function)
            raise internal_error()
        body = result.get("body")
        if body is None:
            data = b""
        elif not isinstance(body, str):
            log.error(
                "malformed lambda proxy response body function=%s type=%s",
                function,
                type(body).__name__,
            )
            raise internal_error()
        elif result.get("isBase64Encoded"):
            try:
                data = base64.b64decode(body, validate=True)
            except ValueError as e:
                raise internal_error() from e
        else:
            data = body.encode("utf-8")
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        for name, values in (result.get("multiValueHeaders") or {}).items():
            for v in values or []:
                out.append((name, str(v)))
            seen.add(name.lower())
        for name, value in (result.get("headers") or {}).items():
            if name.lower() not in seen:
                out.append((name, str(value)))
        if not any(n.lower() == "content-type" for n, _ in out):
            out.append(("Content-Type", "application/json"))
        out.append(("x-amzn-RequestId", request_id))
        return OutgoingResponse(result["statusCode"], out, data)

    def _authorize(
        self,
        req,
        route,
        path,
        path_params,
        headers,
        multi_headers,
        query,
        multi_query,
        request_context,
    ) -> dict:
        token_header = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        if not token_header:
            raise unauthorized()
        arn = method_arn(self.region, req.method, path)
        cached = self._cached_authorization(token_header)
        if cached is None:
            event = {
                "type": "REQUEST",
                "methodArn": arn,
                "resource": route.resource,
                "path": path,
                "httpMethod": req.method,
                "headers": headers,
                "multiValueHeaders": multi_headers,
                "queryStringParameters": query or {},
                "multiValueQueryStringParameters": multi_query or {},
                "pathParameters": path_params,
                "stageVariables": {},
                "requestContext": dict(request_context),
            }
            try:
                fn = self._resolve(self._authorizer_ref)
                result = self._invoke(fn, event, "authorizer", request_context["requestId"])
            except TimeoutError as e:
                raise authorizer_failure() from e
            except Exception as e:
                if str(e) == "Unauthorized":
                    raise unauthorized() from e
                log.error("authorizer raised error=%r", e, exc_info=e)
                raise authorizer_failure() from e
            cached = self._parse_authorizer_result(result)
            if self.authorizer_cache_s > 0:
                with self._auth_lock:
                    self._auth_cache[token_header] = cached
        decision = evaluate_policy(cached.policy, arn)
        if decision == "deny":
            raise explicit_deny()
        if decision != "allow":
            raise not_allowed()
        return {**cached.context, "principalId": cached.principal_id}

    def _cached_authorization(self, token_header: str) -> AuthorizerResult | None:
        if self.authorizer_cache_s <= 0:
            return None
        with self._auth_lock:
            hit = self._auth_cache.get(token_header)
            if hit and hit.expires_at > time.monotonic():
                return hit
            self._auth_cache.pop(token_header, None)
            return None

    def _parse_authorizer_result(self, result: Any) -> AuthorizerResult:
        if (
            not isinstance(result, dict)
            or "policyDocument" not in result
            or "principalId" not in result
        ):
            log.error("authorizer returned no principalId/policyDocument")
            raise authorizer_failure()
        context = result.get("context") or {}
        # API Gateway only passes flat string/number/boolean context values.
        if not isinstance(context, dict) or any(
            not isinstance(v, (str, int, float, bool)) for v in context.values()
        ):
            log.error("authorizer context must be flat scalars context=%r", context)
            raise authorizer_failure()
        return AuthorizerResult(
            policy=result["policyDocument"],
            context=dict(context),
            principal_id=str(result["principalId"]),
            expires_at=time.monotonic() + self.authorizer_cache_s,
        )


# ---------------------------------------------------------------------------------------------
# HTTP server


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "payloadstore-local-gateway"
    # Headers and body leave in separate writes; with Nagle on, the body then waits for the
    # client's delayed ACK: ~40 ms added to every keep-alive request (measured: 44 ms -> <1 ms).
    disable_nagle_algorithm = True
    gateway: LocalGateway  # set on the subclass the server builds

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is written by _serve instead

    def _read_body(self) -> tuple[bytes, bool]:
        """The request body, and whether it went over the limit (then it is read and dropped)."""
        limit = self.gateway.max_body_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks, total, over = [], 0, False
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
            resp = self.gateway._gateway_response(too_large(), str(uuid.uuid4()))
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
        log.info(
            "request method=%s path=%s status=%d ms=%.1f",
            self.command,
            self.path.split("?", 1)[0],
            resp.status,
            elapsed_ms,
        )

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(
    gateway: LocalGateway, host: str = "127.0.0.1", port: int = DEFAULT_PORT
) -> GatewayServer:
    """Bind the gateway to host:port (port 0 picks a free one). Raises OSError if taken."""
    handler_cls = type("BoundRequestHandler", (_RequestHandler,), {"gateway": gateway})
    return GatewayServer((host, port), handler_cls)


class PortInUseError(RuntimeError):
    pass


def bind_or_explain(gateway: LocalGateway, host: str, port: int) -> GatewayServer:
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
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_in_thread(
    gateway: LocalGateway, host: str = "127.0.0.1", port: int = 0
) -> RunningGateway:
    server = bind_or_explain(gateway, host, port)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="local-gateway",
        daemon=True,
    )
    thread.start()
    return RunningGateway(server, thread)


@dataclass
class GatewayProcess:
    """The gateway in a process of its own: its handlers get a private environment and caches,
    like a Lambda container does, and cannot share module state with the caller's process."""

    env: dict[str, str]
    port: int = 0
    log_path: Path | None = None
    authorizer_cache_s: float = 0.0
    timeout_s: float | None = None
    proc: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> GatewayProcess:
        import subprocess

        from payloadstore.devstack.services import ServiceError, free_port, port_is_open

        if not self.port:
            self.port = free_port()
        args = [
            sys.executable,
            "-m",
            "payloadstore.devstack.gateway",
            "--port",
            str(self.port),
            "--authorizer-cache-s",
            str(self.authorizer_cache_s),
        ]
        if self.timeout_s is not None:
            args += ["--timeout-s", str(self.timeout_s)]
        # The child writes this log for as long as it runs.
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            args,
            cwd=str(REPO_ROOT),
            env={**os.environ, **self.env},
            stdout=out,
            stderr=subprocess.STDOUT if self.log_path else subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while not port_is_open(self.port):
            if self.proc.poll() is not None:
                raise ServiceError(
                    f"local gateway exited early with code {self.proc.returncode}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(
                    f"local gateway did not listen on port {self.port} within {timeout_s:.0f}s"
                )
            time.sleep(0.05)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        from payloadstore.devstack.services import terminate

        terminate(self.proc, timeout_s)
        self.proc = None


def configure_logging(level: str | None = None) -> None:
    """Our lines (devstack.*) at INFO in plain key=value text; libraries only from WARNING up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    ours = logging.getLogger("devstack")
    ours.handlers[:] = [handler]
    ours.setLevel((level or os.environ.get("PAYLOADSTORE_GATEWAY_LOG_LEVEL", "INFO")).upper())
    ours.propagate = False
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Serve the gateway alone; the handlers read their settings from this process's environment."""
    parser = argparse.ArgumentParser(
        description="local API gateway in front of the control-plane handlers"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("PAYLOADSTORE_PORT", DEFAULT_PORT))
    )
    parser.add_argument(
        "--authorizer-cache-s",
        type=float,
        default=float(os.environ.get("PAYLOADSTORE_AUTHORIZER_CACHE_S", "0")),
    )
    parser.add_argument(
        "--timeout-s", type=float, default=None, help="integration timeout (default 29)"
    )
    args = parser.parse_args(argv)
    configure_logging()
    gateway = LocalGateway(authorizer_cache_s=args.authorizer_cache_s, timeout_s=args.timeout_s)
    gateway.warm()
    try:
        server = bind_or_explain(gateway, args.host, args.port)
    except PortInUseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info("gateway listening url=http://%s:%d", args.host, server.server_address[1])
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
