"""GET /v1/health (no auth), GET /v1/config (any token), GET /v1/openapi.json (no auth)."""

from __future__ import annotations

from functools import lru_cache

from ..logic.health import client_config, health
from ..models.wire import ConfigResponse, HealthResponse
from ..observability import lambda_entry
from ._common import get_deps, json_response, new_resolver, principal, roles_for

HEALTH = "/v1/health"
CONFIG = "/v1/config"
OPENAPI = "/v1/openapi.json"


def register(app) -> None:
    config_roles = roles_for("GET", CONFIG)

    @app.get(
        HEALTH,
        summary="Checks: redis, bucket reachable, region, encryption, lifecycle",
        responses={503: {"description": "one or more checks failing"}},
    )
    def get_health() -> HealthResponse:
        report = health(get_deps())
        return json_response(200 if report.status == "ok" else 503, report)

    @app.get(CONFIG, summary="Settings clients need: thresholds and URL lifetime")
    def get_config() -> ConfigResponse:
        principal(app, config_roles)
        return json_response(200, client_config(get_deps()))

    @app.get(OPENAPI, summary="This API's OpenAPI document", include_in_schema=False)
    def get_openapi() -> dict:
        return openapi_document()


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The whole v1 API, built from every function's routes on a resolver used only for docs."""
    import json

    from . import daemon, jobs, payloads

    doc_app = new_resolver()
    for module in (payloads, jobs, daemon):
        module.register(doc_app)
    register(doc_app)
    schema = doc_app.get_openapi_json_schema(
        title="payloadstore control plane",
        version="1",
        description=__doc__,
    )
    document = json.loads(schema)
    _document_manual_bodies(document)
    return document


def _document_manual_bodies(document: dict) -> None:
    """Presign and enqueue parse their bodies themselves (query + JSON, or raw msgpack), so
    Powertools cannot see them: describe those request bodies here."""
    from ..models.wire import EnqueueRequest, PresignRequest

    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (PresignRequest, EnqueueRequest):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    paths = document["paths"]
    paths["/v1/namespaces/{ns}/payloads/presign"]["post"]["requestBody"] = {
        "description": "JSON body and/or the same fields as query parameters (query wins)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PresignRequest"}}
        },
    }
    paths["/v1/namespaces/{ns}/queues/{queue}/jobs"]["post"]["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/EnqueueRequest"}},
            "application/msgpack": {"schema": {"type": "string", "format": "binary"}},
        },
    }


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
