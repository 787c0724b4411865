"""Acknowledged means replicated on AWS (issue 22): the replication group has a replica per
shard, so every function that talks to Redis waits for one (REDIS_MIN_REPLICA_ACKS=1)."""

from __future__ import annotations

import pytest

from infra.config import REDIS_FUNCTIONS
from infra.functions import function_logical_id
from tests.infra.cfn import resources

pytestmark = pytest.mark.infra


def test_functions_wait_for_a_replica_when_shards_have_replicas(template):
    # Given the synthesized stack's replication group
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    replicas = group["Properties"]["ReplicasPerNodeGroup"]
    assert replicas >= 1 and group["Properties"]["AutomaticFailoverEnabled"] is True
    # Then every Redis function acknowledges a write only once a replica holds it
    for name in REDIS_FUNCTIONS:
        env = template["Resources"][function_logical_id(name)]["Properties"]["Environment"]
        assert env["Variables"]["REDIS_MIN_REPLICA_ACKS"] == "1", name
        assert env["Variables"]["REDIS_REPLICA_ACK_TIMEOUT_MS"] == "100", name


def test_a_shard_below_its_replica_target_keeps_writing_and_alarms(template):
    # Given the synthesized stack: the functions wait for the replicas a node has online
    # (REDIS_REPLICA_ACK_POLICY=connected), so a shard whose replica was promoted keeps taking
    # writes instead of answering 503 until a new replica has synced
    for name in REDIS_FUNCTIONS:
        env = template["Resources"][function_logical_id(name)]["Properties"]["Environment"]
        assert env["Variables"]["REDIS_REPLICA_ACK_POLICY"] == "connected", name
    # Then an alarm watches the metric the functions emit while a shard is below target
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    (alarm,) = [a for a in alarms if a["Properties"].get("MetricName") == "ReplicaAcksBelowTarget"]
    assert alarm["Properties"]["Threshold"] == 0
    assert alarm["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Properties"]["AlarmActions"]
