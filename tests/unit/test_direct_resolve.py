"""The resolver's direct path (handlers/_direct.py) answers exactly as Powertools' middleware
chain does: for every route of every API function, the same request is answered both ways with
the route's function replaced by a recorder, and the arguments it received and the proxy answers
are compared; requests the direct path must not take (invalid parameters or bodies, bodies it
did not parse as Powertools would) are left to the chain, untouched."""

from __future__ import annotations

import base64
import copy
import importlib
import importlib.util
import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from payloadstore_controlplane import routes
from payloadstore_controlplane.handlers._requests import checked_body
from payloadstore_controlplane.handlers._resolver import PayloadStoreResolver
from payloadstore_controlplane.handlers._responses import (
    empty_response,
    json_response,
    json_text_response,
)
from payloadstore_controlplane.handlers._routing import powertools_path
from payloadstore_controlplane.models.api import EnqueueResponse, PollResponse, ResultResponse
from payloadstore_controlplane.models.domain import JobStatus, Tier
from payloadstore_controlplane.models.errors import NotFound
from tests.support.events import FakeLambdaContext

EVENTS = Path(__file__).resolve().parents[2] / "events"
JOB = "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"
API_ROUTES = [r for r in routes.ROUTES if r.function in ("jobs", "daemon", "payloads", "public")]


