"""Public health says ok/failing per check and no more; details need a token; the S3 checks are
cached per container so unauthenticated callers cannot multiply S3 calls."""

from __future__ import annotations

import pytest

from payloadstore_devstack.services import create_payload_bucket

HEALTH = "/v1/health"
DETAILS = "/v1/health/details"
BUCKET = "payloadstore-health-cache"


@pytest.fixture
def own_bucket(cp, settings_env, s3_client):
    """A bucket of this module, as the stack creates it, that the test may break."""
    create_payload_bucket(s3_client, BUCKET)
    settings_env(PAYLOAD_BUCKET=BUCKET)
    return BUCKET


@pytest.fixture
def s3_calls(monkeypatch):
    """Counts the health checks' S3 calls (each check method makes one S3 request)."""
    from payloadstore_controlplane.store.s3_objects import S3Objects

    counted = {"n": 0}
    for name in ("check_reachable", "check_region", "check_encryption", "check_lifecycle"):
        original = getattr(S3Objects, name)

        def wrapper(self, *a, _original=original, **kw):
            counted["n"] += 1
            return _original(self, *a, **kw)

        monkeypatch.setattr(S3Objects, name, wrapper)
    return counted


@pytest.fixture
def clock(monkeypatch):
    from payloadstore_controlplane.logic import health

    now = {"t": 1000.0}
    monkeypatch.setattr(health, "_now", lambda: now["t"])
    return now


def test_public_health_reveals_neither_the_bucket_nor_error_types(cp, settings_env):
    # Given a control plane whose bucket does not exist
    settings_env(PAYLOAD_BUCKET="payloadstore-secret-name-404")
    # When anyone asks for health
    r = cp.call("public", "GET", HEALTH, namespace=None)
    # Then it answers 503 and ok/failing per check, without the bucket's name or any error type
    assert r.status == 503
    assert r.json["checks"]["bucket"] == "failing"
    assert set(r.json["checks"].values()) <= {"ok", "failing"}
    assert "payloadstore-secret-name-404" not in r.raw_body
    assert "detail" not in r.raw_body and "Error" not in r.raw_body
    # And a token holder gets the details
    d = cp.call("public", "GET", DETAILS, role="daemon")
    assert d.status == 503
    assert "payloadstore-secret-name-404 not reachable" in d.json["checks"]["bucket"]["detail"]


def test_health_details_need_a_token(cp):
    # When the details are asked for without a token (no authorizer context)
    r = cp.call("public", "GET", DETAILS, namespace=None)
    # Then 401, with a reason
    assert r.status == 401
    assert r.error["code"] and r.error["message"]


def test_public_health_checks_s3_at_most_once_per_30_s_per_container(
    cp, own_bucket, s3_calls, clock
):
    # Given a first public health answer (4 S3 checks)
    assert cp.call("public", "GET", HEALTH, namespace=None).status == 200
    assert s3_calls["n"] == 4
    # When unauthenticated callers ask 20 more times within 30 s
    for _ in range(20):
        clock["t"] += 1
        assert cp.call("public", "GET", HEALTH, namespace=None).status == 200
    # Then no further S3 call was made
    assert s3_calls["n"] == 4
    # And once the 30 s are up, the checks run again
    clock["t"] += 11
    cp.call("public", "GET", HEALTH, namespace=None)
    assert s3_calls["n"] == 8


def test_a_broken_bucket_shows_in_details_at_once_and_publicly_within_30_s(
    cp, own_bucket, s3_client, clock
):
    # Given a healthy answer, cached
    assert cp.call("public", "GET", HEALTH, namespace=None).json["status"] == "ok"
    # When the bucket loses its lifecycle rule
    s3_client.delete_bucket_lifecycle(Bucket=own_bucket)
    # Then a token holder sees it at once, with the reason
    d = cp.call("public", "GET", DETAILS)
    assert d.status == 503 and d.json["failing"] == ["lifecycle"]
    assert d.json["checks"]["lifecycle"]["detail"]
    # And the public answer follows within 30 s (the details refreshed the container's cache)
    clock["t"] += 1
    r = cp.call("public", "GET", HEALTH, namespace=None)
    assert r.status == 503 and r.json["checks"]["lifecycle"] == "failing"
