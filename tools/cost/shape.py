"""What a stage creates, read from its synthesized CloudFormation template (the default flags
unless told otherwise): the figures the fixed cost and the functions' prices depend on."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from payloadstore_controlplane.routes import FUNCTIONS
from tools.cost.model import Function, Shape


def _of_type(template: dict, type_: str) -> list[dict]:
    return [r for r in template["Resources"].values() if r["Type"] == type_]


def alarm_metrics(alarm: dict) -> int:
    """CloudWatch bills an alarm per metric it reads: a metric-math alarm per metric in it."""
    metrics = alarm["Properties"].get("Metrics")
    if not metrics:
        return 1
    return sum(1 for m in metrics if "MetricStat" in m)


def _group_of(resource: dict) -> str | None:
    """The function group a Lambda function resource serves, by its handler."""
    handler = resource.get("Properties", {}).get("Handler")
    return next((g for g, h in FUNCTIONS.items() if h == handler), None)


def shape_of(template: dict) -> Shape:
    functions: dict[str, Function] = {}
    for res in _of_type(template, "AWS::Lambda::Function"):
        props = res["Properties"]
        group = _group_of(res)
        if group is not None:
            functions[group] = Function(props["MemorySize"], props["Architectures"][0])
    groups = _of_type(template, "AWS::ElastiCache::ReplicationGroup")
    serverless = _of_type(template, "AWS::ElastiCache::ServerlessCache")
    if serverless:
        (cache,) = serverless
        cache_props = cache["Properties"]
        nodes, node_type = 0, "serverless"
    else:
        (cache,) = groups
        cache_props = cache["Properties"]
        nodes = cache_props.get("NumNodeGroups", 1) * (
            1 + cache_props.get("ReplicasPerNodeGroup", 0)
        )
        node_type = cache_props["CacheNodeType"]
    emf = not any(
        r["Properties"]
        .get("Environment", {})
        .get("Variables", {})
        .get("POWERTOOLS_METRICS_DISABLED")
        == "true"
        for r in _of_type(template, "AWS::Lambda::Function")
        if _group_of(r) is not None
    )
    endpoints = [
        r
        for r in _of_type(template, "AWS::EC2::VPCEndpoint")
        if r["Properties"].get("VpcEndpointType") == "Interface"
    ]
    azs = max((len(r["Properties"].get("SubnetIds", [])) for r in endpoints), default=0)
    stages = _of_type(template, "AWS::ApiGateway::Stage")
    method_metrics = any(
        s.get("MetricsEnabled") for st in stages for s in st["Properties"].get("MethodSettings", [])
    )
    return Shape(
        functions=functions,
        cache_node_type=node_type,
        cache_nodes=nodes,
        cache_shape="serverless" if serverless else "nodes",
        cache_engine=cache_props.get("Engine", "redis"),
        emf_metrics=emf,
        interface_endpoints=len(endpoints),
        availability_zones=azs,
        nat_gateways=len(_of_type(template, "AWS::EC2::NatGateway")),
        alarm_metrics=sum(alarm_metrics(a) for a in _of_type(template, "AWS::CloudWatch::Alarm")),
        dashboards=len(_of_type(template, "AWS::CloudWatch::Dashboard")),
        api_methods=len(_of_type(template, "AWS::ApiGateway::Method")),
        method_metrics=method_metrics,
        secrets=len(_of_type(template, "AWS::SecretsManager::Secret")),
        kms_keys=len(_of_type(template, "AWS::KMS::Key")),
        schedules=schedules_of(template),
    )


_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
_RATE_MINUTES = {"minute": 1, "hour": 60, "day": 1440}


def schedules_of(template: dict) -> dict[str, float]:
    """Runs per minute of each scheduled function group, from the EventBridge rules' rates and
    their targets (the metrics function every minute, the blob renewer every
    RENEWAL_EVERY_MINUTES)."""
    out: dict[str, float] = {}
    for rule in _of_type(template, "AWS::Events::Rule"):
        props = rule.get("Properties", {})
        rate = _RATE.fullmatch(str(props.get("ScheduleExpression", "")))
        if rate is None or props.get("State", "ENABLED") != "ENABLED":
            continue
        minutes = int(rate.group(1)) * _RATE_MINUTES[rate.group(2).rstrip("s")]
        for target in props.get("Targets", []):
            # infra/schedules.py targets the function itself: {"Fn::GetAtt": [id, "Arn"]}
            logical_id = target.get("Arn", {}).get("Fn::GetAtt", [None])[0]
            group = _group_of(template["Resources"].get(logical_id, {}))
            if group is not None:
                out[group] = out.get(group, 0.0) + 1 / minutes
    return out


# The production shape `make cost` prices beside the default (dev) one.
PROD_CONTEXT = {"payloadstore:stage": "prod", "payloadstore:alarmEmail": "oncall@example.com"}


def synthesize(context: dict[str, Any] | None = None) -> dict:
    """The default stage's template, synthesized in-process without bundling (no pip, no copies)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
    from infra.app_factory import build_app, cdk_json_context

    with tempfile.TemporaryDirectory(prefix="cost-synth-") as tmp:
        full = {
            **cdk_json_context(),
            "aws:cdk:bundling-stacks": [],
            "aws:cdk:disable-asset-staging": True,
            **(context or {}),
        }
        app, stack = build_app(context=full, outdir=tmp, nag=False, builtin_validation=False)
        app.synth()
        return json.loads((Path(tmp) / f"{stack.stack_name}.template.json").read_text())
