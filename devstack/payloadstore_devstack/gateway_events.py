"""Event translation of the local gateway: HTTP request -> REST proxy event (payload v1), the
Lambda context, the proxy response -> HTTP, and the answers API Gateway gives on its own.

Shapes follow API Gateway's REST API with Lambda proxy integration: repeated headers and query
keys in `multiValue*`, bodies of the binary media types as base64 with `isBase64Encoded`, the
last value of a repeated header in `headers`, `requestContext` as the authorizer and the handler
see it."""

from __future__ import annotations

import base64
import gzip
import importlib
import importlib.util
import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

log = logging.getLogger("devstack.gateway")

ACCOUNT_ID = "123456789012"
API_ID = "local"
STAGE = "local"
# Lambda's synchronous invocation payload limit (request event and response), 6 MB.
LAMBDA_PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024


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


# -- API Gateway's own answers ----------------------------------------------------------------


class GatewayError(Exception):
    """An API Gateway-generated response (not from a handler)."""

    def __init__(
        self,
        status: int,
        message: str | None,
        error_type: str,
        *,
        body: dict | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        # A gateway response the stack configures (infra/api.py): its own body and headers
        # instead of API Gateway's {"message"}.
        self.body = body
        self.headers = headers


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


def throttled() -> GatewayError:
    # Lambda refused the invocation (429 TooManyRequestsException: the function is at its
    # reserved concurrency). A REST API's Lambda proxy integration answers the client 500 with
    # the generic body, not 429 (AWS Lambda Developer Guide, "Handling Lambda errors with an API
    # Gateway API": "If the Lambda API rejects the invocation request, API Gateway returns a 500").
    return GatewayError(500, "Internal server error", "InternalServerErrorException")


def authorizer_failure() -> GatewayError:
    # API Gateway answers a failed authorizer (raised, timed out, malformed answer) with 500 and a
    # null message by default; the stack configures the AUTHORIZER_FAILURE and
    # AUTHORIZER_CONFIGURATION_ERROR gateway responses as a 503 with Retry-After and the wire's
    # error body (infra/api.py), which this answers too. Imported here, as LocalGateway imports
    # the route table: the control plane's package is on the path once ensure_functions_on_path
    # ran, not when this module is imported.
    from payloadstore_controlplane.routes import (
        AUTHORIZER_UNAVAILABLE_RETRY_AFTER_S,
        AUTHORIZER_UNAVAILABLE_STATUS,
        authorizer_unavailable_body,
    )

    body = authorizer_unavailable_body()
    return GatewayError(
        AUTHORIZER_UNAVAILABLE_STATUS,
        body["error"]["message"],
        "AuthorizerConfigurationException",
        body=body,
        headers=(("Retry-After", str(AUTHORIZER_UNAVAILABLE_RETRY_AFTER_S)),),
    )


def too_large() -> GatewayError:
    return GatewayError(413, "Request Too Long", "RequestTooLongException")


def timed_out() -> GatewayError:
    return GatewayError(504, "Endpoint request timed out", "IntegrationTimeout")


def gateway_response(e: GatewayError, request_id: str) -> OutgoingResponse:
    body = json.dumps(e.body if e.body is not None else {"message": e.message}).encode()
    return OutgoingResponse(
        e.status,
        [
            ("Content-Type", "application/json"),
            ("x-amzn-RequestId", request_id),
            ("x-amzn-ErrorType", e.error_type),
            *e.headers,
        ],
        body,
    )


# -- payload compression ------------------------------------------------------------------------


def accepted_coding(accept_encoding: str | None) -> str | None:
    """The coding API Gateway would compress with for this Accept-Encoding: gzip or deflate
    (in the client's order of preference, q=0 refusing one), or None."""
    best, best_q = None, 0.0
    for item in (accept_encoding or "").split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        if name not in ("gzip", "deflate", "*"):
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > best_q:
            best, best_q = ("gzip" if name == "*" else name), q
    return best


def compressed(
    resp: OutgoingResponse, accept_encoding: str | None, min_bytes: int | None
) -> OutgoingResponse:
    """API Gateway's response compression (minimumCompressionSize): a body of at least
    `min_bytes` is sent gzipped (or deflated) to a client that accepts it, unless the handler
    already encoded it. `min_bytes` None: compression off, as on an API without the setting."""
    if min_bytes is None or len(resp.body) < min_bytes:
        return resp
    if any(name.lower() == "content-encoding" for name, _ in resp.headers):
        return resp
    coding = accepted_coding(accept_encoding)
    if coding is None:
        return resp
    body = gzip.compress(resp.body, 6) if coding == "gzip" else zlib.compress(resp.body, 6)
    return OutgoingResponse(resp.status, [*resp.headers, ("Content-Encoding", coding)], body)


# -- Lambda context ---------------------------------------------------------------------------


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


# -- request -> event -------------------------------------------------------------------------


def header_maps(headers: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        single[name] = value  # like API Gateway: the last one wins in `headers`
        multi.setdefault(name, []).append(value)
    return single, multi


def query_maps(query: str) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    pairs = parse_qsl(query, keep_blank_values=True)
    if not pairs:
        return None, None
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for k, v in pairs:
        single[k] = v
        multi.setdefault(k, []).append(v)
    return single, multi


def is_binary(content_type: str | None, binary_media_types: tuple[str, ...]) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    for t in binary_media_types:
        t = t.lower()
        if t == media or t == "*/*" or (t.endswith("/*") and media.startswith(t[:-1])):
            return True
    return False


def request_context(
    req: IncomingRequest, resource: str, path: str, request_id: str, user_agent: str | None
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
        "resourcePath": resource,
        "httpMethod": req.method,
        "protocol": "HTTP/1.1",
        "domainName": "localhost",
        "identity": {"sourceIp": req.source_ip, "userAgent": user_agent},
    }


def proxy_event(
    req: IncomingRequest,
    *,
    resource: str,
    path: str,
    path_params: dict[str, str],
    headers: dict[str, str],
    multi_headers: dict[str, list[str]],
    query: dict[str, str] | None,
    multi_query: dict[str, list[str]] | None,
    context: dict,
    binary: bool,
) -> dict:
    if not req.body:
        body = None
    elif binary:
        body = base64.b64encode(req.body).decode("ascii")
    else:
        body = req.body.decode("utf-8", errors="replace")
    return {
        "resource": resource,
        "path": path,
        "httpMethod": req.method,
        "headers": headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": path_params or None,
        "stageVariables": None,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": bool(body) and binary,
    }


# -- proxy response -> HTTP -------------------------------------------------------------------


def to_http(result: Any, function: str, request_id: str) -> OutgoingResponse:  # noqa: C901 - maps each part of an API Gateway answer to HTTP, as API Gateway does
    """A Lambda proxy response as API Gateway turns it into HTTP; anything malformed is a 502."""
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


# Handler strings as the Lambda runtime resolves them: here, not in gateway.py, so the scheduler
# (which the gateway starts) imports them without importing the gateway back.
def ensure_functions_on_path() -> None:
    """Handler strings name modules of the `payloadstore_controlplane` package, as in the
    `functions/` code asset. It is its own distribution (payloadstore-controlplane, from
    functions/), installed with the `[stack]` extra, so nothing is added to sys.path: this only
    turns its absence into one clear error."""
    if importlib.util.find_spec("payloadstore_controlplane") is None:
        raise ModuleNotFoundError(
            "the control plane package is not installed: pip install 'payloadstore[stack]'",
            name="payloadstore_controlplane",
        )


def import_handler(handler: str) -> Callable[[dict, Any], Any]:
    """`package.module.function` -> the function, like the Lambda runtime resolves `Handler`."""
    ensure_functions_on_path()
    module_name, _, attr = handler.rpartition(".")
    if not module_name:
        raise ValueError(f"handler {handler!r} is not of the form module.function")
    return getattr(importlib.import_module(module_name), attr)
