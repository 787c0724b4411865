"""Every alarm watches a metric that exists: AWS's own by name and dimensions, ours by what the
functions' code emits with the template's environment. And every alarm reaches the topic."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.functions import function_logical_id
from payloadstore_controlplane.routes import FUNCTIONS
from tests.infra.cfn import render, resources

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO / "functions"
# The observability helpers that emit one EMF metric; their non-value keywords are dimensions.
EMITTERS = ("metrics_count", "metrics_bytes")
# emit_metric_set({dimension: value}, {metric name: (unit, value)}): several metrics, one set.
SET_EMITTER = "emit_metric_set"

# What AWS publishes: namespace -> metric names, and the dimension set our alarms may use.
AWS_METRICS: dict[str, tuple[set[str], set[str]]] = {
    "AWS/Lambda": ({"Errors", "Throttles", "Duration"}, {"FunctionName"}),
    "AWS/ApiGateway": ({"5XXError", "4XXError", "Latency", "Count"}, {"ApiName"}),
    "AWS/ElastiCache": (
        {"DatabaseMemoryUsagePercentage", "EngineCPUUtilization", "Evictions", "CPUCreditBalance"},
        {"CacheClusterId"},
    ),
}


def emitted_metrics() -> dict[str, set[tuple[str, frozenset[str]]]]:
    """Metric name -> (emitter, dimension keys besides `service`) of every call in the code."""
    from payloadstore_controlplane import observability

    def metric_name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):  # a constant of observability (OLDEST_JOB_AGE, ...)
            value = getattr(observability, node.id, None)
            return value if isinstance(value, str) else None
        return None

    def dict_keys(node: ast.expr, tree: ast.Module) -> list[ast.expr]:
        """Keys of a dict literal, or of a variable built as one (`d = {...}`, `d[k] = v`)."""
        if isinstance(node, ast.Dict):
            return [k for k in node.keys if k is not None]
        keys: list[ast.expr] = []
        if isinstance(node, ast.Name):
            for n in ast.walk(tree):
                if isinstance(n, (ast.Assign, ast.AnnAssign)):
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        named = isinstance(t, ast.Name) and t.id == node.id
                        if named and isinstance(n.value, ast.Dict):
                            keys += [k for k in n.value.keys if k is not None]
                        if (
                            isinstance(t, ast.Subscript)
                            and isinstance(t.value, ast.Name)
                            and t.value.id == node.id
                        ):
                            keys.append(t.slice)
        return keys

    out: dict[str, set[tuple[str, frozenset[str]]]] = {}
    for path in FUNCTIONS_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            emitter = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if emitter in EMITTERS:
                name = metric_name(node.args[0])
                keys = frozenset(k.arg for k in node.keywords if k.arg not in (None, "value"))
                if name:
                    out.setdefault(name, set()).add((emitter, keys))
            elif emitter == SET_EMITTER and len(node.args) == 2:
                dims, values = node.args
                if not isinstance(dims, ast.Dict):
                    continue
                keys = frozenset(metric_name(k) for k in dims.keys)
                for k in dict_keys(values, tree):
                    name = metric_name(k)
                    if name:
                        out.setdefault(name, set()).add((emitter, keys))
    return out


def _alarm_metrics(props: dict) -> list[dict]:
    if "Metrics" in props:
        return [m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m]
    return [
        {k: props[k] for k in ("Namespace", "MetricName", "Dimensions") if k in props},
    ]


def _function_env(template: dict) -> dict:
    fn = next(iter(resources(template, "AWS::Lambda::Function").values()))
    return fn["Properties"]["Environment"]["Variables"]


def _emit_with_deployed_env(
    template: dict, emitter: str, name: str, dimensions: dict[str, str]
) -> dict:
    """Run the observability emitter the code uses for `name` in a fresh interpreter with the
    template's Powertools environment; return the EMF document it prints."""
    env = {k: v for k, v in _function_env(template).items() if isinstance(v, str)}
    call = (
        "emit_metric_set(dims, {name: ('Count', 1)})"
        if emitter == SET_EMITTER
        else f"{emitter}(name, 1, **dims)"
    )
    code = (
        "import sys, json\n"
        "from payloadstore_controlplane.observability import emit_metric_set, metrics_bytes, metrics_count\n"
        "name, dims = sys.argv[1], json.loads(sys.argv[2])\n"
        f"{call}\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, name, json.dumps(dimensions)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("POWERTOOLS_")},
            **{k: v for k, v in env.items() if k.startswith("POWERTOOLS_")},
            "PYTHONPATH": str(FUNCTIONS_DIR),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (line,) = [ln for ln in result.stdout.splitlines() if '"_aws"' in ln]
    return json.loads(line)


def test_every_alarm_notifies_the_stage_topic_and_is_named_after_the_stage(template):
    (topic_id,) = resources(template, "AWS::SNS::Topic")
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert alarms
    for alarm_id, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}], alarm_id
        assert alarm["Properties"]["AlarmName"].startswith("PayloadStore-dev-"), alarm_id


