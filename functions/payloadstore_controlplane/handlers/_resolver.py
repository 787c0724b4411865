"""The resolver every API function uses (`new_resolver`): Powertools' REST resolver with the
body prechecks run first, a Retry-After on every 503, and the one mapping from errors (domain,
validation, Redis, S3, Powertools' own) to HTTP answers."""

from __future__ import annotations

import threading
from typing import Any

import redis
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter, ResponseBuilder
from aws_lambda_powertools.event_handler.exceptions import ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from botocore.exceptions import BotoCoreError
from pydantic import ValidationError

from ..models.errors import PayloadStoreError, RedisMemoryFull, ServiceUnavailable
from ..observability import logger
from . import _direct
from ._requests import NOT_PARSED, checked_body
from ._responses import error_response, proxy_error

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


# A 422 lists this many problems, each location part and message cut to VALIDATION_TEXT_MAX
# characters: the answer echoes the request (an unknown field's name, one error per item), and
# a body of 100,000 unknown fields, or one with a 3.5 MB name, would take it past Lambda's 6 MB.
VALIDATION_ERRORS_LISTED = 20
VALIDATION_TEXT_MAX = 200


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > VALIDATION_TEXT_MAX:
        return value[:VALIDATION_TEXT_MAX] + "..."
    return value


def _listed(errors: list) -> list[dict]:
    """The first VALIDATION_ERRORS_LISTED problems as the answer names them: where, what, which."""
    return [
        {
            "loc": [_cut(x) for x in err.get("loc", ())],
            "msg": _cut(err.get("msg", "invalid")),
            "type": err.get("type"),
        }
        for err in errors[:VALIDATION_ERRORS_LISTED]
    ]


def _summarize(errors: list[dict], total: int | None = None) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    more = (total or 0) - min(len(errors), 5)
    if parts and more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts) or "invalid request"


def _ensure_retry_after(result: dict) -> dict:
    """Every 503 tells the client when to come back, whichever code path produced it."""
    if result.get("statusCode") != 503:
        return result
    names = {k.lower() for k in (result.get("headers") or {})}
    names |= {k.lower() for k in (result.get("multiValueHeaders") or {})}
    if "retry-after" not in names:
        result.setdefault("multiValueHeaders", {})["Retry-After"] = [str(REDIS_RETRY_AFTER_S)]
    return result


def redis_error_response(e: redis.RedisError) -> Response:
    """A Redis error as an answer: 503 (with Retry-After) for "not now", 500 for anything else."""
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


# The invocation a thread is serving: its proxy event, Lambda context and routing context.
_invocation = threading.local()


class _ResponseBuilder(ResponseBuilder):
    """Powertools' response builder, without reading the request's headers for a response that
    is never compressed: it builds (and case-folds) a dictionary of every header on every
    answer to find Accept-Encoding first, and decides "no" whenever neither the route nor the
    response asks for compression, as none of ours does."""

    @staticmethod
    def _has_compression_enabled(route_compression, response_compression, event) -> bool:
        if not route_compression and not response_compression:
            return False
        return ResponseBuilder._has_compression_enabled(
            route_compression=route_compression,
            response_compression=response_compression,
            event=event,
        )


