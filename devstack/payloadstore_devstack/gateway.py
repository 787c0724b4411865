"""A local stand-in for API Gateway (REST API, Lambda proxy integration) in front of the handlers.

It serves the route table of `payloadstore_controlplane.routes` with the very handler strings the CDK stack
deploys, and behaves like API Gateway where a client or handler could notice the difference.
Three rooms, one concern each:

- gateway_events.py: the REST proxy event (payload v1) built from a request, the Lambda context,
  the proxy response turned into HTTP, and API Gateway's own answers (403 `Missing
  Authentication Token` for any method or path without a route, 413 over 10 MB, 502 for a handler
  that raises or answers malformed, 500 for a function at its reserved concurrency, as Lambda
  throttles it, 504 past 29 s);
- gateway_auth.py: the REQUEST authorizer as API Gateway runs and caches it;
- gateway_server.py: the HTTP/1.1 server in front of it all.

This module routes, caps the long-poll functions at their reserved concurrency (make deploy's
decision, payloadstore_controlplane/concurrency.py), runs each invocation in a container of its own (containers.py) on its own
worker thread (long-polls never block other callers), and starts the gateway as a process.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from payloadstore_devstack.containers import HandlerPool
from payloadstore_devstack.gateway_auth import (  # noqa: F401 - re-exported
    AuthorizerEmulator,
    AuthorizerResult,
    evaluate_policy,
    method_arn,
)
from payloadstore_devstack.gateway_events import (  # noqa: F401 - re-exported
    ACCOUNT_ID,
    API_ID,
    LAMBDA_PAYLOAD_LIMIT_BYTES,
    STAGE,
    GatewayError,
    IncomingRequest,
    LocalLambdaContext,
    OutgoingResponse,
    authorizer_failure,
    compressed,
    ensure_functions_on_path,
    explicit_deny,
    gateway_response,
    header_maps,
    import_handler,
    internal_error,
    is_binary,
    missing_route,
    not_allowed,
    proxy_event,
    query_maps,
    request_context,
    throttled,
    timed_out,
    to_http,
    too_large,
    unauthorized,
)
from payloadstore_devstack.gateway_server import (  # noqa: F401 - re-exported
    DEFAULT_PORT,
    DRAIN_LIMIT_BYTES,
    GatewayServer,
    PortInUseError,
    RunningGateway,
    bind_or_explain,
    make_server,
    serve_in_thread,
)

# Not under "payloadstore": that is the handlers' Powertools logger (service name), whose level
# and JSON format must not swallow or restyle the gateway's own lines.
log = logging.getLogger("devstack.gateway")

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"

Handler = Callable[[dict, Any], Any]

# The local stand-ins of the CDK flags payloadstore:reservedConcurrency (off | auto | N),
# :daemonConcurrency and :jobsConcurrency, decided as `make deploy`'s preflight decides them
# (payloadstore_controlplane/concurrency.py): by default `auto` on an account of
# PAYLOADSTORE_LOCAL_ACCOUNT_CONCURRENCY (1,000) that nothing else reserves, so daemon 400, jobs 300.
LOCAL_CONCURRENCY_ENV = {
    "mode": "PAYLOADSTORE_LOCAL_RESERVED_CONCURRENCY",
    "account": "PAYLOADSTORE_LOCAL_ACCOUNT_CONCURRENCY",
    "daemon": "PAYLOADSTORE_LOCAL_DAEMON_CONCURRENCY",
    "jobs": "PAYLOADSTORE_LOCAL_JOBS_CONCURRENCY",
}
LOCAL_ACCOUNT_CONCURRENCY = 1000


def local_concurrency_caps(environ: dict[str, str] | None = None) -> dict[str, int]:
    """group -> reserved concurrency for the local gateway (absent: uncapped), decided as
    `make deploy` decides a stage's."""
    from payloadstore_controlplane import concurrency

    env = os.environ if environ is None else environ
    names = LOCAL_CONCURRENCY_ENV
    mode = concurrency.parse_mode(env.get(names["mode"], concurrency.AUTO), names["mode"])
    raw_limit = env.get(names["account"], "").strip()
    limit = concurrency.parse_override(raw_limit, names["account"]) or LOCAL_ACCOUNT_CONCURRENCY
    overrides = {
        group: concurrency.parse_override(env.get(names[group]), names[group])
        for group in concurrency.FLAG_OVERRIDES
    }
    account = concurrency.AccountConcurrency(limit=limit, unreserved=limit)
    return concurrency.resolve(mode, overrides, account).caps


