"""The asyncio transport of the wire layer shares routes, parsers, error mapping and retry
decisions with the sync one; only the socket and the sleep differ."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import pytest

from payloadstore import (
    InlineUnavailable,
    JobNotFound,
    PayloadConsumed,
    RetryPolicy,
    ServiceUnavailable,
)
from payloadstore._async_wire import AsyncWire
from payloadstore._wire import Enqueued, Wire
from payloadstore._wire.routes import Routes


def async_wire(handler, sleeps: list, **kw) -> AsyncWire:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return AsyncWire(
        "http://cp.test",
        "pst_x",
        "team",
        http=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        sleep=sleep,
        **kw,
    )


def test_given_every_route_of_the_sync_wire_then_the_async_wire_has_it_with_the_same_arguments():
    # Given: one wire of each kind
    sync = Wire("http://cp.test", "t", "team", http=httpx.Client())
    asyn = AsyncWire("http://cp.test", "t", "team", http=httpx.AsyncClient())
    names = [name for name in dir(Routes) if not name.startswith("_")]
    # When/Then: each route (one table, `_wire.routes.Routes`) answers on the sync wire and is
    # awaited on the async one, with the builder's arguments but the namespace
    assert "enqueue_inline" in names and "queue_list" in names and "poll" in names
    for name in names:
        on_sync, on_async = getattr(sync, name), getattr(asyn, name)
        assert not inspect.iscoroutinefunction(on_sync), name
        assert inspect.iscoroutinefunction(on_async), name
        parameters = list(inspect.signature(on_sync).parameters)
        assert parameters == list(inspect.signature(on_async).parameters), name
        assert "namespace" not in parameters, name


def test_given_a_dropped_connection_and_a_503_when_enqueueing_async_then_retried_with_the_same_key():
    seen: list[httpx.Request] = []
    answers = [
        httpx.ConnectError("refused"),
        httpx.Response(503, json={"error": {"code": "redis_memory_full", "message": "full"}}),
        httpx.Response(201, json={"job_id": "J1", "tier": "inline"}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sleeps: list[float] = []
    answer = asyncio.run(
        async_wire(handler, sleeps).enqueue_inline("q", b"\x01", idempotency_key="k-1")
    )
    assert answer == Enqueued("J1", "inline", created=True)
    assert [r.headers["idempotency-key"] for r in seen] == ["k-1"] * 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    ("status", "code", "call", "expected"),
    [
        (404, "not_found", lambda w: w.job_status("J9"), JobNotFound),
        (503, "inline_unavailable", lambda w: w.post_result("J1", inline=b"x"), InlineUnavailable),
        (410, "result_consumed", lambda w: w.job_result("J1", wait_s=0), PayloadConsumed),
        (410, "arguments_consumed", lambda w: w.presign_get("k0", job_id="J1"), PayloadConsumed),
    ],
)
def test_given_an_error_code_when_sent_async_then_the_same_typed_error_as_sync(
    status, code, call, expected
):
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, json={"error": {"code": code, "message": "m"}})

    with pytest.raises(expected) as info:
        asyncio.run(call(async_wire(handler, [])))
    assert info.value.code == code and len(calls) == 1


def test_given_an_unreachable_control_plane_when_retries_run_out_async_then_service_unavailable():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    sleeps: list[float] = []
    with pytest.raises(ServiceUnavailable, match="cannot reach the control plane"):
        asyncio.run(async_wire(handler, sleeps, retry=RetryPolicy(max_attempts=3)).config())
    assert len(sleeps) == 2


def test_given_max_jobs_when_polling_async_then_the_jobs_list_is_polled_jobs():
    import json

    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            200, json={"jobs": [{"job_id": "J1", "lease": "l1", "payloadInline": "AQ=="}]}
        )

    wire = async_wire(handler, [])
    jobs = asyncio.run(wire.poll(["q"], wait_s=0, daemon_id="d", max_jobs=2))
    assert [(j.job_id, j.lease, j.payload_inline) for j in jobs] == [("J1", "l1", b"\x01")]
    assert bodies[0]["max_jobs"] == 2


def test_given_the_route_methods_when_inspected_then_they_show_the_answer_not_the_call():
    # Given: one wire of each kind
    sync = Wire("http://cp.test", "t", "team", http=httpx.Client())
    asyn = AsyncWire("http://cp.test", "t", "team", http=httpx.AsyncClient())
    names = [name for name in dir(Routes) if not name.startswith("_")]
    for name in names:
        # When: help() or an IDE reads a route method's signature
        shown = {str(inspect.signature(getattr(w, name)).return_annotation) for w in (sync, asyn)}
        # Then: what the method answers (as the methods written out did), on both wires alike
        assert len(shown) == 1, name
        (returned,) = shown
        assert "Call[" not in returned and "Conversation[" not in returned, (name, returned)
    answers = {
        "cancel_job": "CancelAnswer",
        "queue_list": "list[QueueInfo]",
        "config": "ServerConfig",
        "poll": "PolledJob | None | list[PolledJob]",
        "blob": "dict[str, Any]",
    }
    for name, answer in answers.items():
        assert inspect.signature(getattr(sync, name)).return_annotation == answer, name