class PayloadStoreResolver(APIGatewayRestResolver):
    """Powertools' REST resolver, with the byte-level checks of `_requests.precheck` run first.

        Powertools keeps "the" invocation's event and Lambda context as class attributes shared by
        every resolver of the process, and the routing context (validated route arguments) on the
        resolver. Lambda runs one invocation per process at a time; the local gateway runs
        concurrent invocations on threads of one process, where a request arriving while another
        was being validated (or was long-polling: enqueue ?wait, result ?wait, poll) read the other
        one's event. Here all three (and the parsed body) are per thread, so each invocation sees
    only its own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._response_builder_class = _ResponseBuilder
        self._direct_plans: dict[Any, _direct.Plan | None] = {}

    @property
    def parsed_json(self) -> Any:
        """This invocation's JSON body, parsed by checked_body (per thread, as the event)."""
        return getattr(_invocation, "parsed_json", NOT_PARSED)

    @parsed_json.setter
    def parsed_json(self, value: Any) -> None:
        _invocation.parsed_json = value

    @property  # type: ignore[override]
    def current_event(self):
        return getattr(_invocation, "event", None)

    @current_event.setter
    def current_event(self, value) -> None:
        _invocation.event = value

    @property  # type: ignore[override]
    def lambda_context(self):
        return getattr(_invocation, "context", None)

    @lambda_context.setter
    def lambda_context(self, value) -> None:
        _invocation.context = value

    @property  # type: ignore[override]
    def context(self) -> dict:
        routing = getattr(_invocation, "routing", None)
        if routing is None:
            routing = _invocation.routing = {}
        return routing

    @context.setter
    def context(self, value: dict) -> None:
        _invocation.routing = value

    def _to_proxy_event(self, event):
        # Powertools then stores it on BaseRouter for every resolver: ours reads it from here.
        proxy = super()._to_proxy_event(event)
        _invocation.event = proxy
        return proxy

    def resolve(self, event, context) -> dict:
        _invocation.context = context
        refused, self.parsed_json = (
            checked_body(event) if isinstance(event, dict) else (None, NOT_PARSED)
        )
        if refused is not None:
            return proxy_error(*refused)
        if isinstance(event, dict):
            answer = self._resolve_direct(event, context)
            if answer is not None:
                return _ensure_retry_after(answer)
        return _ensure_retry_after(super().resolve(event, context))

    # -- the direct path: Powertools' own steps, without its middleware chain -----------------

    def _resolve_direct(self, event: dict, context) -> dict | None:
        """The answer Powertools would give, computed with its own routing, validation and
        response functions but without the generic middleware chain around them (~40% of a small
        request's CPU: per-frame debug strings, header and cookie normalisation for routes that
        read neither, the body parsed a second time). None, with nothing done, whenever the
        request is not a plain valid one (a parameter or body that fails validation, a route
        with middlewares or dependencies): Powertools' own chain then answers it, errors and
        all (`_direct.py` says what is taken over; tests/unit/test_direct_resolve.py compares
        the two answers route by route)."""
        # What Powertools' resolve sets first (the devstack makes these class attributes per
        # thread; PayloadStoreResolver reads its own per-thread copies).
        proxy = BaseRouter.current_event = self._to_proxy_event(event)
        BaseRouter.lambda_context = context
        found = _direct.find_route(self, proxy)
        if found is None:
            return None
        route, path, route_args = found
        try:
            plan = self._direct_plans[route]
        except KeyError:
            plan = self._direct_plans[route] = _direct.plan(self, route)
        if plan is None:
            return None
        values = plan.bind(proxy, route_args, self.parsed_json)
        if values is None:
            return None
        self.append_context(_route=route, _path=path, _route_args=values)
        try:
            return self._build_response(plan.call(self, route, values))
        finally:
            self.clear_context()


def new_resolver() -> APIGatewayRestResolver:
    """A REST resolver with request validation and our error mapping, alike in every function."""
    app = PayloadStoreResolver(enable_validation=True)

    @app.exception_handler(PayloadStoreError)
    def _domain(e: PayloadStoreError):
        if e.status >= 500:
            logger.warning("request failed", extra={"status": e.status, "error": e.message})
        return error_response(e.status, e.code, e.message, e.headers, **e.details)

    @app.exception_handler(RequestValidationError)
    def _request_invalid(e: RequestValidationError):
        found = list(e.errors())
        errors = _listed(found)
        return error_response(
            422, "invalid_request", _summarize(errors, len(found)), details=errors
        )

    @app.exception_handler(ValidationError)
    def _model_invalid(e: ValidationError):
        found = e.errors()
        errors = _listed(found)
        return error_response(
            422, "invalid_request", _summarize(errors, len(found)), details=errors
        )

    @app.exception_handler(redis.RedisError)
    def _redis_down(e: redis.RedisError):
        return redis_error_response(e)

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
