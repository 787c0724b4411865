"""routes.py is the only place a path is written: each handler function is registered with
`@route(app, routes.X)` (payloadstore_controlplane/handlers/_routing.py), at the route's path and method."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from payloadstore_controlplane import routes
from payloadstore_controlplane.handlers._routing import powertools_path, route
from payloadstore_controlplane.logic.context import Principal

HANDLERS = Path(routes.__file__).parent / "handlers"
API_FUNCTIONS = sorted({r.function for r in routes.ROUTES})


def registered(function: str) -> list[tuple[str, str, object]]:
    module = importlib.import_module(routes.FUNCTIONS[function].rsplit(".", 1)[0])
    app = module.app
    return [(r.method, r.rule.pattern, r.func) for r in app._static_routes + app._dynamic_routes]


def test_given_the_route_table_when_the_functions_load_then_each_serves_exactly_its_routes():
    # Given the route table
    for function in API_FUNCTIONS:
        # When the function's module has registered its handlers
        served = sorted((method, pattern) for method, pattern, _ in registered(function))
        # Then it serves its routes, at their paths in Powertools' form, and nothing else
        expected = sorted(
            (r.method, _pattern(r.method, powertools_path(r.path), function))
            for r in routes.ROUTES
            if r.function == function
        )
        assert served == expected, function


def _pattern(method: str, rule: str, function: str) -> str:
    module = importlib.import_module(routes.FUNCTIONS[function].rsplit(".", 1)[0])
    return module.app._compile_regex(rule).pattern


def test_given_a_guarded_route_when_registered_then_powertools_sees_no_principal_parameter():
    # Given every function registered for a route behind the authorizer
    for function in API_FUNCTIONS:
        for _, _, func in registered(function):
            params = inspect.signature(func).parameters.values()
            # Then Powertools is not asked to fill a Principal from the request
            assert all(p.annotation is not Principal for p in params), func


def test_given_the_handler_modules_when_read_then_none_writes_a_path():
    # Given the source of every handler module
    for source in HANDLERS.glob("*.py"):
        text = source.read_text()
        # Then no path of the API is written there (routes.py holds them all)
        for r in routes.ROUTES:
            assert r.path not in text, (source.name, r.path)
            assert powertools_path(r.path) not in text, (source.name, r.path)
        assert "/v1/" not in text, source.name


def test_given_a_public_route_when_its_function_asks_for_a_principal_then_it_is_refused():
    # Given a resolver and the public health route
    from payloadstore_controlplane.handlers._resolver import new_resolver

    app = new_resolver()

    # When a function asking for the caller is registered for it
    # Then registration fails: no authorizer saw a caller
    with pytest.raises(TypeError, match="public"):

        @route(app, routes.HEALTH)
        def health(p: Principal) -> dict:
            return {}


def test_given_a_guarded_route_when_called_then_the_caller_is_checked_and_passed_first():
    # Given a function registered for a namespaced client route
    from payloadstore_controlplane.handlers._resolver import new_resolver
    from tests.support.events import FakeLambdaContext, api_event

    app = new_resolver()
    seen: list[tuple[Principal, str]] = []

    @route(app, routes.QUEUE_LIST)
    def get_queues(p: Principal, ns: str) -> dict:
        seen.append((p, ns))
        return {}

    def call(namespace, role="client"):
        path = {"ns": "team-a"}
        event = api_event("GET", routes.QUEUE_LIST.path, path, namespace=namespace, role=role)
        return app.resolve(event, FakeLambdaContext())["statusCode"]

    # When the namespace's client token calls it, another namespace's, a role the route does
    # not serve and no authorizer context at all
    # Then only the first reaches the function, with the caller as its first argument
    assert call("team-a") == 200
    assert call("team-b") == 403
    assert call("team-a", role="other") == 403
    assert call(None) == 401
    assert [(p.namespace, p.role, ns) for p, ns in seen] == [("team-a", "client", "team-a")]
