"""Queue observability in the template: the schedule, the metrics function's IAM, the dashboard
and the oldest-job-age alarm."""

from __future__ import annotations

import json
import re

import pytest

from infra.config import DEFAULT_OLDEST_JOB_AGE_ALARM_S
from infra.functions import function_logical_id
from payloadstore_controlplane import observability
from payloadstore_controlplane.routes import SCHEDULES
from tests.infra.cfn import as_list, render, resources, role_statements

pytestmark = pytest.mark.infra


def _role_of(template, group):
    fn = template["Resources"][function_logical_id(group)]
    return render(fn["Properties"]["Role"]).strip("<>").split(".")[0]


def test_a_schedule_rule_runs_the_metrics_function_every_minute(template):
    # Given the schedules the control plane declares
    assert ("metrics", 1) in [(s.function, s.every_minutes) for s in SCHEDULES]
    rules = resources(template, "AWS::Events::Rule")
    # Then one rule fires every minute and targets exactly the metrics function
    [rule] = [
        r for r in rules.values() if r["Properties"].get("ScheduleExpression") == "rate(1 minute)"
    ]
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert rule["Properties"].get("State", "ENABLED") == "ENABLED"
    [target] = rule["Properties"]["Targets"]
    assert render(target["Arn"]) == f"<{function_logical_id('metrics')}.Arn>"
    # And EventBridge alone may invoke it
    permissions = [
        p["Properties"]
        for p in resources(template, "AWS::Lambda::Permission").values()
        if render(p["Properties"]["FunctionName"]) == f"<{function_logical_id('metrics')}.Arn>"
    ]
    assert [p["Principal"] for p in permissions] == ["events.amazonaws.com"]


def test_the_metrics_function_is_not_behind_the_api(template):
    for method in resources(template, "AWS::ApiGateway::Method").values():
        uri = json.dumps(method["Properties"].get("Integration", {}))
        assert function_logical_id("metrics") not in uri


def test_the_metrics_function_reads_nothing_in_s3_or_ssm(template):
    statements = role_statements(template, _role_of(template, "metrics"))
    actions = sorted({a for s in statements for a in as_list(s["Action"])})
    # Then: its logs, the VPC interface calls Lambda makes and the Redis AUTH secret; namespaces
    # come from Redis, so the token store is not read (SSM's shared Get* quota stays the
    # authorizer's). In S3 it only deletes what retention `consume` made due, under payloads/
    s3_statements = [
        s for s in statements if any(a.startswith("s3:") for a in as_list(s["Action"]))
    ]
    assert [a for s in s3_statements for a in as_list(s["Action"])] == ["s3:DeleteObject"]
    for statement in s3_statements:
        for resource in as_list(statement["Resource"]):
            assert render(resource).endswith("/payloads/*"), render(resource)
    assert not [a for a in actions if a.startswith("ssm:")]
    assert "secretsmanager:GetSecretValue" in actions
    assert not [a for a in actions if a.endswith(":*") or a == "*"]


def _dashboard_body(template) -> str:
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    # Fn::Join of literal strings and references: keep the literals, mark the references
    return "".join(p if isinstance(p, str) else "<ref>" for p in body["Fn::Join"][1])


def test_the_dashboard_names_only_metrics_the_code_emits(template):
    body = _dashboard_body(template)
    # Our EMF metrics appear as ["<namespace>","<name>",...] or in SEARCH(... MetricName="<name>")
    named = set(re.findall(r'MetricName=\\"(\w+)\\"', body))
    named |= set(re.findall(r'\["[^"]+","(\w+)","service"', body))
    assert named, "no custom metric found in the dashboard body"
    assert named <= observability.EMITTED_METRICS, named - observability.EMITTED_METRICS
    # And it shows what operators need: depth, in flight, oldest age, jobs, payload problems
    for name in ("QueueDepth", "InFlight", "OldestJobAgeSeconds", "JobsEnqueued", "PayloadCorrupt"):
        assert name in named, name
    for title in ("Requests (all routes)", "Latency p99 (all routes)", "Redis memory used"):
        assert title in body, title


def test_an_alarm_fires_when_the_oldest_job_waits_too_long(template):
    alarms = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == observability.OLDEST_JOB_AGE
    ]
    [alarm] = alarms
    assert alarm["Threshold"] == DEFAULT_OLDEST_JOB_AGE_ALARM_S == 900
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Statistic"] == "Maximum"
    # The stack-wide series (service only), which the metrics function publishes every minute
    assert [d["Name"] for d in alarm["Dimensions"]] == ["service"]
    assert alarm["AlarmActions"], "the alarm must notify someone"


def test_every_metric_name_in_the_code_is_declared_in_emitted_metrics():
    from pathlib import Path

    source = Path(observability.__file__).parent
    literal = set()
    for path in source.rglob("*.py"):
        text = path.read_text()
        literal |= set(re.findall(r'metrics_(?:count|bytes)\(\s*"(\w+)"', text))
    assert literal, "found no metric in the code"
    assert literal <= observability.EMITTED_METRICS, literal - observability.EMITTED_METRICS


def test_a_schedule_rule_runs_the_blob_renewals_function_every_five_minutes(template):
    # Given the renewer's schedule (its period enters the blob arithmetic: docs/design.md)
    assert ("renewals", 5) in [(s.function, s.every_minutes) for s in SCHEDULES]
    rules = resources(template, "AWS::Events::Rule")
    [rule] = [
        r for r in rules.values() if r["Properties"].get("ScheduleExpression") == "rate(5 minutes)"
    ]
    [target] = rule["Properties"]["Targets"]
    assert render(target["Arn"]) == f"<{function_logical_id('renewals')}.Arn>"
    permissions = [
        p["Properties"]
        for p in resources(template, "AWS::Lambda::Permission").values()
        if render(p["Properties"]["FunctionName"]) == f"<{function_logical_id('renewals')}.Arn>"
    ]
    assert [p["Principal"] for p in permissions] == ["events.amazonaws.com"]
    # And no route reaches it
    for method in resources(template, "AWS::ApiGateway::Method").values():
        uri = json.dumps(method["Properties"].get("Integration", {}))
        assert function_logical_id("renewals") not in uri
    # And it ends before the next run starts (a copy never overlaps its own next run)
    fn = template["Resources"][function_logical_id("renewals")]["Properties"]
    assert fn["Timeout"] < 5 * 60