def _generate():
    spec = importlib.util.spec_from_file_location("events_generate", EVENTS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generate()


def app_of(route: routes.Route) -> PayloadStoreResolver:
    module = importlib.import_module(routes.FUNCTIONS[route.function].rsplit(".", 1)[0])
    return module.app


def powertools_route(app, route: routes.Route):
    path = powertools_path(route.path)
    return next(
        r
        for r in app._static_routes + app._dynamic_routes
        if (r.method, r.path) == (route.method, path)
    )


@contextmanager
def recorded(app, route: routes.Route, answer):
    """The route's function replaced by one that records its arguments and answers `answer()`
    (or raises what it gives); the chain is rebuilt around it, and again after."""
    pt = powertools_route(app, route)
    calls: list[dict] = []
    original, original_name = pt.func, pt.func.__name__

    def recorder(**kwargs):
        calls.append(kwargs)
        out = answer()
        if isinstance(out, BaseException):
            raise out
        return out

    # Powertools reads the parameters from the function once, and keeps them on the route: read
    # them from the real one first (the recorder takes them all as **kwargs).
    assert pt.dependant is not None and pt.has_dependencies is False
    recorder.__name__ = original_name
    pt.func = pt._middleware_stack = recorder  # the chain is built around _middleware_stack
    pt._middleware_stack_built = False
    app._direct_plans.pop(pt, None)
    try:
        yield calls
    finally:
        pt.func = pt._middleware_stack = original
        pt._middleware_stack_built = False
        app._direct_plans.pop(pt, None)


@contextmanager
def chain_only(app):
    """Powertools' middleware chain answers every request (the direct path off)."""
    app._resolve_direct = lambda event, context: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        del app._resolve_direct


def both_ways(app, route, event, answer):
    """(direct answer, chain answer, arguments the function got each way)."""
    with recorded(app, route, answer) as direct_calls:
        direct = app.resolve(copy.deepcopy(event), FakeLambdaContext())
    with recorded(app, route, answer) as chain_calls, chain_only(app):
        chain = app.resolve(copy.deepcopy(event), FakeLambdaContext())
    return direct, chain, direct_calls, chain_calls


def taken_directly(app, event) -> bool:
    """Whether the direct path answers this request (nothing else is run to find out)."""
    event = copy.deepcopy(event)
    refused, app.parsed_json = checked_body(event)
    assert refused is None
    try:
        return app._resolve_direct(event, FakeLambdaContext()) is not None
    finally:
        app.clear_context()


def sample_event(route: routes.Route) -> dict:
    return json.loads((EVENTS / f"{route.event}.json").read_text())


def canned(route: routes.Route):
    """A valid answer of the route's kind: its declared model where it declares one."""
    if route is routes.ENQUEUE:
        return lambda: json_response(201, EnqueueResponse(job_id=JOB, tier=Tier.INLINE))
    if route is routes.RESULT_GET:
        return lambda: json_response(
            200,
            ResultResponse(
                job_id=JOB,
                state=JobStatus.SUCCEEDED,
                resultInline=base64.b64encode(b"\x03").decode(),
            ),
        )
    if route is routes.POLL:
        return lambda: json_text_response(
            200,
            PollResponse(
                job_id=JOB,
                namespace="dev",
                queue="default",
                attempt=1,
                lease="l" * 22,
                lease_expires_at=1_800_000_000.0,
                lease_expires_in_s=300.0,
                payloadInline=base64.b64encode(b"\x90").decode(),
            ),
        )
    if route is routes.RESULT_POST:
        return lambda: empty_response(204)
    return lambda: NotFound(f"job {JOB} not found")


@pytest.mark.parametrize("route", API_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_given_a_sample_request_when_answered_directly_then_the_answer_is_the_chains(route):
    # Given the route's sample request and a function that answers the same way both times
    app, event = app_of(route), sample_event(route)
    with recorded(app, route, canned(route)):
        assert taken_directly(app, event)  # a plain valid request: the direct path takes it
    for answer in (canned(route), lambda: NotFound("nothing here"), lambda: RuntimeError("boom")):
        # When the request is answered directly and through Powertools' chain
        direct, chain, direct_calls, chain_calls = both_ways(app, route, event, answer)
        # Then the function got the same arguments, and the answers are the same
        assert direct_calls == chain_calls
        assert direct == chain


def test_given_the_hot_routes_when_resolved_then_each_is_taken_directly():
    # Given the four calls of a small job's life
    for route in (routes.ENQUEUE, routes.POLL, routes.RESULT_POST, routes.RESULT_GET):
        app = app_of(route)
        # When its sample request is resolved
        with recorded(app, route, canned(route)) as calls:
            # Then it goes the direct way: a plan exists and the function ran once
            assert taken_directly(app, sample_event(route)), route.path
            assert app._direct_plans[powertools_route(app, route)] is not None
            assert len(calls) == 1


def _result_get(query):
    return gen.event(
        "GET",
        routes.RESULT_GET.path,
        {"ns": "dev", "job_id": JOB},
        query=query,
    )


def _poll(body, headers=None):
    return gen.event("POST", routes.POLL.path, None, role="daemon", body=body, headers=headers)


VALID_POLL = {"namespace": "dev", "queues": ["default"], "wait_s": 1, "daemon_id": "d-1"}

# Requests with something for validation to say about: the chain answers each (its 422).
NOT_DIRECT_REQUESTS = {
    "wait not a number": (routes.RESULT_GET, _result_get({"wait": "soon"})),
    "wait above its cap": (routes.RESULT_GET, _result_get({"wait": "61"})),
    "wait negative": (routes.RESULT_GET, _result_get({"wait": "-1"})),
    "poll without queues": (routes.POLL, _poll({"namespace": "dev", "wait_s": 1})),
    "poll with queues of the wrong type": (routes.POLL, _poll({**VALID_POLL, "queues": "q"})),
    "poll body a list": (routes.POLL, {**_poll(VALID_POLL), "body": "[1, 2]"}),
    "poll body with a byte order mark": (
        routes.POLL,
        {**_poll(VALID_POLL), "body": "\ufeff" + json.dumps(VALID_POLL)},
    ),
    "poll body base64": (
        routes.POLL,
        {
            **_poll(VALID_POLL),
            "body": base64.b64encode(json.dumps(VALID_POLL).encode()).decode(),
            "isBase64Encoded": True,
        },
    ),
    "result post without a lease type": (
        routes.RESULT_POST,
        gen.event(
            "POST",
            routes.RESULT_POST.path,
            {"ns": "dev", "job_id": JOB},
            role="daemon",
            body={"resultInline": 3, "lease": ["x"]},
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(NOT_DIRECT_REQUESTS))
def test_given_a_request_validation_refuses_when_resolved_then_the_chain_answers_it(name):
    # Given a request whose parameters or body do not validate (or were not parsed as
    # Powertools parses them)
    route, event = NOT_DIRECT_REQUESTS[name]
    app = app_of(route)
    with recorded(app, route, canned(route)) as calls:
        # When the direct path is asked
        # Then it leaves the request alone, having run nothing
        assert not taken_directly(app, event)
        assert calls == []
    # And the answer is the chain's, whichever way resolve() goes
    direct, chain, direct_calls, chain_calls = both_ways(app, route, event, canned(route))
    assert direct == chain and direct_calls == chain_calls


@pytest.mark.parametrize(
    "query",
    [None, {"wait": "0"}, {"wait": "2.5"}, {"wait": "60"}, {"wait": "7", "other": "x"}],
    ids=str,
)
def test_given_valid_wait_values_when_answered_directly_then_the_function_gets_the_chains_value(
    query,
):
    # Given a result long-poll with a valid wait (or none)
    app, event = app_of(routes.RESULT_GET), _result_get(query)
    # When answered both ways
    direct, chain, direct_calls, chain_calls = both_ways(
        app, routes.RESULT_GET, event, canned(routes.RESULT_GET)
    )
    # Then the direct path took it, with the same arguments and answer
    with recorded(app, routes.RESULT_GET, canned(routes.RESULT_GET)):
        assert taken_directly(app, event)
    assert direct_calls == chain_calls and len(direct_calls) == 1
    assert direct == chain


def test_given_a_repeated_query_parameter_when_answered_then_both_ways_agree():
    # Given ?wait=1&wait=2 as API Gateway sends it (single-value map holds the last)
    event = _result_get({"wait": "2"})
    event["multiValueQueryStringParameters"] = {"wait": ["1", "2"]}
    app = app_of(routes.RESULT_GET)
    # When answered both ways
    direct, chain, direct_calls, chain_calls = both_ways(
        app, routes.RESULT_GET, event, canned(routes.RESULT_GET)
    )
    # Then the same
    assert direct == chain and direct_calls == chain_calls


@pytest.mark.parametrize(
    "body",
    [json.dumps([VALID_POLL]), "null", json.dumps({**VALID_POLL, "max_jobs": 3})],
    ids=["a list holding the body", "null", "with max_jobs"],
)
def test_given_odd_but_parsable_poll_bodies_when_answered_then_both_ways_agree(body):
    # Given a poll body Powertools reads in its own way (a list: its first item; null: missing)
    event = {**_poll(VALID_POLL), "body": body}
    app = app_of(routes.POLL)
    # When answered directly and through the chain
    direct, chain, direct_calls, chain_calls = both_ways(
        app, routes.POLL, event, canned(routes.POLL)
    )
    # Then the function got the same arguments (or none), and the answers are the same
    assert direct_calls == chain_calls
    assert direct == chain
