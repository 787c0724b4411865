"""`@route(app, routes.X)`: a handler function registered for a route of `routes.ROUTES`.

The route table is the only place a path, method and set of roles is written; this decorator
registers the function with Powertools at the route's path (`{name}` becomes Powertools'
`<name>`) and method, and, for a route behind the authorizer, checks the caller first:

    @route(app, routes.PRESIGN, summary="...")
    def presign(p: Principal, ns: str) -> PresignPutResponse | PresignGetResponse: ...

- a route with roles: the caller is resolved and checked before the function runs (401 without
  an authorizer context, 403 for a role the route does not serve or, when the path has `{ns}`,
  another namespace). A function whose first parameter is annotated `Principal` receives it
  there; one without (e.g. config) is still guarded.
- a public route (roles None): the function is registered as it is, and must not ask for a
  `Principal` (there is no authorizer to have seen one).

Powertools reads the function's signature for its parameters (path, query, body) and its return
annotation for response validation and the OpenAPI document; the registered function has the
signature of the one written, less the `Principal`, and the same name (the operationId).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from ..logic.context import Principal
from ..routes import Route
from ._auth import principal

F = TypeVar("F", bound=Callable[..., Any])

_PARAM = re.compile(r"\{(\w+)\}")


def powertools_path(path: str) -> str:
    """API Gateway's `{name}` path parameters -> Powertools' `<name>`."""
    return _PARAM.sub(r"<\1>", path)


def route(app: APIGatewayRestResolver, r: Route, **options: Any) -> Callable[[F], F]:
    """Register the decorated function for `r` on `app`; `options` go to Powertools' `route`
    (summary, responses, include_in_schema, ...). Returns the function unchanged."""

    def register(fn: F) -> F:
        app.route(powertools_path(r.path), r.method, **options)(_guarded(app, r, fn))
        return fn

    return register


def _guarded(app: APIGatewayRestResolver, r: Route, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn as Powertools calls it: the caller checked first (and passed on if fn asks for it)."""
    signature = inspect.signature(fn, eval_str=True)
    params = list(signature.parameters.values())
    wants_principal = bool(params) and params[0].annotation is Principal
    if r.roles is None:
        if wants_principal:
            raise TypeError(f"{fn.__name__}: {r.method} {r.path} is public, it has no principal")
        return fn
    roles = r.roles
    # The path names a namespace: the token must be of that one.
    scoped = "ns" in _PARAM.findall(r.path)
    if wants_principal:
        params = params[1:]

    def handler(**kwargs: Any) -> Any:
        caller = principal(app, roles, kwargs.get("ns") if scoped else None)
        return fn(caller, **kwargs) if wants_principal else fn(**kwargs)

    # What Powertools reads of a route function: its name (operationId), its docstring, and its
    # parameters and return annotation (already evaluated: they name the handler module's types).
    handler.__name__ = fn.__name__
    handler.__qualname__ = fn.__qualname__
    handler.__module__ = fn.__module__
    handler.__doc__ = fn.__doc__
    handler.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    handler.__annotations__ = {
        **{p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty},
        **(
            {"return": signature.return_annotation}
            if signature.return_annotation is not inspect.Signature.empty
            else {}
        ),
    }
    return handler
