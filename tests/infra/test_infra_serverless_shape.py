"""Issue 45: the dev stage as `make synth` makes it (ElastiCache Serverless on Valkey, IAM auth,
no interface endpoint, no secret, a small fixed bill) and the production stage on a Valkey
replication group."""

from __future__ import annotations

import pytest

from infra.config import REDIS_FUNCTIONS
from infra.functions import function_logical_id
from tests.infra.cfn import as_list, render, resources, role_statements

pytestmark = pytest.mark.infra


def test_default_dev_stage_is_serverless_valkey_without_endpoints_or_secrets(dev_default):
    template = dev_default.template
    # Given `cdk synth` of the dev stage with no flags
    (cache,) = resources(template, "AWS::ElastiCache::ServerlessCache").values()
    props = cache["Properties"]
    # Then its cache is ElastiCache Serverless on Valkey, with usage limits
    assert props["Engine"] == "valkey"
    limits = props["CacheUsageLimits"]
    assert limits["DataStorage"] == {"Unit": "GB", "Maximum": 10}
    assert limits["ECPUPerSecond"] == {"Maximum": 5000}
    # And no replication group, no interface endpoint, no Secrets Manager secret
    assert resources(template, "AWS::ElastiCache::ReplicationGroup") == {}
    assert resources(template, "AWS::SecretsManager::Secret") == {}
    interface = [
        e
        for e in resources(template, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert interface == []
    # And no dashboard; the alarms are the API's 5xx and the cache's two limits
    assert resources(template, "AWS::CloudWatch::Dashboard") == {}
    names = sorted(
        render(a["Properties"]["AlarmName"]).rsplit("-", 1)[-1]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
    )
    assert names == ["Api5xx", "CacheDataNearLimit", "CacheThrottled"]


def test_serverless_functions_authenticate_with_iam(dev_default):
    template = dev_default.template
    (cache_id,) = resources(template, "AWS::ElastiCache::ServerlessCache")
    (user,) = [
        u
        for u in resources(template, "AWS::ElastiCache::User").values()
        if u["Properties"]["AuthenticationMode"]["Type"] == "iam"
    ]
    user_id = user["Properties"]["UserId"]
    # The user group holds that user and is the cache's
    (_group_id, group) = next(iter(resources(template, "AWS::ElastiCache::UserGroup").items()))
    assert user_id in group["Properties"]["UserIds"]
    assert user["Properties"]["UserName"] == user_id  # AWS: equal for IAM users
    for group_name in REDIS_FUNCTIONS:
        fn = template["Resources"][function_logical_id(group_name)]
        env = fn["Properties"]["Environment"]["Variables"]
        # Then every function that talks to the cache signs IAM tokens for that user
        assert env["REDIS_IAM_USER"] == user_id
        assert env["REDIS_AUTH_SECRET"] == ""
        assert render(env["REDIS_URL"]).startswith("rediss://")
        # And acknowledges without WAIT (serverless offers none: docs/deploying.md)
        assert env["REDIS_MIN_REPLICA_ACKS"] == "0"
        # And its role may elasticache:Connect to that cache as that user, and nothing else
        role_id = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        connects = [
            s
            for s in role_statements(template, role_id)
            if "elasticache:Connect" in as_list(s["Action"])
        ]
        (connect,) = connects
        resources_ = [render(r) for r in as_list(connect["Resource"])]
        assert f"<{cache_id}.ARN>" in resources_
        assert any(r.endswith(f":user:{user_id}") for r in resources_)
        assert not any(
            "secretsmanager:GetSecretValue" in as_list(s["Action"])
            for s in role_statements(template, role_id)
        )


def test_authorizer_and_admin_run_outside_the_vpc(dev_default):
    # They call SSM and nothing in the VPC: outside it they need no SSM endpoint
    template = dev_default.template
    for group in ("authorizer", "admin"):
        fn = template["Resources"][function_logical_id(group)]
        assert "VpcConfig" not in fn["Properties"]
    for group in REDIS_FUNCTIONS:
        assert "VpcConfig" in template["Resources"][function_logical_id(group)]["Properties"]


def test_prod_is_a_valkey_replication_group_with_two_replicas_per_shard(two_stages):
    # Given -c payloadstore:stage=prod (here beside dev, both pinned to nodes by the fixture)
    prod = two_stages.templates["prod"]
    (group,) = resources(prod, "AWS::ElastiCache::ReplicationGroup").values()
    props = group["Properties"]
    # Then the engine is Valkey, with at least two replicas per shard
    assert props["Engine"] == "valkey"
    assert props["ReplicasPerNodeGroup"] >= 2
    assert resources(prod, "AWS::ElastiCache::ServerlessCache") == {}


def test_prod_without_flags_defaults_to_nodes_and_full_monitoring(tmp_path):
    from tests.infra.conftest import synth_template

    prod = synth_template(
        tmp_path, {"payloadstore:stage": "prod", "payloadstore:alarmEmail": "a@example.com"}
    )
    (group,) = resources(prod, "AWS::ElastiCache::ReplicationGroup").values()
    assert group["Properties"]["Engine"] == "valkey"
    assert group["Properties"]["ReplicasPerNodeGroup"] == 2
    assert len(resources(prod, "AWS::CloudWatch::Dashboard")) == 1


def test_the_engine_and_shape_flags(tmp_path):
    from tests.infra.conftest import synth_template

    # -c payloadstore:cacheEngine=redis on the serverless shape
    template = synth_template(tmp_path, {"payloadstore:cacheEngine": "redis"})
    (cache,) = resources(template, "AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["Engine"] == "redis"
    # And its Redis OSS user group keeps the `default` user such a group must have (off)
    (group,) = resources(template, "AWS::ElastiCache::UserGroup").values()
    names = {
        u["Properties"]["UserName"]: u["Properties"]
        for u in resources(template, "AWS::ElastiCache::User").values()
    }
    assert names["default"]["AccessString"].startswith("off")
    assert len(group["Properties"]["UserIds"]) == 2
    with pytest.raises(ValueError, match="payloadstore:cache must be one of"):
        synth_template(tmp_path / "bad", {"payloadstore:cache": "cluster"})
    with pytest.raises(ValueError, match="cacheMaxEcpuPerSecond must be"):
        synth_template(tmp_path / "ecpu", {"payloadstore:cacheMaxEcpuPerSecond": "10"})


def test_valkey_user_group_holds_only_users_that_authenticate(dev_default):
    """AWS (ElastiCache RBAC): a user group configured for the VALKEY engine can only contain
    users with an authentication mechanism (password or IAM); a no-password `default` user in
    it fails CreateUserGroup, and with it the stack's first create."""
    template = dev_default.template
    users = {
        u["Properties"]["UserId"]: u["Properties"]
        for u in resources(template, "AWS::ElastiCache::User").values()
    }
    # Given the dev stage's serverless cache on Valkey and its user group
    (group,) = resources(template, "AWS::ElastiCache::UserGroup").values()
    assert group["Properties"]["Engine"] == "valkey"
    # Then every user of the group authenticates with a password or IAM
    for user_id in group["Properties"]["UserIds"]:
        user = users[render(user_id)]
        assert user["AuthenticationMode"]["Type"] in ("iam", "password"), user
        assert not user.get("NoPasswordRequired"), user
    # And no user the group leaves out is created for nothing
    assert sorted(users) == sorted(render(u) for u in group["Properties"]["UserIds"])
