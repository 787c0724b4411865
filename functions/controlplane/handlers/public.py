"""GET /v1/health (no auth), GET /v1/health/details, GET /v1/config (any token),
GET /v1/openapi.json (no auth)."""

from __future__ import annotations

from functools import lru_cache

from ..logic.health import client_config, health, public_health
from ..models.wire import ConfigResponse, HealthResponse, PublicHealthResponse
from ..observability import lambda_entry
from ._common import get_deps, json_response, new_resolver, principal, roles_for

HEALTH = "/v1/health"
HEALTH_DETAILS = "/v1/health/details"
CONFIG = "/v1/config"
OPENAPI = "/v1/openapi.json"
# A failing check (Redis restarting, a bucket being created) is worth asking again this soon.
HEALTH_RETRY_AFTER_S = 5


def register(app) -> None:
    config_roles = roles_for("GET", CONFIG)
    details_roles = roles_for("GET", HEALTH_DETAILS)

    @app.get(
        HEALTH,
        summary="Checks: redis, bucket reachable, region, encryption, lifecycle (ok/failing only)",
    )
    def get_health() -> PublicHealthResponse:
        report = public_health(get_deps())
        if report.status == "ok":
            return json_response(200, report)
        return json_response(503, report, headers={"Retry-After": str(HEALTH_RETRY_AFTER_S)})

    @app.get(
        HEALTH_DETAILS,
        summary="The same checks with their details (bucket, error types); needs a token",
    )
    def get_health_details() -> HealthResponse:
        principal(app, details_roles)
        report = health(get_deps(), fresh=True)
        if report.status == "ok":
            return json_response(200, report)
        return json_response(503, report, headers={"Retry-After": str(HEALTH_RETRY_AFTER_S)})

    @app.get(CONFIG, summary="Settings clients need: thresholds and URL lifetime")
    def get_config() -> ConfigResponse:
        principal(app, config_roles)
        return json_response(200, client_config(get_deps()))

    @app.get(OPENAPI, summary="This API's OpenAPI document", include_in_schema=False)
    def get_openapi() -> dict:
        return openapi_document()


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The whole v1 API, built from every function's routes on a resolver used only for docs;
    the answers, security and hand-parsed bodies come from routes.ROUTES (see _openapi.py)."""
    import importlib
    import json

    from ..routes import FUNCTIONS, ROUTES
    from ._openapi import complete

    doc_app = new_resolver()
    for group in sorted({route.function for route in ROUTES}):
        module_name = FUNCTIONS[group].rsplit(".", 1)[0]
        if module_name == __name__:
            register(doc_app)
        else:
            importlib.import_module(module_name).register(doc_app)
    schema = doc_app.get_openapi_json_schema(
        title="payloadstore control plane",
        version="1",
        description=__doc__,
    )
    return complete(json.loads(schema))


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