def test_every_alarm_watches_a_metric_aws_or_the_code_really_emits(template):
    emitted = emitted_metrics()
    env = _function_env(template)
    functions = set(resources(template, "AWS::Lambda::Function"))
    (rest_api,) = resources(template, "AWS::ApiGateway::RestApi").values()
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    custom_seen = []
    for alarm_id, alarm in resources(template, "AWS::CloudWatch::Alarm").items():
        for metric in _alarm_metrics(alarm["Properties"]):
            namespace, name = metric["Namespace"], metric["MetricName"]
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            if namespace in AWS_METRICS:
                names, dim_keys = AWS_METRICS[namespace]
                assert name in names, (alarm_id, namespace, name)
                assert set(dims) == dim_keys, (alarm_id, dims)
                # And the dimension names a resource of this stack
                if "FunctionName" in dims:
                    assert render(dims["FunctionName"]).strip("<>") in functions, alarm_id
                if "ApiName" in dims:
                    assert dims["ApiName"] == rest_api["Properties"]["Name"], alarm_id
                if "CacheClusterId" in dims:
                    rg = group["Properties"]["ReplicationGroupId"]
                    assert dims["CacheClusterId"].startswith(f"{rg}-"), alarm_id
                continue
            # Our own metric: the functions' namespace, a name the code emits, exactly the
            # dimensions one of its emissions carries (CloudWatch matches the full set)
            assert namespace == env["POWERTOOLS_METRICS_NAMESPACE"], alarm_id
            assert name in emitted, f"{alarm_id}: no code emits {name}"
            assert dims.get("service") == env["POWERTOOLS_SERVICE_NAME"], alarm_id
            extra = {k: v for k, v in dims.items() if k != "service"}
            emitters = [e for e, keys in emitted[name] if keys == frozenset(extra)]
            assert emitters, f"{alarm_id}: {name} is never emitted with dimensions {sorted(dims)}"
            custom_seen.append((emitters[0], name, extra))
    assert ("metrics_count", "PayloadCorrupt", {}) in custom_seen

    # When the code emits each custom metric with the deployed environment, Then the EMF
    # document names exactly the alarm's namespace, metric and dimensions
    for emitter, name, extra in custom_seen:
        doc = _emit_with_deployed_env(template, emitter, name, extra)
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"]
        assert [m["Name"] for m in directive["Metrics"]] == [name]
        (dimension_set,) = directive["Dimensions"]
        assert set(dimension_set) == {"service", *extra}
        assert doc["service"] == env["POWERTOOLS_SERVICE_NAME"]


def test_every_function_has_errors_throttles_and_near_timeout_alarms(template):
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    by_function: dict[str, set[str]] = {}
    for alarm in alarms:
        props = alarm["Properties"]
        if props.get("Namespace") != "AWS/Lambda":
            continue
        (dim,) = props["Dimensions"]
        fn_id = render(dim["Value"]).strip("<>")
        by_function.setdefault(fn_id, set()).add(props["MetricName"])
        if props["MetricName"] == "Duration":
            timeout_ms = template["Resources"][fn_id]["Properties"]["Timeout"] * 1000
            # Near the timeout, but above the default long-poll wait (20 s on 28 s functions)
            assert 0.5 * timeout_ms < props["Threshold"] < timeout_ms
            assert props["Threshold"] > 20_000 or timeout_ms <= 20_000
            assert props["ExtendedStatistic"] == "p99"
        else:
            assert props["Threshold"] == 0 and props["Statistic"] == "Sum"
    # Then every function of routes.FUNCTIONS (the authorizer included) has all three
    assert by_function == {
        function_logical_id(g): {"Errors", "Throttles", "Duration"} for g in FUNCTIONS
    }