class ThrottledError(Exception):
    """Lambda's TooManyRequestsException: the function is at its reserved concurrency."""


class ConcurrencyCaps:
    """Per-function reserved concurrency: an invocation over its function's cap is throttled
    (Lambda's 429, which API Gateway turns into a 500) instead of run."""

    def __init__(self, caps: dict[str, int]):
        self.caps = dict(caps)
        self._running = dict.fromkeys(self.caps, 0)
        self._lock = threading.Lock()

    def acquire(self, function_name: str) -> bool:
        cap = self.caps.get(function_name)
        if cap is None:
            return True
        with self._lock:
            if self._running[function_name] >= cap:
                return False
            self._running[function_name] += 1
            return True

    def release(self, function_name: str) -> None:
        if function_name in self.caps:
            with self._lock:
                self._running[function_name] -= 1


# -- routes ----------------------------------------------------------------------------------


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


@dataclass
class LocalGateway:
    """Routes -> handlers, with API Gateway's authorizer, limits and event shapes."""

    routes: Any = None  # iterable of payloadstore_controlplane.routes.Route; defaults to ROUTES
    functions: dict[str, str | Handler] | None = None  # group -> handler string or callable
    authorizer: str | Handler | None = None  # defaults to FUNCTIONS["authorizer"]
    binary_media_types: tuple[str, ...] | None = None
    region: str = field(default_factory=lambda: os.environ.get("AWS_REGION", "us-east-1"))
    authorizer_cache_s: float = 0.0
    timeout_s: float | None = None
    max_body_bytes: int | None = None
    min_compression_bytes: int | None = None  # defaults to routes.MIN_COMPRESSION_BYTES
    # group -> reserved concurrency; defaults to local_concurrency_caps() (make deploy's choice)
    concurrency: dict[str, int] | None = None

    def __post_init__(self) -> None:
        ensure_functions_on_path()
        from payloadstore_controlplane import routes as route_module

        self._routes = compile_routes(
            self.routes if self.routes is not None else route_module.ROUTES
        )
        functions: dict[str, str | Handler] = dict(route_module.FUNCTIONS)
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
        if self.min_compression_bytes is None:
            self.min_compression_bytes = route_module.MIN_COMPRESSION_BYTES
        self._resolved: dict[str, Handler] = {}
        self._resolve_lock = threading.Lock()
        self._authorizer = AuthorizerEmulator(self.region, self.authorizer_cache_s)
        if self.concurrency is None:
            self.concurrency = local_concurrency_caps()
        self._caps = ConcurrencyCaps(self.concurrency)

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
        refs: dict[str, str | Handler] = {
            r.function: self._functions[r.function] for r in self._routes
        }
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
        result is dropped, as API Gateway drops a Lambda reply that comes too late. A function
        at its reserved concurrency is throttled (ThrottledError) without running; its slot is
        held until the handler returns, as a Lambda execution is.
        """
        assert self.timeout_s is not None  # __post_init__ fills in the default
        ctx = LocalLambdaContext(
            function_name=function_name,
            aws_request_id=request_id,
            deadline=time.monotonic() + self.timeout_s,
            invoked_function_arn=f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{function_name}",
            log_group_name=f"/aws/lambda/{function_name}",
        )
        outcome: dict[str, Any] = {}
        from payloadstore_controlplane.store.sigv4 import invocation_running_as
        from payloadstore_devstack.s3_credentials import function_credentials

        # Each function signs with its own local keys, which the S3 emulator maps to that
        # function's grants (the CDK role's): a handler can do locally only what it could on AWS.
        credentials = function_credentials(function_name)
        if not self._caps.acquire(function_name):
            raise ThrottledError(function_name)

        def run() -> None:
            try:
                with invocation_running_as(credentials):
                    outcome["value"] = fn(event, ctx)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                outcome["error"] = e
            finally:
                self._caps.release(function_name)

        worker = threading.Thread(target=run, name=f"lambda-{function_name}", daemon=True)
        try:
            worker.start()
        except BaseException:
            self._caps.release(function_name)
            raise
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise TimeoutError(f"{function_name} ran past {self.timeout_s}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    # -- the request path ----------------------------------------------------------------------

    def handle(self, req: IncomingRequest) -> OutgoingResponse:
        request_id = str(uuid.uuid4())
        try:
            resp = self._handle(req, request_id)
        except GatewayError as e:
            resp = gateway_response(e, request_id)
        if req.method == "HEAD":
            return resp
        accept = next((v for k, v in req.headers if k.lower() == "accept-encoding"), None)
        return compressed(resp, accept, self.min_compression_bytes)

    def _gateway_response(self, e: GatewayError, request_id: str) -> OutgoingResponse:
        return gateway_response(e, request_id)

    def _handle(self, req: IncomingRequest, request_id: str) -> OutgoingResponse:
        split = urlsplit(req.raw_path)
        # Routing sees the path as sent (an encoded `/` stays inside its segment); the event
        # carries the decoded path, and match_route decodes each path parameter.
        route, path_params = match_route(self._routes, req.method, split.path or "/")
        path = unquote(split.path) or "/"
        # __post_init__ fills in the defaults.
        assert self.max_body_bytes is not None and self.binary_media_types is not None
        if len(req.body) > self.max_body_bytes:
            raise too_large()

        headers, multi_headers = header_maps(req.headers)
        lower = {k.lower(): v for k, v in headers.items()}
        query, multi_query = query_maps(split.query)
        context = request_context(req, route.resource, path, request_id, lower.get("user-agent"))

        if route.roles is not None:
            context["authorizer"] = self._authorizer.authorize(
                lambda event: self._invoke(
                    self._resolve(self._authorizer_ref), event, "authorizer", request_id
                ),
                method=req.method,
                resource=route.resource,
                path=path,
                path_params=path_params,
                headers=headers,
                multi_headers=multi_headers,
                query=query,
                multi_query=multi_query,
                request_context=context,
            )

        event = proxy_event(
            req,
            resource=route.resource,
            path=path,
            path_params=path_params,
            headers=headers,
            multi_headers=multi_headers,
            query=query,
            multi_query=multi_query,
            context=context,
            binary=is_binary(lower.get("content-type"), self.binary_media_types),
        )
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
        except ThrottledError as e:
            log.warning(
                "function throttled function=%s reserved_concurrency=%s request_id=%s",
                route.function,
                self._caps.caps.get(route.function),
                request_id,
            )
            raise throttled() from e
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
        return to_http(result, route.function, request_id)


@dataclass
class GatewayProcess:
    """The gateway in a process of its own: its handlers get a private environment and caches,
    like a Lambda container does, and cannot share module state with the caller's process."""

    env: dict[str, str]
    port: int = 0
    log_path: Path | None = None
    authorizer_cache_s: float = 0.0
    timeout_s: float | None = None
    # Scheduled functions (routes.SCHEDULES names) this gateway also runs on their timer, their
    # periods multiplied by schedule_scale (a test's blob renewer every fraction of a second).
    schedules: tuple[str, ...] = ()
    schedule_scale: float = 1.0
    proc: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> GatewayProcess:
        import subprocess

        from payloadstore_devstack.services import (
            ServiceError,
            free_port,
            open_private_log,
            port_is_open,
        )

        if not self.port:
            self.port = free_port()
        args = [
            sys.executable,
            "-m",
            "payloadstore_devstack.gateway",
            "--port",
            str(self.port),
            "--authorizer-cache-s",
            str(self.authorizer_cache_s),
        ]
        if self.timeout_s is not None:
            args += ["--timeout-s", str(self.timeout_s)]
        if self.schedules:
            args += ["--schedules", ",".join(self.schedules)]
            args += ["--schedule-scale", repr(self.schedule_scale)]
        # The child writes this log for as long as it runs.
        out = open_private_log(self.log_path) if self.log_path else subprocess.DEVNULL
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
        from payloadstore_devstack.services import terminate

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
    parser.add_argument(
        "--schedules",
        default="",
        help="scheduled functions to run on their timer too, comma separated (e.g. renewals)",
    )
    parser.add_argument(
        "--schedule-scale", type=float, default=1.0, help="multiply their periods by this"
    )
    args = parser.parse_args(argv)
    configure_logging()
    gateway = LocalGateway(authorizer_cache_s=args.authorizer_cache_s, timeout_s=args.timeout_s)
    gateway.warm()
    if args.schedules:
        from payloadstore_controlplane.routes import SCHEDULES
        from payloadstore_devstack.scheduler import Scheduler

        names = set(args.schedules.split(","))
        Scheduler(
            os.environ.get("AWS_REGION", "us-east-1"),
            period_scale=args.schedule_scale,
            schedules=[s for s in SCHEDULES if s.function in names],
        ).start()
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
