"""The direct path of `PayloadStoreResolver` (handlers/_resolver.py): a request answered with
Powertools' own routing, validation and response functions, called in order, instead of through
its middleware chain.

For a valid request to a route without middlewares, dependencies or header/cookie parameters,
Powertools' chain does exactly this, and more that changes nothing: it matches the route (the
same loop as here), validates the path and query parameters and the body with the route's own
fields (`_request_params_to_args`, `_request_body_to_args`, called here), calls the route
function, validates and serialises its answer (`_handle_response` of the same middleware object)
and builds the proxy answer (the same `ResponseBuilder`). What it does besides, and is left out:
a debug line and a stack-frame string per middleware frame, header and cookie normalisation for
routes that declare neither (their result is empty), and a second parse of the JSON body (the
one `checked_body` made is used, for bodies it parsed exactly as Powertools would).

Anything else goes the long way, untouched: `bind` returns None before anything has run when a
parameter or the body does not validate (Powertools then builds its 422), when the body is not
one this module parsed as Powertools would (base64, a byte order mark, a Content-Type Powertools
reads differently), and `plan` gives None for a route the chain would treat differently.
Exceptions of the route function go to the resolver's exception handlers, as in `_call_route`.

Powertools is pinned (functions/requirements.txt); these are its internal functions, so
tests/unit/test_direct_resolve.py answers the same requests both ways and compares the answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route
from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
    _get_multi_value_query_params,
    _is_or_contains_sequence,
    _process_model_param,
    _process_scalar_param,
    _request_body_to_args,
    _request_params_to_args,
)
from aws_lambda_powertools.event_handler.openapi.compat import is_scalar_field
from aws_lambda_powertools.event_handler.openapi.params import Param
from pydantic import BaseModel
from pydantic._internal._utils import lenient_issubclass

from ._requests import NOT_PARSED

APPLICATION_JSON = "application/json"


def find_route(app, proxy) -> tuple[Route, str, dict[str, str]] | None:
    """The route Powertools' `_resolve` would pick (the same loop), its path and arguments."""
    method = proxy.http_method.upper()
    path = app._remove_prefix(proxy.path)
    for route in app._static_routes + app._dynamic_routes:
        if method != route.method:
            continue
        match = route.rule.match(path)
        if match:
            return route, path, match.groupdict()
    return None


@dataclass(frozen=True)
class Plan:
    """How a route's arguments are bound and its function called, outside the chain."""

    path_params: list
    query_params: list
    body_params: list
    # Every path parameter a plain `str`: validating a string as one gives it back, so the
    # matched values are the arguments (the route's regex always fills every group).
    plain_path: bool = False
    # The one body parameter, a model taking the whole body (not embedded), and whether its
    # annotation is a sequence (Powertools' _normalize_field_value takes a list's first item
    # otherwise): _request_body_to_args reduced to what it does for such a route.
    whole_body: Any = None
    body_is_sequence: bool = False
    # Per query parameter, how _normalize_multi_params treats it ("scalar", "model" or ""):
    # it asks is_scalar_field of every parameter on every request (an inspection of the
    # annotation, ~10% of a small GET's time); the answer depends on the route alone.
    query_kinds: tuple[str, ...] = ()

    def bind(self, proxy, route_args: dict[str, str], parsed_json: Any) -> dict | None:
        """The route function's arguments, as the validation middleware would make them; None
        when they do not validate or the body is not one to take from `parsed_json`."""
        if self.plain_path:
            values = {f.name: route_args[f.alias] for f in self.path_params}
        else:
            values, errors = _request_params_to_args(self.path_params, route_args)
            if errors:
                return None
        if self.query_params:
            # _normalize_multi_params, with each parameter's kind known beforehand.
            query = dict(proxy.resolved_query_string_parameters or {})
            multi = _get_multi_value_query_params(proxy)
            for param, kind in zip(self.query_params, self.query_kinds, strict=True):
                if kind == "scalar":
                    _process_scalar_param(query, param, multi)
                elif kind == "model":
                    _process_model_param(query, param, multi)
            query_values, errors = _request_params_to_args(self.query_params, query)
            if errors:
                return None
            values.update(query_values)
        if self.body_params:
            body_values = self._bind_body(proxy, parsed_json)
            if body_values is None:
                return None
            values.update(body_values)
        return values

    def _bind_body(self, proxy, parsed_json: Any) -> dict | None:
        if not _body_parsed_as_powertools_would(proxy, parsed_json):
            return None
        if self.whole_body is None:
            values, errors = _request_body_to_args(self.body_params, parsed_json)
            return None if errors else values
        value = parsed_json
        if not self.body_is_sequence and isinstance(value, list) and value:
            value = value[0]
        if value is None:
            return None  # "field required": the chain's 422
        validated, errors = self.whole_body.validate(value=value, loc=("body",))
        return None if errors else {self.whole_body.name: validated}

    def call(self, app, route: Route, values: dict) -> ResponseBuilder:
        """`_call_route` without the chain: the function, the answer's validation, or the
        exception handler's answer."""
        try:
            response = app._to_response(route.func(**values))
            response = app._response_validation_middleware._handle_response(
                route=route, response=response
            )
            return app._response_builder_class(
                response=response, serializer=app._serializer, route=route
            )
        except Exception as exc:
            builder = app._call_exception_handler(exc, route)
            if builder is None:
                raise
            return builder


