"""The public function: health (no auth), health details and config (any token), and this
API's OpenAPI document (no auth)."""

from __future__ import annotations

from functools import lru_cache

from .. import routes
from ..logic.context import Principal
from ..logic.health import client_config, health, public_health
from ..models.api import ConfigResponse, HealthResponse, PublicHealthResponse
from ..observability import lambda_entry
from ._deps import get_deps
from ._resolver import new_resolver
from ._responses import json_response
from ._routing import route

# A failing check (Redis restarting, a bucket being created) is worth asking again this soon.
HEALTH_RETRY_AFTER_S = 5


def register(app) -> None:
    @route(
        app,
        routes.HEALTH,
        summary="Checks: redis, bucket reachable, region, encryption, lifecycle (ok/failing only)",
    )
    def get_health() -> PublicHealthResponse:
        report = public_health(get_deps())
        if report.status == "ok":
            return json_response(200, report)
        return json_response(503, report, headers={"Retry-After": str(HEALTH_RETRY_AFTER_S)})

    @route(
        app,
        routes.HEALTH_DETAILS,
        summary="The same checks with their details (bucket, error types); needs a token",
    )
    def get_health_details() -> HealthResponse:
        report = health(get_deps(), fresh=True)
        if report.status == "ok":
            return json_response(200, report)
        return json_response(503, report, headers={"Retry-After": str(HEALTH_RETRY_AFTER_S)})

    @route(app, routes.CONFIG, summary="Settings clients need: thresholds and URL lifetime")
    def get_config(p: Principal) -> ConfigResponse:
        return json_response(200, client_config(p, get_deps()))

    @route(app, routes.OPENAPI, summary="This API's OpenAPI document", include_in_schema=False)
    def get_openapi() -> dict:
        return openapi_document()


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The whole v1 API, built from every function's routes on a resolver used only for docs;
    the answers, security and hand-parsed bodies come from routes.ROUTES (see _openapi.py)."""
    import importlib
    import json

    from ..routes import FUNCTIONS, OPENAPI_DESCRIPTION, ROUTES
    from ._openapi import complete

    doc_app = new_resolver()
    for group in sorted({r.function for r in ROUTES}):
        module_name = FUNCTIONS[group].rsplit(".", 1)[0]
        if module_name == __name__:
            register(doc_app)
        else:
            importlib.import_module(module_name).register(doc_app)
    schema = doc_app.get_openapi_json_schema(
        title="payloadstore control plane",
        version="1",
        description=OPENAPI_DESCRIPTION,
    )
    return complete(json.loads(schema))


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
