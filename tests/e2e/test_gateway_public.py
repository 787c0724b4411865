"""The public routes and the gateway's own answers, served in front of the real handlers."""

from __future__ import annotations

import pytest
import requests

pytestmark = pytest.mark.e2e


def test_health_is_200_with_every_check_passing(local_gateway):
    resp = requests.get(f"{local_gateway.url}/v1/health", timeout=30)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "ok" and body["failing"] == []
    # Public: ok/failing per check only (the details are at /v1/health/details, with a token)
    assert set(body["checks"].values()) == {"ok"}
    assert resp.headers["x-amzn-RequestId"]


def test_config_tells_clients_the_fleet_settings(local_gateway):
    resp = requests.get(
        f"{local_gateway.url}/v1/config",
        headers=local_gateway.auth("sandbox", "daemon"),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["inline_threshold"] == 262144
    assert body["max_payload_bytes"] == 104857600
    assert body["presign_ttl_s"] == 900


def test_openapi_document_lists_the_wire(local_gateway):
    resp = requests.get(f"{local_gateway.url}/v1/openapi.json", timeout=30)
    assert resp.status_code == 200, resp.text
    paths = resp.json()["paths"]
    assert "/v1/daemon/poll" in paths
    assert "/v1/namespaces/{ns}/queues/{queue}/jobs" in paths


def test_unknown_route_is_api_gateways_missing_authentication_token(local_gateway):
    resp = requests.get(f"{local_gateway.url}/v2/anything", timeout=30)
    assert resp.status_code == 403
    assert resp.json() == {"message": "Missing Authentication Token"}
