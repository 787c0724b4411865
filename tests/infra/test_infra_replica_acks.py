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
