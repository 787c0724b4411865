"""Retries, backoff and error mapping of the SDK's control-plane transport (httpx.MockTransport)."""

from __future__ import annotations

import httpx
import pytest

from payloadstore import (
    AuthError,
    ConflictError,
    InvalidRequest,
    PayloadTooLarge,
    RetryPolicy,
    ServiceUnavailable,
    _wire,
)
from payloadstore._http import retry_after_seconds


class Session:
    """A `Wire` whose `request(method, path, what)` sends a generic call (JSON answer)."""

    def __init__(self, wire: _wire.Wire):
        self.wire = wire

    def request(self, method: str, path: str, what: str, **kw) -> httpx.Response:
        call = _wire.Call(method, path, what, lambda response: response, **kw)
        return self.wire.send(call)


def session(handler, sleeps: list, **kw) -> Session:
    return Session(
        _wire.Wire(
            "http://cp.test/",
            "pst_x",
            "ns",
            http=httpx.Client(transport=httpx.MockTransport(handler)),
            sleep=sleeps.append,
            **kw,
        )
    )


def scripted(*steps):
    """A handler answering each request with the next step (a status, a Response or an exception)."""
    calls: list[httpx.Request] = []
    remaining = list(steps)

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        step = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return step
        return httpx.Response(
            step,
            json={"error": {"code": f"c{step}", "message": f"m{step}"}}
            if step >= 400
            else {"ok": True},
        )

    return handler, calls


def test_given_two_503s_when_requesting_then_it_retries_and_returns_the_success():
    # Given
    handler, calls = scripted(503, 503, 200)
    sleeps: list[float] = []
    # When
    response = session(handler, sleeps).request("GET", "/v1/config", "read config")
    # Then
    assert response.json() == {"ok": True}
    assert len(calls) == 3
    assert len(sleeps) == 2
    assert all(c.headers["authorization"] == "Bearer pst_x" for c in calls)


def test_given_connection_errors_when_requesting_then_it_retries_until_connected():
    handler, calls = scripted(httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 200)
    sleeps: list[float] = []
    assert session(handler, sleeps).request("GET", "/v1/config", "read config").status_code == 200
    assert len(calls) == 3


def test_given_a_server_that_stays_down_when_retries_run_out_then_service_unavailable_chained_from_http_error():
    handler, calls = scripted(502)
    sleeps: list[float] = []
    with pytest.raises(ServiceUnavailable) as info:
        session(handler, sleeps, retry=RetryPolicy(max_attempts=4)).request(
            "GET", "/v1/config", "read config"
        )
    assert len(calls) == 4 and len(sleeps) == 3
    assert isinstance(info.value.__cause__, httpx.HTTPStatusError)
    assert info.value.status == 502 and "m502" in str(info.value)


def test_given_an_unreachable_endpoint_when_retries_run_out_then_service_unavailable_chained_from_transport_error():
    handler, calls = scripted(httpx.ConnectError("connection refused"))
    with pytest.raises(ServiceUnavailable) as info:
        session(handler, [], retry=RetryPolicy(max_attempts=3)).request(
            "GET", "/v1/config", "read config"
        )
    assert len(calls) == 3
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert "cp.test" in str(info.value)


def test_given_retry_after_when_429_then_the_wait_honours_it():
    handler, _ = scripted(httpx.Response(429, headers={"Retry-After": "3"}, json={}), 200)
    sleeps: list[float] = []
    session(handler, sleeps).request("GET", "/v1/config", "read config")
    assert 3.0 <= sleeps[0] <= 3.5


def test_given_the_presign_cap_when_429_too_many_presigns_then_it_is_not_retried():
    handler, calls = scripted(
        httpx.Response(429, json={"error": {"code": "too_many_presigns", "message": "5 presigns"}})
    )
    with pytest.raises(ServiceUnavailable, match="5 presigns"):
        session(handler, []).request(
            "POST", "/v1/namespaces/ns/payloads/presign", "presign args upload"
        )
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("status", "what", "error"),
    [
        (401, "read config", AuthError),
        (403, "read config", AuthError),
        (409, "enqueue on queue q", ConflictError),
        (413, "presign args upload", PayloadTooLarge),
        (422, "enqueue on queue q", InvalidRequest),
        (400, "enqueue on queue q", InvalidRequest),
    ],
)
def test_given_a_client_error_when_requesting_then_it_raises_the_typed_error_once(
    status, what, error
):
    handler, calls = scripted(status)
    with pytest.raises(error) as info:
        session(handler, []).request("GET", "/x", what)
    assert len(calls) == 1, "4xx other than 429 is never retried"
    assert info.value.status == status
    assert info.value.code == f"c{status}"
    assert f"m{status}" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.HTTPStatusError)


def test_given_a_non_json_error_body_when_mapping_then_the_text_is_the_message():
    handler, _ = scripted(httpx.Response(403, text="Forbidden by gateway"))
    with pytest.raises(AuthError, match="Forbidden by gateway"):
        session(handler, []).request("GET", "/x", "read config")


def test_backoff_is_full_jitter_under_an_exponential_cap():
    policy = RetryPolicy(base_s=0.5, max_backoff_s=4.0)
    assert policy.backoff(0, rng=lambda: 1.0) == 0.5
    assert policy.backoff(2, rng=lambda: 1.0) == 2.0
    assert policy.backoff(10, rng=lambda: 1.0) == 4.0
    assert policy.backoff(3, rng=lambda: 0.0) == 0.0
    assert all(0 <= policy.backoff(3) <= 4.0 for _ in range(200))


def test_retry_after_accepts_seconds_and_http_dates():
    assert retry_after_seconds(httpx.Response(503, headers={"Retry-After": "7"})) == 7.0
    assert (
        retry_after_seconds(
            httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
        )
        == 0.0
    )
    assert retry_after_seconds(httpx.Response(503)) is None


def throttled_by_api_gateway() -> httpx.Response:
    # API Gateway's answer when Lambda throttles a proxy integration (the function is at its
    # reserved concurrency): 500 and the generic body, no error code of ours.
    return httpx.Response(
        500,
        headers={"x-amzn-ErrorType": "InternalServerErrorException"},
        json={"message": "Internal server error"},
    )


def test_given_a_throttled_poll_when_polling_then_it_backs_off_exponentially_and_gets_the_answer():
    # Given the daemon function throttled for three attempts, then answering
    handler, calls = scripted(
        throttled_by_api_gateway(), throttled_by_api_gateway(), throttled_by_api_gateway(), 200
    )
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=5, base_s=0.2, max_backoff_s=5.0)
    # When a daemon polls
    response = session(handler, sleeps, retry=policy).request("POST", "/v1/daemon/poll", "poll")
    # Then it waited with full jitter under 0.2, 0.4, 0.8 s between attempts and got the answer
    assert response.status_code == 200
    assert len(calls) == 4 and len(sleeps) == 3
    assert all(0.0 <= s <= 0.2 * 2**n for n, s in enumerate(sleeps))


def test_given_a_poll_throttled_throughout_when_retries_run_out_then_service_unavailable():
    # Given a daemon function that stays at its cap, Then the call ends in ServiceUnavailable
    # (which the Daemon's poll loop backs off on in turn) after max_attempts, not a tight loop
    handler, calls = scripted(throttled_by_api_gateway())
    sleeps: list[float] = []
    with pytest.raises(ServiceUnavailable, match="Internal server error"):
        session(handler, sleeps, retry=RetryPolicy(max_attempts=3)).request(
            "POST", "/v1/daemon/poll", "poll"
        )
    assert len(calls) == 3 and len(sleeps) == 2
