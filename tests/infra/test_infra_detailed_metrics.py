"""Per-method API metrics are off by default (issue 32): `-c payloadstore:detailedMetrics=on` turns
them on, and `make cost`'s fixed line falls by what they cost (5 custom metrics per method)."""

from __future__ import annotations

import json
import os

import pytest

from payloadstore_controlplane.routes import ROUTES
from tests.support.infra import CDK_ENV, STACK
from tools.cost import model
from tools.cost.model import Route
from tools.cost.shape import shape_of

pytestmark = pytest.mark.infra


def method_settings(template: dict) -> list[dict]:
    (stage,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    return stage["Properties"]["MethodSettings"]


def dashboard_body(template: dict) -> str:
    (dash,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"
    ]
    return "".join(
        p if isinstance(p, str) else "" for p in dash["Properties"]["DashboardBody"]["Fn::Join"][1]
    )


@pytest.fixture(scope="module")
def detailed_template(tmp_path_factory) -> dict:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp("cdk-detailed-metrics")
    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        "payloadstore:detailedMetrics": "on",
        # the per-route widgets are the dashboard's (dev has none unless monitoring is full)
        "payloadstore:monitoring": "full",
    }
    app, _ = build_app(context=context, outdir=outdir, builtin_validation=False, nag=False)
    app.synth()
    return json.loads((outdir / f"{STACK}.template.json").read_text())


def fixed_api_metrics(template: dict) -> float:
    shape = shape_of(template)
    lines = model.fixed_monthly(shape, {group: Route(group, 1.0) for group in shape.schedules})
    return sum(usd for label, usd in lines if label.startswith("API Gateway per-method metrics"))


def test_by_default_no_method_publishes_its_own_metrics(template):
    # Given the default synth, Then the stage's method settings keep per-method metrics off
    settings = method_settings(template)
    assert settings and all(s.get("MetricsEnabled") is False for s in settings)
    # And the dashboard graphs the stage's own (free) request count and latency instead
    body = dashboard_body(template)
    assert "Requests (all routes)" in body and "Latency p99 (all routes)" in body
    assert '"Resource"' not in body
    # And make cost prices no per-method metric
    assert fixed_api_metrics(template) == 0


def test_detailed_metrics_on_publishes_them_for_every_method_and_costs_5_metrics_each(
    detailed_template,
):
    settings = method_settings(detailed_template)
    assert any(s.get("MetricsEnabled") is True for s in settings)
    body = dashboard_body(detailed_template)
    assert "Requests per route" in body
    for route in ROUTES:
        assert f'"{route.method} {route.path}"' in body, route
    # $0.30 per custom metric a month, 5 per method
    methods = shape_of(detailed_template).api_methods
    assert fixed_api_metrics(detailed_template) == pytest.approx(methods * 5 * 0.30)
