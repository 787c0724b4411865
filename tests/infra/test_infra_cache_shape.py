"""The ElastiCache production shape (issue 32): two replicas per shard for every stage but dev
(one for dev), a weekly maintenance window and a daily snapshot window apart from it, minor
version upgrades on (applied only in that window), and one replica's acknowledgement per write."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from infra.cache import DEFAULT_MAINTENANCE_WINDOW, DEFAULT_SNAPSHOT_WINDOW
from infra.config import REDIS_FUNCTIONS, cache_windows
from infra.functions import function_logical_id
from tests.infra.cfn import resources

pytestmark = pytest.mark.infra


def replication_group(template: dict) -> dict:
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    return group["Properties"]


def test_prod_has_two_replicas_per_shard_and_dev_one(two_stages):
    # Given dev and prod synthesized as a team deploys them
    prod = replication_group(two_stages.templates["prod"])
    dev = replication_group(two_stages.templates["dev"])
    # Then prod keeps a replica beside the promoted one when a primary dies
    assert prod["ReplicasPerNodeGroup"] == 2
    assert dev["ReplicasPerNodeGroup"] == 1
    for props in (prod, dev):
        assert props["AutomaticFailoverEnabled"] is True and props["MultiAZEnabled"] is True
    # And the alarms and dashboard watch every node (3 per shard in prod)
    assert len(two_stages.stacks["prod"].cache.node_ids) == prod["NumNodeGroups"] * 3
    assert two_stages.stacks["prod"].cache.node_ids[-1] == "payloadstore-prod-0001-003"
    # And every Redis function of either stage waits for one replica's acknowledgement
    for template in two_stages.templates.values():
        for name in REDIS_FUNCTIONS:
            env = template["Resources"][function_logical_id(name)]["Properties"]["Environment"]
            assert env["Variables"]["REDIS_MIN_REPLICA_ACKS"] == "1", name


def test_maintenance_and_snapshots_happen_in_set_windows_apart(template):
    props = replication_group(template)
    assert (
        props["PreferredMaintenanceWindow"] == DEFAULT_MAINTENANCE_WINDOW == "sun:05:00-sun:06:00"
    )
    assert props["SnapshotWindow"] == DEFAULT_SNAPSHOT_WINDOW == "03:00-04:00"
    assert props["SnapshotRetentionLimit"] >= 1
    # Minor versions (security fixes) are applied, only inside the maintenance window
    assert props["AutoMinorVersionUpgrade"] is True


def stack_with(context: dict, stage: str = "dev") -> dict:
    from infra.app_factory import build_app, cdk_json_context

    _app, stack = build_app(
        context={
            **cdk_json_context(),
            "aws:cdk:bundling-stacks": [],
            "aws:cdk:disable-asset-staging": True,
            "payloadstore:alarmEmail": "oncall@example.com",
            "payloadstore:stage": stage,
            # the replication group's flags (the dev stage is serverless by default)
            "payloadstore:cache": "nodes",
            **context,
        },
        nag=False,
        builtin_validation=False,
    )
    return cdk.assertions.Template.from_stack(stack).to_json()


def test_the_flags_set_replicas_and_windows_and_bad_windows_are_refused_at_synth():
    # Given -c cacheReplicas=3 and windows of one's own
    props = replication_group(
        stack_with(
            {
                "payloadstore:cacheReplicas": "3",
                "payloadstore:cacheMaintenanceWindow": "Wed:22:30-Wed:23:30",
                "payloadstore:cacheSnapshotWindow": "01:00-02:00",
            }
        )
    )
    assert props["ReplicasPerNodeGroup"] == 3
    assert props["PreferredMaintenanceWindow"] == "wed:22:30-wed:23:30"
    assert props["SnapshotWindow"] == "01:00-02:00"
    # And what AWS would refuse mid-deploy is refused here, naming the flag
    with pytest.raises(ValueError, match="overlaps"):
        cache_windows("sun:05:00-sun:06:00", "05:30-06:30")
    with pytest.raises(ValueError, match="overlaps"):  # across midnight into Monday
        cache_windows("sun:23:30-mon:00:30", "00:00-01:00")
    with pytest.raises(ValueError, match="at least 60 minutes"):
        cache_windows("sun:05:00-sun:05:30", "03:00-04:00")
    with pytest.raises(ValueError, match="payloadstore:cacheMaintenanceWindow"):
        cache_windows("sunday 5am", "03:00-04:00")
    with pytest.raises(ValueError, match="payloadstore:cacheSnapshotWindow"):
        cache_windows("sun:05:00-sun:06:00", "3-4")
    # A daily snapshot window is fine beside a maintenance window on another hour
    assert cache_windows("sat:23:00-sun:00:30", "03:00-04:00") == (
        "sat:23:00-sun:00:30",
        "03:00-04:00",
    )
    with pytest.raises(ValueError, match="replicas per shard must be 1..5"):
        stack_with({"payloadstore:cacheReplicas": "0"})
