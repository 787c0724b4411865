"""lambda_entry's per-invocation context, read without Powertools' JMESPath search: every log line
of an API Gateway invocation carries its request id as correlation_id (as
correlation_id_path=API_GATEWAY_REST gave it), and POWERTOOLS_METRICS_DISABLED is read once per
invocation and honoured by every metric of it."""

from __future__ import annotations

import io
import json

import jmespath
import pytest
from aws_lambda_powertools.logging import correlation_paths

from payloadstore_controlplane.observability import lambda_entry, logger, metrics_count
from tests.support.events import FakeLambdaContext


@pytest.fixture
def log_lines(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", stream)
    level = logger.log_level
    logger.setLevel("INFO")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.setLevel(level)


EVENTS = [
    {"requestContext": {"requestId": "req-1"}},
    {"requestContext": {"other": 1}},
    {"requestContext": None},
    {"requestContext": "not a map"},
    {},
]


@pytest.mark.parametrize("event", EVENTS, ids=[str(e) for e in EVENTS])
def test_given_an_event_when_its_invocation_logs_then_the_correlation_id_is_the_request_id(
    event, log_lines
):
    # Given a handler that logs one line
    @lambda_entry
    def handler(event, context):
        logger.info("hello")
        return {"statusCode": 200}

    # When invoked with the event
    context = FakeLambdaContext()
    handler(event, context)
    (line,) = log_lines()
    # Then its correlation_id is what Powertools' API Gateway REST path finds (absent: none)
    expected = jmespath.search(correlation_paths.API_GATEWAY_REST, event)
    assert line.get("correlation_id") == expected
    assert line["function_request_id"] == context.aws_request_id


@pytest.mark.parametrize("disabled", ["true", "false"])
def test_given_metrics_switched_when_an_invocation_emits_then_the_switch_is_honoured(
    disabled, capsys, monkeypatch
):
    # Given POWERTOOLS_METRICS_DISABLED set one way
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", disabled)

    @lambda_entry
    def handler(event, context):
        metrics_count("JobsEnqueued", 2, tier="inline")
        return {"statusCode": 200}

    # When an invocation emits a metric
    handler({}, FakeLambdaContext())
    lines = [ln for ln in capsys.readouterr().out.splitlines() if '"JobsEnqueued"' in ln]
    # Then it is printed only when metrics are on
    assert (len(lines) == 1) is (disabled == "false")
