"""What every API handler shares: the container's dependencies, the resolver factory, the caller's
identity, and the one mapping from errors to HTTP responses."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import redis
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from botocore.exceptions import BotoCoreError
from pydantic import ValidationError

from ..runtime import clock
from ..logic.context import Deps, Principal
from ..models.errors import (
    BadRequest,
    Forbidden,
    PayloadStoreError,
    RedisMemoryFull,
    ServiceUnavailable,
    Unauthorized,
    Unprocessable,
)
from ..models.settings import get_settings
from ..observability import logger
from ..runtime.once import built_once
from ..routes import ROUTES, find_route
from ..store.redis_client import cached_redis
from ..store.redis_jobs import RedisJobStore
from ..store.redis_queues import RedisQueueStats
from ..store.s3_objects import S3Objects

REDIS_RETRY_AFTER_S = 2
# Redis errors that mean "not now" (matched by class: redis-py maps the reply's error code).
REDIS_UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.MasterDownError,
    redis.exceptions.TryAgainError,
)


@built_once(maxsize=1)
def get_deps() -> Deps:
    """Clients are created once per container (cold start), never per request."""
    s = get_settings()
    password = None
    if s.redis_auth_secret:
        # One signed GetSecretValue of our own (store/aws_http.py), not boto3's client.
        from ..store.aws_http import secret_value

        # A string secret (the stack's is generated as one); a binary one passes as bytes, as
        # Powertools' get_secret passed it.
        password = cast(str, secret_value(s.redis_auth_secret))
    client = cached_redis(
        s.redis_url,
        s.redis_cluster,
        password,
        max(s.poll_max_wait_s, s.result_max_wait_s),
        s.redis_max_connections,
    )
    return Deps(
        settings=s,
        jobs=RedisJobStore(client, result_ttl_s=s.result_ttl_s),
        # Signs URLs in-process; the botocore client is created on the first HEAD.
        objects=S3Objects.for_region(
            s.aws_region, s.s3_endpoint_url, s.payload_bucket, s.presign_ttl_s
        ),
        # Looked up at call time so tests can move the clock.
        clock=lambda: clock.now(),
        queues=RedisQueueStats(client),
    )


def roles_for(method: str, path: str) -> tuple[str, ...]:
    api_path = path.replace("<", "{").replace(">", "}")
    for route in ROUTES:
        if route.method == method and route.path == api_path:
            if route.roles is None:
                # A public route has no authorizer, so no principal() to guard it with.
                raise KeyError(f"{method} {path} is public: it has no roles")
            return route.roles
    raise KeyError(f"{method} {path} is not in routes.ROUTES")


def principal(
    app: APIGatewayRestResolver, roles: tuple[str, ...], namespace: str | None = None
) -> Principal:
    """The caller as the authorizer saw it; 403 for another namespace or a route outside the role."""
    ctx = (app.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    ns, role = ctx.get("namespace"), ctx.get("role")
    if not ns or not role:
        raise Unauthorized("missing or invalid bearer token")
    if role not in roles:
        raise Forbidden(f"a {role} token cannot use this route")
    if namespace is not None and namespace != ns:
        raise Forbidden("token does not belong to this namespace")
    return Principal(namespace=ns, role=role, token_id=ctx.get("token_id", ""))


def raw_body(app: APIGatewayRestResolver) -> bytes:
    event = app.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        return base64.b64decode(body)
    return body.encode("utf-8")


def json_body(app: APIGatewayRestResolver) -> dict:
    value = getattr(app, "parsed_json", NOT_PARSED)  # parsed once already, by precheck
    if value is NOT_PARSED:
        data = raw_body(app)
        if not data.strip():
            return {}
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as e:  # normally refused earlier, by precheck (400)
            raise BadRequest("body is not valid JSON") from e
    if not isinstance(value, dict):
        raise Unprocessable("body must be a JSON object")
    return value


def error_response(
    status: int, code: str, message: str, headers: dict | None = None, **details
) -> Response:
    body = {"error": {"code": code, "message": message, **details}}
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, default=str),
        headers=headers or {},
    )


def json_response(status: int, model, headers: dict | None = None) -> Response:
    """The model goes through Powertools' response validation and serialization."""
    return Response(
        status_code=status, content_type="application/json", body=model, headers=headers or {}
    )


