"""Malformed requests get a 4xx with a reason, never a 5xx; every 503 says when to come back."""

from __future__ import annotations

import json

import pytest
import redis

from tests.support.control_plane import ControlPlane

POLL = ("daemon", "POST", "/v1/daemon/poll")


def job_route(cp: ControlPlane, tail: str) -> tuple[str, str, str, dict]:
    return (
        "daemon",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/" + tail,
        {"ns": cp.ns, "job_id": "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"},
    )


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "multipart/form-data", "application/x-www-form-urlencoded", "application/xml"],
)
@pytest.mark.parametrize("tail", ["poll", "result", "failure"])
def test_a_json_route_refuses_other_content_types_with_415(cp, content_type, tail):
    # Given a JSON body sent with another content type (multipart without its boundary, too)
    if tail == "poll":
        function, method, resource, params = (*POLL, None)
        body = {"namespace": cp.ns, "queues": [cp.queue], "wait_s": 0, "daemon_id": "d1"}
    else:
        function, method, resource, params = job_route(cp, tail)
        body = {"state": "payload_lost"} if tail == "failure" else {"error": {"type": "E"}}
    # When it reaches a daemon route
    r = cp.call(
        function,
        method,
        resource,
        params,
        role="daemon",
        body=json.dumps(body),
        headers={"Content-Type": content_type},
    )
    # Then it is 415 with the types the route takes, not a 500
    assert r.status == 415, r.raw_body
    assert r.error["code"] == "unsupported_media_type"
    assert "application/json" in r.error["message"]


def test_enqueue_refuses_json_sent_as_text_plain(cp):
    # Given a valid JSON enqueue body labelled text/plain
    body = json.dumps({"payloadInline": "gqFhAQ=="})
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs",
        {"ns": cp.ns, "queue": cp.queue},
        body=body,
        headers={"Content-Type": "text/plain"},
    )
    # Then it is refused, and nothing is enqueued
    assert r.status == 415, r.raw_body
    assert cp.poll().status == 204


def test_a_body_without_content_type_is_415(cp):
    r = cp.call(*POLL, role="daemon", body='{"namespace": "x"}', headers={"Content-Type": ""})
    assert r.status == 415 and "no Content-Type" in r.error["message"]


@pytest.mark.parametrize("depth", [5_000, 100_000])
@pytest.mark.parametrize(
    "route",
    [
        POLL + (None,),
        ("payloads", "POST", "/v1/namespaces/{ns}/payloads/presign", "ns"),
        ("jobs", "POST", "/v1/namespaces/{ns}/queues/{queue}/jobs", "queue"),
        ("daemon", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/result", "job"),
    ],
)
def test_deeply_nested_json_is_400_not_a_recursion_error(cp, route, depth):
    function, method, resource, _ = route
    params = {"ns": cp.ns, "queue": cp.queue, "job_id": "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"}
    params = {k: v for k, v in params.items() if "{" + k + "}" in resource}
    body = '{"a": ' + _nested(depth) + "}"
    r = cp.call(
        function,
        method,
        resource,
        params,
        role="client" if function in ("jobs", "payloads") else "daemon",
        body=body,
        headers={"Content-Type": "application/json"},
    )
    assert r.status == 400, r.raw_body[:300]
    assert r.error["code"] == "malformed_body" and "nested" in r.error["message"]


def test_nesting_below_the_limit_is_an_ordinary_422(cp):
    body = json.dumps({"namespace": cp.ns, "queues": [cp.queue], "daemon_id": "d", "x": [[[1]]]})
    r = cp.call(*POLL, role="daemon", body=body, headers={"Content-Type": "application/json"})
    assert r.status == 422, r.raw_body


@pytest.mark.parametrize("body", ["{not json", '{"a": 1', "\udcff"])
def test_unparsable_json_is_400_with_the_reason(cp, body):
    r = cp.call(*POLL, role="daemon", body=body, headers={"Content-Type": "application/json"})
    assert r.status == 400, r.raw_body
    assert r.error["code"] == "malformed_body"


def test_json_with_charset_parameter_is_accepted(cp):
    body = json.dumps({"namespace": cp.ns, "queues": [cp.queue], "wait_s": 0, "daemon_id": "d1"})
    r = cp.call(
        *POLL, role="daemon", body=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert r.status == 204, r.raw_body


def test_health_503_carries_retry_after(cp, settings_env):
    # Given a bucket that does not exist, health fails
    settings_env(PAYLOAD_BUCKET="payloadstore-does-not-exist")
    r = cp.call("public", "GET", "/v1/health", namespace=None)
    assert r.status == 503
    assert int(r.headers["Retry-After"]) > 0


def test_a_full_connection_pool_is_busy_not_unreachable(cp, monkeypatch):
    # Given every connection of the container's Redis pool in use (as redis-py then answers)
    def exhausted(*args, **kwargs):
        raise redis.exceptions.MaxConnectionsError("Too many connections")

    monkeypatch.setattr(redis.ConnectionPool, "get_connection", exhausted)
    r = cp.status("01KB7Z6Q3N4V8W2X5Y9Z0A1B2C")
    # Then the answer is a 503 "busy" with Retry-After, not "redis is unreachable"
    assert r.status == 503, r.raw_body
    assert r.error["code"] == "busy" and "unreachable" not in r.error["message"]
    assert int(r.headers["Retry-After"]) > 0


@pytest.mark.parametrize(
    "content_type",
    ["a\r\nX-Evil: 1", "text/plain\r\n", "application", "text/plain; charset", "app lication/x"],
)
def test_presign_refuses_a_content_type_that_is_not_a_mime_type(cp, content_type):
    # Given a content type that would break (or smuggle into) the signed Content-Type header
    r = cp.presign_put(10, content_type=content_type)
    # Then it is 422 naming the field, and nothing is issued
    assert r.status == 422, r.raw_body
    assert "content_type" in r.error["message"]


@pytest.mark.parametrize(
    "content_type", ["application/msgpack", "text/plain; charset=utf-8", "application/vnd.x+json"]
)
def test_presign_takes_real_mime_types(cp, content_type):
    r = cp.presign_put(10, content_type=content_type)
    assert r.status == 200, r.raw_body
    assert r.json["headers"]["Content-Type"] == content_type
