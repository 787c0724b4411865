"""The local gateway's API Gateway behaviour, over real HTTP, with handlers that echo the event.

These pin the translation itself (request -> REST proxy event -> response) independently of
the control-plane handlers: binary bodies, repeated query keys, limits, authorizer outcomes.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import socket
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from payloadstore_controlplane.routes import MIN_COMPRESSION_BYTES, Route
from payloadstore_devstack.gateway import LocalGateway, serve_in_thread

pytestmark = pytest.mark.e2e

CLIENT = ("client",)


def echo_handler(event, context):
    """Returns the event it got, and the request body back as it came (bytes for binary)."""
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json", "X-Echo": "yes"},
        "multiValueHeaders": {"X-Multi": ["a", "b"]},
        "body": json.dumps(
            {"event": event, "remaining_ms": context.get_remaining_time_in_millis()}
        ),
        "isBase64Encoded": False,
    }


def raw_echo_handler(event, context):
    """Sends the request body back byte for byte, base64 on the Lambda side like a binary reply."""
    body = event["body"] or ""
    raw = base64.b64decode(body) if event["isBase64Encoded"] else body.encode()
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/octet-stream"},
        "body": base64.b64encode(raw).decode(),
        "isBase64Encoded": True,
    }


def boom_handler(event, context):
    raise RuntimeError("handler bug with a secret=hunter2 in it")


def malformed_handler(event, context):
    return {"body": "no status code"}


def slow_handler(event, context):
    time.sleep(float((event["queryStringParameters"] or {}).get("s", "1")))
    return {"statusCode": 200, "body": "{}"}


class FakeAuthorizer:
    """Decides by token: allow-<ns>, narrow-<ns> (allows only the exact methodArn), deny, bad, crash."""

    def __init__(self):
        self.calls: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, event, context):
        with self.lock:
            self.calls.append(event)
        token = event["headers"].get("Authorization", "").removeprefix("Bearer ")
        if token == "bad":
            raise Exception("Unauthorized")  # noqa: TRY002 - the exact contract API Gateway reads
        if token == "crash":
            raise ValueError("authorizer bug")
        arn = event["methodArn"]
        if token == "deny":
            return self._policy("Deny", arn, {})
        kind, _, ns = token.partition("-")
        resource = arn if kind == "narrow" else arn.split("/", 1)[0] + "/*"
        return self._policy(
            "Allow", resource, {"namespace": ns, "role": "client", "token_id": "abc123"}
        )

    @staticmethod
    def _policy(effect, resource, context):
        return {
            "principalId": "abc123",
            "policyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {"Action": "execute-api:Invoke", "Effect": effect, "Resource": resource}
                ],
            },
            "context": context,
        }


TEST_ROUTES = (
    Route("POST", "/v1/echo/{name}", "echo", None, "-"),
    Route("GET", "/v1/echo/{name}", "echo", None, "-"),
    Route("PUT", "/v1/raw", "raw", None, "-"),
    Route("POST", "/v1/raw", "raw", None, "-"),
    Route("GET", "/v1/namespaces/{ns}/thing", "echo", CLIENT, "-"),
    Route("GET", "/v1/namespaces/{ns}/other", "echo", CLIENT, "-"),
    Route("GET", "/v1/boom", "boom", None, "-"),
    Route("GET", "/v1/malformed", "malformed", None, "-"),
    Route("GET", "/v1/slow", "slow", None, "-"),
)
FUNCTIONS = {
    "echo": echo_handler,
    "raw": raw_echo_handler,
    "boom": boom_handler,
    "malformed": malformed_handler,
    "slow": slow_handler,
}


def start(authorizer, **kwargs):
    gateway = LocalGateway(routes=TEST_ROUTES, functions=FUNCTIONS, authorizer=authorizer, **kwargs)
    return serve_in_thread(gateway, "127.0.0.1", 0)


@pytest.fixture
def authorizer():
    return FakeAuthorizer()


@pytest.fixture
def gateway(authorizer):
    running = start(authorizer, timeout_s=2.0)
    yield running
    running.stop()


def event_of(resp) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["event"]


# --- request translation ------------------------------------------------------------------------


def test_binary_body_round_trips_byte_for_byte(gateway):
    # Given bytes that are not valid UTF-8, sent as one of the binary media types
    payload = bytes(range(256)) * 64 + os.urandom(4096)
    # When they go through the gateway to a handler that sends them back
    resp = requests.post(
        f"{gateway.url}/v1/raw",
        data=payload,
        headers={"Content-Type": "application/msgpack"},
        timeout=10,
    )
    # Then the very same bytes come back
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.content == payload


def test_binary_media_type_arrives_base64_and_text_arrives_as_is(gateway):
    # Given one msgpack body and one JSON body
    binary = requests.post(
        f"{gateway.url}/v1/echo/x",
        data=b"\x81\xa1a\x01",
        headers={"Content-Type": "application/msgpack"},
        timeout=10,
    )
    text = requests.post(f"{gateway.url}/v1/echo/x", json={"a": "é"}, timeout=10)
    # Then the handler sees base64 for the binary type and the text verbatim otherwise
    ev = event_of(binary)
    assert ev["isBase64Encoded"] is True
    assert base64.b64decode(ev["body"]) == b"\x81\xa1a\x01"
    ev = event_of(text)
    assert ev["isBase64Encoded"] is False
    assert json.loads(ev["body"]) == {"a": "é"}


def test_chunked_request_body_is_read_whole(gateway):
    # Given a body sent with Transfer-Encoding: chunked (a generator in requests)
    parts = [b"a" * 1000, b"b" * 70000, b"c"]
    resp = requests.put(
        f"{gateway.url}/v1/raw",
        data=iter(parts),
        headers={"Content-Type": "application/octet-stream"},
        timeout=10,
    )
    # Then the handler got all of it
    assert resp.content == b"".join(parts)


def test_repeated_query_keys_fill_multi_value_parameters(gateway):
    # Given a query string repeating a key and carrying an encoded value
    resp = requests.get(
        f"{gateway.url}/v1/echo/a%20b?q=1&q=2&q=3&x=hello%20world&empty=", timeout=10
    )
    ev = event_of(resp)
    # Then every value is in multiValueQueryStringParameters and the last one in the single map
    assert ev["multiValueQueryStringParameters"] == {
        "q": ["1", "2", "3"],
        "x": ["hello world"],
        "empty": [""],
    }
    assert ev["queryStringParameters"] == {"q": "3", "x": "hello world", "empty": ""}
    # And the path parameter is decoded, the resource is the template
    assert ev["pathParameters"] == {"name": "a b"}
    assert ev["resource"] == "/v1/echo/{name}"
    assert ev["path"] == "/v1/echo/a b"


def test_no_query_string_gives_null_maps_like_api_gateway(gateway):
    ev = event_of(requests.get(f"{gateway.url}/v1/echo/x", timeout=10))
    assert ev["queryStringParameters"] is None
    assert ev["multiValueQueryStringParameters"] is None
    assert ev["body"] is None
    assert ev["isBase64Encoded"] is False


def test_event_carries_headers_and_request_context(gateway):
    resp = requests.get(
        f"{gateway.url}/v1/echo/x", headers={"X-Thing": "1", "Idempotency-Key": "k1"}, timeout=10
    )
    ev = event_of(resp)
    assert ev["headers"]["X-Thing"] == "1"
    assert ev["multiValueHeaders"]["Idempotency-Key"] == ["k1"]
    ctx = ev["requestContext"]
    assert ctx["resourcePath"] == "/v1/echo/{name}"
    assert ctx["httpMethod"] == "GET"
    assert ctx["identity"]["sourceIp"] == "127.0.0.1"
    assert ctx["requestId"] == resp.headers["x-amzn-RequestId"]
    assert "authorizer" not in ctx  # a public route has no authorizer
    # And the Lambda context counts down from the integration timeout
    assert 0 < resp.json()["remaining_ms"] <= 2000


def test_handler_headers_and_multi_value_headers_reach_the_client(gateway):
    resp = requests.get(f"{gateway.url}/v1/echo/x", timeout=10)
    assert resp.headers["X-Echo"] == "yes"
    assert resp.headers["X-Multi"] == "a, b"


# --- limits and errors ---------------------------------------------------------------------------


def test_body_over_10_mb_is_refused_with_413_before_any_handler(gateway, authorizer):
    # Given a body one byte over API Gateway's 10 MB limit
    body = b"x" * (10 * 1024 * 1024 + 1)
    # When it is posted
    resp = requests.post(
        f"{gateway.url}/v1/raw",
        data=body,
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    # Then the gateway answers 413 itself
    assert resp.status_code == 413
    assert resp.json() == {"message": "Request Too Long"}
    # And the connection still serves the next request
    assert requests.get(f"{gateway.url}/v1/echo/x", timeout=10).status_code == 200


def test_event_over_lambdas_6_mb_payload_limit_is_refused(gateway):
    # Given a 5 MB binary body: under 10 MB, but base64 in the event makes it ~6.7 MB
    body = os.urandom(5 * 1024 * 1024)
    resp = requests.post(
        f"{gateway.url}/v1/raw",
        data=body,
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    # Then it cannot reach Lambda, as in AWS
    assert resp.status_code == 413


def test_unknown_route_and_unknown_method_get_missing_authentication_token(gateway):
    for resp in (
        requests.get(f"{gateway.url}/v1/nowhere", timeout=10),
        requests.delete(f"{gateway.url}/v1/echo/x", timeout=10),
    ):
        assert resp.status_code == 403
        assert resp.json() == {"message": "Missing Authentication Token"}


@pytest.mark.parametrize("method", ["TRACE", "QUERY", "CONNECT", "PROPFIND", "BREW"])
def test_any_method_without_a_route_is_missing_authentication_token(gateway, method):
    # Given a method this server has no handler for (http.server would answer 501 HTML)
    resp = requests.request(method, f"{gateway.url}/v1/echo/x", timeout=10)
    # Then it is API Gateway's answer, in JSON
    assert resp.status_code == 403
    assert resp.json() == {"message": "Missing Authentication Token"}
    assert resp.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def test_an_encoded_slash_stays_inside_its_path_parameter(gateway):
    resp = requests.get(f"{gateway.url}/v1/echo/a%2Fb", timeout=10)
    assert event_of(resp)["pathParameters"] == {"name": "a/b"}


def test_handler_exception_is_502_without_details(gateway):
    resp = requests.get(f"{gateway.url}/v1/boom", timeout=10)
    assert resp.status_code == 502
    assert resp.json() == {"message": "Internal server error"}
    assert "hunter2" not in resp.text


def test_malformed_proxy_response_is_502(gateway):
    resp = requests.get(f"{gateway.url}/v1/malformed", timeout=10)
    assert resp.status_code == 502
    assert resp.json() == {"message": "Internal server error"}


def test_handler_past_the_integration_timeout_is_504(gateway):
    # Given a gateway whose integration timeout is 2 s (29 s in AWS)
    started = time.monotonic()
    resp = requests.get(f"{gateway.url}/v1/slow?s=5", timeout=10)
    elapsed = time.monotonic() - started
    # Then the caller gets 504 at the timeout, not when the handler finishes
    assert resp.status_code == 504
    assert resp.json() == {"message": "Endpoint request timed out"}
    assert 1.9 < elapsed < 4.0


def test_default_timeout_is_api_gateways_29_seconds(authorizer):
    gateway = LocalGateway(routes=TEST_ROUTES, functions=FUNCTIONS, authorizer=authorizer)
    assert gateway.timeout_s == 29
    assert gateway.max_body_bytes == 10 * 1024 * 1024


def test_slow_requests_do_not_block_each_other(gateway):
    # Given four requests that each take 1 s in the handler
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        statuses = list(
            pool.map(
                lambda _: requests.get(f"{gateway.url}/v1/slow?s=1", timeout=10).status_code,
                range(4),
            )
        )
    # Then they ran side by side
    assert statuses == [200] * 4
    assert time.monotonic() - started < 2.5


# --- authorizer ----------------------------------------------------------------------------------


def test_missing_authorization_is_401_without_calling_the_authorizer(gateway, authorizer):
    resp = requests.get(f"{gateway.url}/v1/namespaces/dev/thing", timeout=10)
    assert resp.status_code == 401
    assert resp.json() == {"message": "Unauthorized"}
    assert authorizer.calls == []


def test_authorizer_unauthorized_is_401(gateway):
    resp = requests.get(
        f"{gateway.url}/v1/namespaces/dev/thing",
        headers={"Authorization": "Bearer bad"},
        timeout=10,
    )
    assert resp.status_code == 401
    assert resp.json() == {"message": "Unauthorized"}


def test_explicit_deny_is_403(gateway):
    resp = requests.get(
        f"{gateway.url}/v1/namespaces/dev/thing",
        headers={"Authorization": "Bearer deny"},
        timeout=10,
    )
    assert resp.status_code == 403
    assert resp.json() == {
        "message": "User is not authorized to access this resource with an explicit deny"
    }


def test_authorizer_crash_is_the_configured_503(gateway):
    # When the authorizer raises
    resp = requests.get(
        f"{gateway.url}/v1/namespaces/dev/thing",
        headers={"Authorization": "Bearer crash"},
        timeout=10,
    )
    # Then the answer is the stack's AUTHORIZER_FAILURE / AUTHORIZER_CONFIGURATION_ERROR gateway
    # response (infra/api.py): 503, Retry-After, the wire's error body
    assert resp.status_code == 503
    assert resp.headers["x-amzn-ErrorType"] == "AuthorizerConfigurationException"
    assert resp.headers["Retry-After"] == "5"
    assert resp.json()["error"]["code"] == "token_store_unavailable"


def test_allow_passes_the_authorizer_context_to_the_handler(gateway, authorizer):
    # When an allowed token calls a protected route
    resp = requests.get(
        f"{gateway.url}/v1/namespaces/dev/thing?x=1",
        headers={"Authorization": "Bearer allow-dev"},
        timeout=10,
    )
    # Then the handler reads namespace, role and token id from requestContext.authorizer
    ev = event_of(resp)
    assert ev["requestContext"]["authorizer"] == {
        "namespace": "dev",
        "role": "client",
        "token_id": "abc123",
        "principalId": "abc123",
    }
    # And the authorizer got a REQUEST event for this method ARN
    (call,) = authorizer.calls
    assert call["type"] == "REQUEST"
    assert call["methodArn"].endswith("/local/GET/v1/namespaces/dev/thing")
    assert call["pathParameters"] == {"ns": "dev"}
    assert call["queryStringParameters"] == {"x": "1"}


def test_cached_authorizer_result_is_reused_and_reevaluated_per_route(authorizer):
    # Given a gateway caching authorizer results (as API Gateway does, 300 s by default)
    running = start(authorizer, authorizer_cache_s=60)
    try:
        wide = {"Authorization": "Bearer allow-dev"}
        narrow = {"Authorization": "Bearer narrow-dev"}
        # When one token calls two routes
        assert (
            requests.get(
                f"{running.url}/v1/namespaces/dev/thing", headers=wide, timeout=10
            ).status_code
            == 200
        )
        assert (
            requests.get(
                f"{running.url}/v1/namespaces/dev/other", headers=wide, timeout=10
            ).status_code
            == 200
        )
        # Then the authorizer ran once for it
        assert len(authorizer.calls) == 1
        # And a policy naming only the first method ARN denies the second route from the cache,
        # which is why an authorizer behind a cache must allow the whole API
        assert (
            requests.get(
                f"{running.url}/v1/namespaces/dev/thing", headers=narrow, timeout=10
            ).status_code
            == 200
        )
        resp = requests.get(f"{running.url}/v1/namespaces/dev/other", headers=narrow, timeout=10)
        assert resp.status_code == 403
        assert resp.json() == {"message": "User is not authorized to access this resource"}
    finally:
        running.stop()


def test_port_taken_is_a_clear_error(authorizer):
    from payloadstore_devstack.gateway import PortInUseError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port}.*PAYLOADSTORE_PORT"):
            serve_in_thread(
                LocalGateway(routes=TEST_ROUTES, functions=FUNCTIONS, authorizer=authorizer),
                "127.0.0.1",
                port,
            )


# --- response compression (API Gateway's minimumCompressionSize) -------------------------------


def raw_answer(url: str, accept_encoding: str) -> tuple[requests.Response, bytes]:
    """The answer and its body exactly as it crossed the wire (not decoded)."""
    resp = requests.get(url, headers={"Accept-Encoding": accept_encoding}, stream=True, timeout=10)
    return resp, resp.raw.read(decode_content=False)


def test_a_large_answer_is_gzipped_for_a_client_that_accepts_gzip(gateway):
    # Given an answer over the compression threshold (the echoed event is a few KB of JSON)
    url = f"{gateway.url}/v1/echo/x"
    plain, plain_body = raw_answer(url, "identity")
    assert len(plain_body) >= MIN_COMPRESSION_BYTES
    # When a client that accepts gzip asks for it
    packed, packed_body = raw_answer(url, "gzip, deflate")
    # Then it crosses the wire gzipped, smaller, and decodes to the same JSON
    assert packed.headers["Content-Encoding"] == "gzip"
    assert int(packed.headers["Content-Length"]) == len(packed_body) < len(plain_body)
    assert json.loads(gzip.decompress(packed_body))["event"]["path"] == "/v1/echo/x"
    # And a client that does not accept it gets the plain body
    assert "Content-Encoding" not in plain.headers
    assert json.loads(plain_body)["event"]["path"] == "/v1/echo/x"


def test_deflate_is_used_when_gzip_is_refused(gateway):
    resp, body = raw_answer(f"{gateway.url}/v1/echo/x", "gzip;q=0, deflate")
    assert resp.headers["Content-Encoding"] == "deflate"
    assert json.loads(zlib.decompress(body))["event"]["path"] == "/v1/echo/x"


def test_an_answer_under_the_threshold_is_sent_as_it_is(gateway):
    # Given API Gateway's own small answer (an unknown route)
    resp, body = raw_answer(f"{gateway.url}/v1/nowhere", "gzip")
    # Then it is not compressed
    assert resp.status_code == 403
    assert "Content-Encoding" not in resp.headers
    assert json.loads(body) == {"message": "Missing Authentication Token"}