def json_text_response(status: int, model) -> Response:
    """The model serialized here, once, for a route whose answer Powertools does not validate
    (it declares no return type, e.g. poll: 200 or an empty 204): a JSON string passes through
    as it is, where a model would go through Powertools' generic (and slower) encoder."""
    return Response(
        status_code=status, content_type="application/json", body=model.model_dump_json()
    )


def empty_response(status: int = 204) -> Response:
    # No content type: Powertools' response validation passes non-JSON responses through as is.
    return Response(status_code=status, content_type=None, body="")


def _summarize(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


# -- the request as bytes, before any handler: content type and JSON syntax -------------------


def media_type(headers: dict | None) -> str:
    """`application/json; charset=utf-8` -> `application/json` ("" when absent)."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == "content-type"), None)
    return (value or "").split(";", 1)[0].strip().lower()


def _event_body(event: dict) -> bytes:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body)
        except (ValueError, TypeError):
            return b"\x00"  # unparsable as JSON: refused below
    return body.encode("utf-8", errors="surrogatepass")


# What checked_body gives when it parsed no JSON (no body, another media type, a refusal).
NOT_PARSED = object()


def precheck(event: dict) -> tuple[int, str, str] | None:
    """(status, code, message) when the request cannot reach its handler, else None.

    A body must come with one of the media types its route takes (415); a JSON body must be
    UTF-8 JSON that Python can hold (400: syntax, encoding, nesting past the recursion limit).
    Routes that read no body ignore one, as before."""
    return checked_body(event)[0]


def checked_body(event: dict) -> tuple[tuple[int, str, str] | None, Any]:
    """precheck's answer, and the JSON body it parsed to check it (NOT_PARSED if none): the
    handler reads that value instead of parsing the body again (json_body)."""
    route = find_route(str(event.get("httpMethod") or ""), str(event.get("resource") or ""))
    if route is None or not route.body:
        return None, NOT_PARSED
    data = _event_body(event)
    if not data.strip():
        return None, NOT_PARSED
    media = media_type(event.get("headers"))
    if media not in route.body:
        given = f"Content-Type {media}" if media else "no Content-Type"
        refusal = (415, "unsupported_media_type", f"{given}; send one of: {', '.join(route.body)}")
        return refusal, NOT_PARSED
    if media != "application/json":
        return None, NOT_PARSED
    try:
        return None, json.loads(data)
    except RecursionError:
        return (400, "malformed_body", "body is JSON nested too deeply"), NOT_PARSED
    except UnicodeDecodeError:
        return (400, "malformed_body", "body is not UTF-8"), NOT_PARSED
    except ValueError as e:
        return (400, "malformed_body", f"body is not valid JSON: {e}"), NOT_PARSED


def _proxy_error(status: int, code: str, message: str) -> dict:
    return {
        "statusCode": status,
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "body": json.dumps({"error": {"code": code, "message": message}}),
        "isBase64Encoded": False,
    }


def _ensure_retry_after(result: dict) -> dict:
    """Every 503 tells the client when to come back, whichever code path produced it."""
    if result.get("statusCode") != 503:
        return result
    names = {k.lower() for k in (result.get("headers") or {})}
    names |= {k.lower() for k in (result.get("multiValueHeaders") or {})}
    if "retry-after" not in names:
        result.setdefault("multiValueHeaders", {})["Retry-After"] = [str(REDIS_RETRY_AFTER_S)]
    return result


class PayloadStoreResolver(APIGatewayRestResolver):
    """Powertools' REST resolver, with the byte-level checks of `precheck` run first."""

    parsed_json: Any = NOT_PARSED  # this invocation's JSON body, parsed by checked_body

    def resolve(self, event, context) -> dict:
        refused, self.parsed_json = (
            checked_body(event) if isinstance(event, dict) else (None, NOT_PARSED)
        )
        if refused is not None:
            return _proxy_error(*refused)
        return _ensure_retry_after(super().resolve(event, context))


def new_resolver() -> APIGatewayRestResolver:
    """A REST resolver with request validation and our error mapping, identical for every function."""
    app = PayloadStoreResolver(enable_validation=True)

    @app.exception_handler(PayloadStoreError)
    def _domain(e: PayloadStoreError):
        if e.status >= 500:
            logger.warning("request failed", extra={"status": e.status, "error": e.message})
        return error_response(e.status, e.code, e.message, e.headers, **e.details)

    @app.exception_handler(RequestValidationError)
    def _request_invalid(e: RequestValidationError):
        errors = [
            {k: v for k, v in err.items() if k in ("loc", "msg", "type")} for err in e.errors()
        ]
        return error_response(422, "invalid_request", _summarize(errors), details=errors)

    @app.exception_handler(ValidationError)
    def _model_invalid(e: ValidationError):
        errors = [{"loc": err["loc"], "msg": err["msg"], "type": err["type"]} for err in e.errors()]
        return error_response(422, "invalid_request", _summarize(errors), details=errors)

    @app.exception_handler(redis.RedisError)
    def _redis_down(e: redis.RedisError):
        if isinstance(e, redis.exceptions.MaxConnectionsError):
            # Every connection of this container's pool is held (long-polls): Redis is fine.
            logger.warning("redis connection pool exhausted")
            err = ServiceUnavailable(
                "too many concurrent requests on this container; retry shortly",
                retry_after_s=REDIS_RETRY_AFTER_S,
            )
            return error_response(err.status, "busy", err.message, err.headers)
        if isinstance(e, redis.exceptions.OutOfMemoryError):
            # maxmemory reached (policy noeviction): nothing was written; never a 500.
            logger.warning("redis memory full", extra={"error": type(e).__name__})
            err = RedisMemoryFull(
                "redis is out of memory; retry shortly", retry_after_s=REDIS_RETRY_AFTER_S
            )
            return error_response(err.status, err.code, err.message, err.headers)
        if isinstance(e, REDIS_UNAVAILABLE):
            logger.warning("redis unavailable", extra={"error": type(e).__name__})
            err = ServiceUnavailable(
                "redis is unreachable; retry shortly", retry_after_s=REDIS_RETRY_AFTER_S
            )
            return error_response(err.status, err.code, err.message, err.headers)
        logger.error("redis error", exc_info=e)
        return error_response(500, "internal_error", "internal error")

    @app.exception_handler(BotoCoreError)
    def _aws_down(e: BotoCoreError):
        logger.warning("object storage unavailable", extra={"error": type(e).__name__})
        err = ServiceUnavailable("object storage is unreachable; retry shortly")
        return error_response(err.status, err.code, err.message, err.headers)

    @app.exception_handler(ServiceError)
    def _powertools(e: ServiceError):
        if e.status_code == 404:
            # API Gateway routed the request here, so the resource exists; Powertools matches
            # path parameters against a narrower character set and found no route: the
            # parameter is what is wrong.
            return error_response(
                422, "invalid_request", "a path parameter holds characters this API does not take"
            )
        return error_response(e.status_code, "error", str(e.msg))

    @app.exception_handler(Exception)
    def _unexpected(e: Exception):
        # Log the stack trace; the client gets a plain message and the request id to quote.
        logger.error("unhandled error", exc_info=e)
        request_id = (app.current_event.raw_event.get("requestContext") or {}).get("requestId", "")
        return error_response(500, "internal_error", f"internal error (request id {request_id})")

    return app
