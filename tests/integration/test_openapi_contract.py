"""The OpenAPI document says what the API answers: built from routes.ROUTES (see _openapi.py)."""

from __future__ import annotations

import pytest

from payloadstore_controlplane.handlers._openapi import BEARER, route_statuses
from payloadstore_controlplane.models import api
from payloadstore_controlplane.routes import ERROR, OBJECT, ROUTES, Route

ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture(scope="module")
def document(cp_env):
    from payloadstore_controlplane.handlers.public import openapi_document

    openapi_document.cache_clear()
    return openapi_document()


def _refs(schema: dict) -> list[dict]:
    return schema.get("anyOf", [schema])


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_every_route_declares_its_answers_with_known_models(route: Route):
    statuses = [int(s) for s in route.responses]
    assert any(200 <= s < 300 for s in statuses), "list at least one success answer"
    for spec in route.responses.values():
        model = spec[0] if isinstance(spec, tuple) else spec
        for name in (model or "").split("|"):
            assert not name or name == OBJECT or hasattr(api, name), name


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_operation_lists_exactly_the_routes_statuses(document, route: Route):
    operation = document["paths"][route.path][route.method.lower()]
    assert set(operation["responses"]) == {str(s) for s in route_statuses(route)}
    # the shared answers are there by kind of route
    if route.roles is not None:
        assert {"401", "403"} <= set(operation["responses"])
    if route.body:
        assert {"400", "413", "415", "422"} <= set(operation["responses"])


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_error_answers_carry_the_error_body(document, route: Route):
    operation = document["paths"][route.path][route.method.lower()]
    for status, answer in operation["responses"].items():
        own = route.responses.get(int(status))
        own = own[0] if isinstance(own, tuple) else own
        if int(status) < 400 or own not in (None, ERROR):
            continue
        schema = answer["content"]["application/json"]["schema"]
        assert ERROR_REF in _refs(schema), (status, schema)


def test_every_503_declares_retry_after(document):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            answer = operation["responses"].get("503")
            if answer is not None:
                assert answer["headers"]["Retry-After"]["required"] is True, (method, path)


def test_bearer_scheme_declared_and_public_routes_marked(document):
    scheme = document["components"]["securitySchemes"][BEARER]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    for route in ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        if route.roles is None:
            assert operation["security"] == []
        else:
            assert operation["security"] == [{BEARER: []}]
    assert document["paths"]["/v1/health"]["get"]["security"] == []
    assert document["paths"]["/v1/openapi.json"]["get"]["security"] == []


def test_result_get_declares_200_and_health_declares_200(document):
    result = document["paths"]["/v1/namespaces/{ns}/jobs/{job_id}/result"]["get"]["responses"]
    assert {"200", "202", "404"} <= set(result)
    assert {"200", "503"} <= set(document["paths"]["/v1/health"]["get"]["responses"])


def test_every_referenced_schema_is_in_the_document(document):
    import json

    text = json.dumps(document)
    schemas = document["components"]["schemas"]
    for ref in {part.split('"')[0] for part in text.split('"#/components/schemas/')[1:]}:
        assert ref in schemas, ref
