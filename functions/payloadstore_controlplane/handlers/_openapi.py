"""The OpenAPI document of the v1 API, made to say what the API does.

Powertools derives the parameters and the bodies it validates from the handlers' signatures; the
answers come from the route table (`routes.ROUTES[*].responses`, the body media types and roles),
so the document, the gateway's content-type checks and the role checks share one source:

- each operation lists its own answers (from its Route) plus the ones its kind shares
  (`routes.COMMON_ERRORS`: 401/403 behind the authorizer, 400/413/415/422 with a body, 422 with
  parameters, 503 with Retry-After where Redis or S3 is touched);
- every error answer carries the error body `{"error": {"code", "message", ...}}`; answers API
  Gateway itself may give (401, 403, 413) may instead carry its `{"message": ...}`;
- the bearer scheme is declared, and public routes say `security: []`.
"""

from __future__ import annotations

import copy
from http import HTTPStatus
from typing import Any

from ..routes import COMMON_ERRORS, ERROR, OBJECT, ROUTES, Route

BEARER = "bearerToken"
# Answers API Gateway gives on its own, with {"message": ...} instead of our error body.
GATEWAY_STATUSES = (401, 403, 413)


def route_statuses(route: Route) -> dict[int, tuple[str | None, str]]:
    """Every status `route` can answer -> (body spec, description)."""
    out: dict[int, tuple[str | None, str]] = {}
    for status, spec in route.responses.items():
        model, description = spec if isinstance(spec, tuple) else (spec, "")
        out[int(status)] = (model, description or HTTPStatus(int(status)).phrase)
    common: list[int] = []
    if route.roles is not None:
        common += COMMON_ERRORS["authorized"]
    if "{" in route.path:
        common += COMMON_ERRORS["inputs"]
    if route.body:
        common += COMMON_ERRORS["body"]
    if route.backend:
        common += COMMON_ERRORS["backend"]
    for status in common:
        out.setdefault(status, (ERROR, HTTPStatus(status).phrase))
    return dict(sorted(out.items()))


def _model_schemas(names: set[str]) -> dict[str, dict]:
    from ..models import api

    schemas: dict[str, dict] = {}
    for name in sorted(names):
        model = getattr(api, name, None)
        if model is None:
            raise LookupError(f"routes.py names {name!r}, which is not a model in models/api.py")
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    return schemas


def _body_schema(spec: str, status: int) -> dict:
    if spec == OBJECT:
        return {"type": "object"}
    refs = [{"$ref": f"#/components/schemas/{name}"} for name in spec.split("|")]
    if spec == ERROR and status in GATEWAY_STATUSES:
        refs.append({"$ref": "#/components/schemas/GatewayErrorResponse"})
    return refs[0] if len(refs) == 1 else {"anyOf": refs}


def _models_of(spec: str | None, status: int) -> set[str]:
    if spec in (None, OBJECT):
        return set()
    names = set(spec.split("|"))
    if spec == ERROR and status in GATEWAY_STATUSES:
        names.add("GatewayErrorResponse")
    return names


def _responses(route: Route) -> tuple[dict, set[str]]:
    responses: dict[str, dict] = {}
    models: set[str] = set()
    for status, (spec, description) in route_statuses(route).items():
        answer: dict = {"description": description}
        if spec is not None:
            answer["content"] = {"application/json": {"schema": _body_schema(spec, status)}}
            models |= _models_of(spec, status)
        if status == 503:
            answer["headers"] = {
                "Retry-After": {
                    "description": "seconds to wait before retrying",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 0},
                }
            }
        responses[str(status)] = answer
    return responses, models


def _request_body(route: Route) -> dict:
    content: dict[str, dict] = {}
    for media in route.body:
        if media == "application/json":
            schema = (
                {"$ref": f"#/components/schemas/{route.request}"}
                if route.request
                else {"type": "object"}
            )
        else:
            schema = {"type": "string", "format": "binary"}
        content[media] = {"schema": schema}
    body = {"required": route.body_required, "content": content}
    if not route.body_required:
        body["description"] = "JSON body and/or the same fields as query parameters (query wins)"
    return body


def complete(document: dict) -> dict:
    """Rewrite answers, security and hand-parsed request bodies of Powertools' document."""
    doc = copy.deepcopy(document)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    components["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "a client or daemon token (pst_...), bound to one namespace",
        }
    }
    wanted: set[str] = set()
    paths = doc.setdefault("paths", {})
    for route in ROUTES:
        operation = paths.setdefault(route.path, {}).setdefault(route.method.lower(), {})
        operation["responses"], models = _responses(route)
        wanted |= models
        operation["security"] = [] if route.roles is None else [{BEARER: []}]
        if route.roles is not None:
            operation["x-roles"] = list(route.roles)
        if route.request:
            operation["requestBody"] = _request_body(route)
            wanted.add(route.request)
        elif route.body and "requestBody" in operation:
            # Powertools documents the validated body as JSON; say which types are taken.
            content: dict[str, Any] = operation["requestBody"].get("content") or {}
            first: dict[str, Any] = next(iter(content.values()), {})
            schema = first.get("schema", {"type": "object"})
            operation["requestBody"]["content"] = {m: {"schema": schema} for m in route.body}
        for param in operation.get("parameters", []):
            if param.get("in") == "path":
                # API Gateway routes no empty path segment.
                param.setdefault("schema", {}).setdefault("minLength", 1)
    schemas.update(_model_schemas(wanted))
    return doc
