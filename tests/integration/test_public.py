"""GET /v1/config, /v1/health, /v1/openapi.json."""

from __future__ import annotations

from tests.support.events import FakeLambdaContext, load_event


def test_config_tells_clients_the_fleet_settings(cp):
    r = cp.call("public", "GET", "/v1/config")
    assert r.status == 200
    assert r.json["inline_threshold"] == 262_144
    assert r.json["max_payload_bytes"] == 104_857_600
    assert r.json["presign_ttl_s"] == 900


def test_config_follows_environment(cp, settings_env):
    settings_env(INLINE_THRESHOLD="1024", PRESIGN_TTL_S="60")
    r = cp.call("public", "GET", "/v1/config", role="daemon")
    assert (r.json["inline_threshold"], r.json["presign_ttl_s"]) == (1024, 60)


def test_health_ok_with_bucket_as_the_stack_creates_it(cp):
    r = cp.call("public", "GET", "/v1/health", namespace=None)
    assert r.status == 200, r.raw_body
    assert r.json["status"] == "ok"
    assert set(r.json["checks"]) == {
        "redis",
        "redis_memory",
        "bucket",
        "region",
        "encryption",
        "lifecycle",
    }
    assert set(r.json["checks"].values()) == {"ok"}


def test_health_names_each_failing_check(cp, settings_env, s3_client):
    # Given a bucket without encryption or lifecycle and a control plane configured for another region
    s3_client.create_bucket(Bucket="payloadstore-misconfigured")
    settings_env(PAYLOAD_BUCKET="payloadstore-misconfigured", AWS_REGION="eu-west-1")
    # When anyone asks, Then the failing checks are named, and nothing more
    r = cp.call("public", "GET", "/v1/health", namespace=None)
    assert r.status == 503
    assert set(r.json["failing"]) >= {"region", "lifecycle"}
    assert r.json["checks"]["region"] == "failing"
    # When a token holder asks for the details, Then they say what is wrong
    d = cp.call("public", "GET", "/v1/health/details")
    assert d.status == 503
    assert "eu-west-1" in d.json["checks"]["region"]["detail"]


def test_health_reports_missing_bucket(cp, settings_env):
    settings_env(PAYLOAD_BUCKET="payloadstore-does-not-exist")
    r = cp.call("public", "GET", "/v1/health", namespace=None)
    assert r.status == 503 and "bucket" in r.json["failing"]


def test_openapi_lists_every_route_with_models(cp):
    r = cp.call("public", "GET", "/v1/openapi.json", namespace=None)
    assert r.status == 200
    paths = r.json["paths"]
    from payloadstore_controlplane.routes import ROUTES

    for route in ROUTES:
        if route.path == "/v1/openapi.json":
            continue
        assert route.method.lower() in paths[route.path], route.path
    schemas = r.json["components"]["schemas"]
    assert {
        "PresignRequest",
        "EnqueueRequest",
        "PollRequest",
        "ResultPost",
        "FailureReport",
        "PresignPutResponse",
        "JobStatusResponse",
        "ResultResponse",
    } <= set(schemas)
    enqueue_body = paths["/v1/namespaces/{ns}/queues/{queue}/jobs"]["post"]["requestBody"][
        "content"
    ]
    assert set(enqueue_body) == {
        "application/json",
        "application/msgpack",
        "application/octet-stream",
    }


def test_sample_events_are_served(cp):
    # The committed sample events (sam local invoke -e ...) are valid requests for their function
    from payloadstore_controlplane.handlers import public

    out = public.lambda_handler(load_event("config"), FakeLambdaContext())
    assert out["statusCode"] == 200
