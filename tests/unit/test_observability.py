"""EMF metrics by tier: printed as one JSON line each, unless metrics are disabled."""

from __future__ import annotations

import json

from controlplane.observability import metrics_bytes


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
