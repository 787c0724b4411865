"""The resolver's response builder decides compression as Powertools' does, reading the
request's headers only when the route or the response asks for compression (handlers/_resolver.py)."""

from __future__ import annotations

import pytest
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from payloadstore_controlplane.handlers._resolver import PayloadStoreResolver, _ResponseBuilder


def _event(accept: str) -> APIGatewayProxyEvent:
    return APIGatewayProxyEvent(
        {"headers": {"Accept-Encoding": accept}, "multiValueHeaders": {"Accept-Encoding": [accept]}}
    )


@pytest.mark.parametrize("route", [False, True])
@pytest.mark.parametrize("response", [None, False, True])
@pytest.mark.parametrize("accept", ["gzip, deflate", "identity"])
def test_compression_is_decided_as_powertools_decides(route, response, accept):
    # Given a request accepting (or not) gzip, a route and a response asking (or not) for it
    event = _event(accept)
    # Then ours decides as Powertools does, in every combination
    assert _ResponseBuilder._has_compression_enabled(route, response, event) == (
        ResponseBuilder._has_compression_enabled(route, response, event)
    )


def test_headers_are_not_read_when_nothing_asks_for_compression():
    # Given a route and a response that do not ask for compression, and no event to read
    # Then the answer is "no compression" without touching the request
    assert _ResponseBuilder._has_compression_enabled(False, None, None) is False
    assert _ResponseBuilder._has_compression_enabled(False, False, None) is False


def test_the_resolver_builds_its_answers_with_it():
    assert PayloadStoreResolver()._response_builder_class is _ResponseBuilder