def _body_parsed_as_powertools_would(proxy, parsed_json: Any) -> bool:
    """checked_body parsed the body (bytes, encoding detected) where Powertools would parse the
    decoded text of a JSON Content-Type: the same value for a plain (not base64) UTF-8 body
    without a byte order mark, under a Content-Type Powertools reads as JSON."""
    if parsed_json is NOT_PARSED or proxy.get("isBase64Encoded"):
        return False
    body = proxy.get("body")
    if not isinstance(body, str) or body.startswith("\ufeff"):
        return False
    content_type = proxy.headers.get("content-type", "").strip()
    return not content_type or content_type.startswith(APPLICATION_JSON)


def plan(app, route: Route) -> Plan | None:
    """The route's Plan, or None when Powertools' chain would do more than a Plan does."""
    # The route's own setting, else the resolver's (as _build_middleware_stack reads it).
    validation = (
        route.enable_validation if route.enable_validation is not None else app._enable_validation
    )
    if (
        not validation
        or not hasattr(app, "_response_validation_middleware")
        or route.middlewares
        or app._router_middlewares
        or route.has_dependencies
        or app._debug
    ):
        return None
    from aws_lambda_powertools.event_handler.api_gateway import _find_request_param_name

    if _find_request_param_name(route.func):
        return None
    dependant = route.dependant
    if dependant.header_params or dependant.cookie_params:
        return None
    if not all(isinstance(f.field_info, Param) for f in dependant.path_params):
        return None
    if not all(isinstance(f.field_info, Param) for f in dependant.query_params):
        return None
    body = dependant.body_params
    whole_body = (
        body[0]
        if len(body) == 1
        and not getattr(body[0].field_info, "embed", None)
        and lenient_issubclass(body[0].field_info.annotation, BaseModel)
        else None
    )
    return Plan(
        path_params=list(dependant.path_params),
        query_params=list(dependant.query_params),
        query_kinds=tuple(_query_kind(f) for f in dependant.query_params),
        body_params=list(body),
        plain_path=all(
            f.field_info.annotation is str and not f.field_info.metadata
            for f in dependant.path_params
        ),
        whole_body=whole_body,
        body_is_sequence=(
            whole_body is not None and _is_or_contains_sequence(whole_body.field_info.annotation)
        ),
    )


def _query_kind(param) -> str:
    """What _normalize_multi_params does with the parameter (the same tests, in its order)."""
    if is_scalar_field(param):
        return "scalar"
    if lenient_issubclass(param.field_info.annotation, BaseModel):
        return "model"
    return ""
