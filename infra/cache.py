"""ElastiCache for Redis: cluster mode, Multi-AZ with a replica, TLS required, AUTH token."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.config import REDIS_PORT

ENGINE_VERSION = "7.1"
PARAMETER_GROUP = "default.redis7.cluster.on"
DEFAULT_NODE_TYPE = "cache.t4g.small"
REPLICAS_PER_SHARD = 1


class RedisCache(Construct):
    """Cluster mode enabled, so memory can grow by adding shards online; the CP's keys carry hash
    tags, so every multi-key command stays in one slot and the same code runs on one node.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        clients: ec2.ISecurityGroup,
        node_type: str,
        shards: int,
        destroy_on_removal: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = cdk.RemovalPolicy.DESTROY if destroy_on_removal else cdk.RemovalPolicy.RETAIN

        self.auth_secret = secretsmanager.Secret(
            self,
            "AuthToken",
            description="payloadstore ElastiCache AUTH token",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                # AUTH tokens: 16-128 printable characters without @, " or /; alphanumerics suffice.
                password_length=64,
                exclude_punctuation=True,
            ),
            removal_policy=removal,
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "Sg",
            vpc=vpc,
            description="payloadstore redis: reachable from the control-plane functions only",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            clients, ec2.Port.tcp(REDIS_PORT), "redis from the control-plane functions"
        )
        clients.add_egress_rule(
            self.security_group, ec2.Port.tcp(REDIS_PORT), "redis to the payloadstore cache"
        )

        subnet_group = elasticache.CfnSubnetGroup(
            self,
            "Subnets",
            description="payloadstore redis: isolated subnets",
            subnet_ids=vpc.select_subnets(subnet_type=subnets.subnet_type).subnet_ids,
        )

        self.replication_group_id = f"{cdk.Stack.of(self).stack_name.lower()}-redis"[:40]
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_id=self.replication_group_id,
            replication_group_description="payloadstore job queues, job state and inline payloads",
            engine="redis",
            engine_version=ENGINE_VERSION,
            cache_node_type=node_type,
            cache_parameter_group_name=PARAMETER_GROUP,
            cluster_mode="enabled",
            num_node_groups=shards,
            replicas_per_node_group=REPLICAS_PER_SHARD,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            auth_token=self.auth_secret.secret_value.unsafe_unwrap(),
            port=REDIS_PORT,
            cache_subnet_group_name=subnet_group.ref,
            security_group_ids=[self.security_group.security_group_id],
            snapshot_retention_limit=1,
            auto_minor_version_upgrade=True,
        )
        self.replication_group.apply_removal_policy(removal)
        self.node_ids = [
            f"{self.replication_group_id}-{shard:04d}-{node:03d}"
            for shard in range(1, shards + 1)
            for node in range(1, REPLICAS_PER_SHARD + 2)
        ]

    @property
    def url(self) -> str:
        """rediss:// URL of the configuration endpoint (a cluster client discovers the shards)."""
        return (
            f"rediss://{self.replication_group.attr_configuration_end_point_address}"
            f":{self.replication_group.attr_configuration_end_point_port}/0"
        )
