"""`make cost` prices what the stack creates: tools/cost/shape.py reads the synthesized template."""

from __future__ import annotations

from payloadstore_controlplane.routes import FUNCTIONS, ROUTES
from tools.cost.model import Function
from tools.cost.shape import shape_of


def test_the_cost_model_reads_the_default_stage_from_its_template(template):
    shape = shape_of(template)
    # Then every function is priced at its synthesized memory and architecture
    assert set(shape.functions) == set(FUNCTIONS)
    assert shape.functions["daemon"] == Function(128, "x86_64")
    assert shape.functions["jobs"] == Function(256, "x86_64")
    # And the cache is one shard with a replica of the default node type
    assert (shape.cache_node_type, shape.cache_nodes) == ("cache.t4g.small", 2)
    # And two interface endpoints (Secrets Manager, SSM) in two AZs, no NAT gateway
    assert (shape.interface_endpoints, shape.availability_zones, shape.nat_gateways) == (2, 2, 0)
    # And one dashboard, per-method metrics off (payloadstore:detailedMetrics), the schedule
    assert shape.dashboards == 1
    assert shape.method_metrics is False
    assert shape.api_methods == len(ROUTES)
    assert shape.schedule_per_minute == 1
    # And every alarm is counted by the metrics it reads (a metric-math alarm by each metric)
    assert shape.alarm_metrics >= len(
        [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    )