def test_redis_alarms_watch_every_node_for_memory_cpu_and_evictions(template):
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    props = group["Properties"]
    nodes = props["NumNodeGroups"] * (props["ReplicasPerNodeGroup"] + 1)
    watched: dict[str, set[str]] = {}
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        a = alarm["Properties"]
        if "Metrics" not in a:
            continue
        for m in _alarm_metrics(a):
            if m["Namespace"] == "AWS/ElastiCache":
                watched.setdefault(m["MetricName"], set()).add(m["Dimensions"][0]["Value"])
        if "Evictions" in json.dumps(a["Metrics"]):
            # Any eviction alarms: with noeviction there should never be one
            assert a["Threshold"] == 0 and a["ComparisonOperator"] == "GreaterThanThreshold"
    # The default node type (cache.t4g.small) is burstable: its CPU credits are watched too
    assert set(watched) == {
        "DatabaseMemoryUsagePercentage",
        "EngineCPUUtilization",
        "Evictions",
        "CPUCreditBalance",
    }
    for metric, node_ids in watched.items():
        assert len(node_ids) == nodes, metric


def test_many_shards_split_node_alarms_under_the_ten_metric_limit():
    import aws_cdk as cdk
    from aws_cdk import aws_apigateway as apigw

    from infra.alarms import Alarms
    from infra.config import StageNames

    stack = cdk.Stack(cdk.App(), "Many")
    api = apigw.RestApi(stack, "Api")
    api.root.add_method("GET")
    nodes = [f"payloadstore-dev-{s:04d}-{n:03d}" for s in range(1, 8) for n in (1, 2)]
    alarms = Alarms(
        stack,
        "Alarms",
        names=StageNames("dev"),
        api=api,
        functions={},
        redis_node_ids=nodes,
        email=None,
        topic_arn=None,
    )
    template = stack.resolve(cdk.assertions.Template.from_stack(stack).to_json())
    watched = set()
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        metrics = alarm["Properties"].get("Metrics", [])
        assert len(metrics) <= 10
        watched |= {
            m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
            for m in metrics
            if "MetricStat" in m and m["MetricStat"]["Metric"]["MetricName"] == "Evictions"
        }
    assert watched == set(nodes)
    assert {"RedisEvictions", "RedisEvictions2"} <= set(alarms.alarms)


def test_a_burstable_node_type_gets_a_cpu_credit_alarm_and_others_do_not(template):
    """Issue 23: cache.t* nodes are held to their baseline CPU when their credits run out."""
    import aws_cdk as cdk
    from aws_cdk import aws_apigateway as apigw

    from infra.alarms import REDIS_CPU_CREDITS_LOW, Alarms
    from infra.config import StageNames

    # The deployed default (cache.t4g.small): one alarm on the poorest node's credit balance
    [credits] = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if "CPUCreditBalance" in json.dumps(a["Properties"].get("Metrics", []))
    ]
    assert credits["AlarmName"] == "PayloadStore-dev-RedisCpuCredits"
    assert credits["ComparisonOperator"] == "LessThanThreshold"
    assert credits["Threshold"] == REDIS_CPU_CREDITS_LOW
    assert credits["AlarmActions"]
    stats = {m["MetricStat"]["Stat"] for m in credits["Metrics"] if "MetricStat" in m}
    assert stats == {"Minimum"}

    def credit_alarms(node_type: str) -> list[str]:
        stack = cdk.Stack(cdk.App(), "Nodes")
        api = apigw.RestApi(stack, "Api")
        api.root.add_method("GET")
        alarms = Alarms(
            stack,
            "Alarms",
            names=StageNames("dev"),
            api=api,
            functions={},
            redis_node_ids=["payloadstore-dev-0001-001", "payloadstore-dev-0001-002"],
            email=None,
            topic_arn=None,
            redis_node_type=node_type,
        )
        return sorted(a for a in alarms.alarms if a.startswith("RedisCpuCredits"))

    assert credit_alarms("cache.t3.medium") == ["RedisCpuCredits"]
    assert credit_alarms("cache.m7g.large") == []
    assert credit_alarms("cache.r7g.large") == []
