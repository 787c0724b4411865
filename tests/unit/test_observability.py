"""EMF metrics by tier: printed as one JSON line each, unless metrics are disabled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from payloadstore_controlplane.observability import metrics_bytes
from tests.support.events import FakeLambdaContext

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def emf_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_payload_bytes_metric_carries_its_tier(capsys, monkeypatch):
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    metrics_bytes("PayloadBytes", 1024, tier="s3", kind="args")
    (line,) = emf_lines(capsys.readouterr().out)
    assert line["PayloadBytes"] == [1024.0] and line["tier"] == "s3" and line["kind"] == "args"
    assert line["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "PayloadStore"


def test_disabled_metrics_print_nothing(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics_bytes("PayloadBytes", 1024, tier="s3", kind="args")
    assert emf_lines(capsys.readouterr().out) == []


def test_disabled_metrics_print_no_cold_start_metric(capsys, monkeypatch):
    # Given metrics switched off and a fresh container (cold start)
    from aws_lambda_powertools.metrics.provider import cold_start

    from payloadstore_controlplane.observability import lambda_entry

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(cold_start, "is_cold_start", True)

    @lambda_entry
    def handler(event, context):
        return {"statusCode": 200}

    # When the first invocation runs
    assert handler({}, FakeLambdaContext())["statusCode"] == 200
    # Then no metric line at all is printed, ColdStart included
    assert emf_lines(capsys.readouterr().out) == []


def test_enabled_metrics_print_the_cold_start_metric(capsys, monkeypatch):
    # Given metrics on and a fresh container
    from aws_lambda_powertools.metrics.provider import cold_start

    from payloadstore_controlplane.observability import lambda_entry

    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    monkeypatch.setattr(cold_start, "is_cold_start", True)

    @lambda_entry
    def handler(event, context):
        return {"statusCode": 200}

    # When the first invocation runs, Then its ColdStart metric is printed once
    handler({}, FakeLambdaContext())
    lines = [line for line in emf_lines(capsys.readouterr().out) if "ColdStart" in line]
    assert len(lines) == 1 and lines[0]["function_name"] == "payloadstore-test"


def run_probe(code: str, **env: str) -> str:
    """What `code` prints in a fresh interpreter run from functions/, tracing off, with `env`."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "POWERTOOLS_TRACE_DISABLED": "true", **env},
        cwd=str(FUNCTIONS),
        check=True,
    )
    return out.stdout.strip()


HANDLER_IMPORT_PROBE = """
import sys
import payloadstore_controlplane.handlers.{module} as handler
heavy = [m for m in ("boto3", "aws_xray_sdk", "redis.asyncio.client", "s3transfer") if m in sys.modules]
print(",".join(heavy))
"""


@pytest.mark.parametrize("module", ["payloads", "jobs", "daemon", "public", "authorizer", "admin"])
def test_handlers_import_only_what_they_use(module):
    # Given a fresh interpreter with tracing off (as the bench and local stack run)
    # When a handler module is imported
    out = run_probe(HANDLER_IMPORT_PROBE.format(module=module), PAYLOAD_BUCKET="b")
    # Then neither boto3, the X-Ray SDK nor redis' async client came with it
    assert out == ""


AUTHORIZER_PROBE = """
import sys
import payloadstore_controlplane.handlers.authorizer
from payloadstore_controlplane.store.tokens import process_token_store
store = process_token_store("/payloadstore/tokens", 60)
heavy = [
    m
    for m in ("pydantic", "redis", "botocore.client", "aws_lambda_powertools.event_handler.api_gateway")
    if m in sys.modules
]
print(type(store._ssm).__name__, ",".join(heavy))
"""


def test_authorizer_reads_ssm_without_botocore_pydantic_or_redis():
    # Given Lambda's environment: region and the role's keys in the environment
    # When the authorizer is imported and its token store made
    out = run_probe(
        AUTHORIZER_PROBE,
        AWS_REGION="eu-west-1",
        AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
        AWS_SECRET_ACCESS_KEY="secret",
    )
    # Then it reads SSM with its own signed request, and none of the API functions' stack came
    assert out == "SsmHttpClient"
