"""`make cost` prices what the stack creates: tools/cost/shape.py reads the synthesized template."""

from __future__ import annotations

import pytest

from payloadstore_controlplane.routes import FUNCTIONS, RENEWAL_EVERY_MINUTES, ROUTES
from tools.cost.model import Function
from tools.cost.shape import shape_of


def test_the_cost_model_reads_the_default_stage_from_its_template(template):
    shape = shape_of(template)
    # Then every function is priced at its synthesized memory and architecture
    assert set(shape.functions) == set(FUNCTIONS)
    assert shape.functions["daemon"] == Function(128, "x86_64")
    assert shape.functions["jobs"] == Function(256, "x86_64")
    # And the cache (the nodes shape of the `template` fixture) is one shard with a replica of
    # the default node type, on Valkey
    assert (shape.cache_node_type, shape.cache_nodes) == ("cache.t4g.small", 2)
    assert (shape.cache_shape, shape.cache_engine) == ("nodes", "valkey")
    # And one interface endpoint (Secrets Manager) in two AZs, no NAT gateway
    assert (shape.interface_endpoints, shape.availability_zones, shape.nat_gateways) == (1, 2, 0)
    # And one dashboard, per-method metrics off (payloadstore:detailedMetrics)
    assert shape.dashboards == 1
    assert shape.method_metrics is False
    assert shape.api_methods == len(ROUTES)
    # And both scheduled functions at their rules' rates: metrics every minute, the blob renewer
    # every RENEWAL_EVERY_MINUTES
    assert shape.schedules == {
        "metrics": 1.0,
        "renewals": pytest.approx(1 / RENEWAL_EVERY_MINUTES),
    }
    # And every alarm is counted by the metrics it reads (a metric-math alarm by each metric)
    assert shape.alarm_metrics >= len(
        [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    )


def test_the_cost_model_reads_the_default_dev_stage_as_serverless(dev_default):
    shape = shape_of(dev_default.template)
    assert (shape.cache_shape, shape.cache_engine, shape.cache_nodes) == ("serverless", "valkey", 0)
    assert (shape.interface_endpoints, shape.secrets, shape.dashboards) == (0, 0, 0)
    assert shape.emf_metrics is False
    assert shape.kms_keys == 1
