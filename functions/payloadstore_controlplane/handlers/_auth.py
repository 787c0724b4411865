"""The caller, as the authorizer saw it: its namespace and role, checked against the route's."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from ..logic.context import Principal
from ..models.errors import Forbidden, Unauthorized
from ..models.policy import NamespacePolicy


def principal(
    app: APIGatewayRestResolver, roles: tuple[str, ...], namespace: str | None = None
) -> Principal:
    """The caller as the authorizer saw it; 403 for another namespace or a route outside the role.

    Called by the route decorator (`_routing.route`) before the handler function runs."""
    ctx = (app.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    ns, role = ctx.get("namespace"), ctx.get("role")
    if not ns or not role:
        raise Unauthorized("missing or invalid bearer token")
    if role not in roles:
        raise Forbidden(f"a {role} token cannot use this route")
    if namespace is not None and namespace != ns:
        raise Forbidden("token does not belong to this namespace")
    return Principal(
        namespace=ns,
        role=role,
        token_id=ctx.get("token_id", ""),
        policy=NamespacePolicy.from_context(ctx),
    )
