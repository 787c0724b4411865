"""ElastiCache for Redis: cluster mode, Multi-AZ with a replica, TLS required, AUTH token, and a
parameter group of our own that never evicts.

Teardown: the replication group takes a final snapshot and is deleted with the stack (DeletionPolicy
Snapshot) unless `payloadstore:removalPolicy=destroy`, then it is deleted outright. It is never
retained: a retained group would keep its subnet group, security group and so the VPC alive, and
`cdk destroy` would fail on them.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.config import REDIS_PORT

ENGINE_VERSION = "7.1"
PARAMETER_GROUP_FAMILY = "redis7"
# The default group (default.redis7.cluster.on) says volatile-lru: every job hash has a TTL, so
# under memory pressure Redis would evict live jobs while their stream entries stay. noeviction
# turns a full Redis into refused writes, which the control plane answers with 503.
PARAMETERS = {"cluster-enabled": "yes", "maxmemory-policy": "noeviction"}
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
        replication_group_id: str,
        node_type: str,
        shards: int,
        destroy_on_removal: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        # The data (jobs, inline payloads) survives a teardown as a final snapshot, not as a
        # running group: see the module docstring.
        removal = cdk.RemovalPolicy.DESTROY if destroy_on_removal else cdk.RemovalPolicy.SNAPSHOT

        self.auth_secret = secretsmanager.Secret(
            self,
            "AuthToken",
            description="payloadstore ElastiCache AUTH token",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                # AUTH tokens: 16-128 printable characters without @, " or /; alphanumerics suffice.
                password_length=64,
                exclude_punctuation=True,
            ),
            # The AUTH token is configuration, not data: a snapshot restored later gets its own.
            removal_policy=cdk.RemovalPolicy.DESTROY,
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

        self.parameter_group = elasticache.CfnParameterGroup(
            self,
            "Parameters",
            cache_parameter_group_family=PARAMETER_GROUP_FAMILY,
            description="payloadstore redis: cluster mode, never evict (a lost key is a lost job)",
            properties=dict(PARAMETERS),
        )

        self.replication_group_id = replication_group_id
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_id=self.replication_group_id,
            replication_group_description="payloadstore job queues, job state and inline payloads",
            engine="redis",
            engine_version=ENGINE_VERSION,
            cache_node_type=node_type,
            cache_parameter_group_name=self.parameter_group.ref,
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
    def min_replica_acks(self) -> int:
        """REDIS_MIN_REPLICA_ACKS for the functions: replication is asynchronous and there is no
        AOF in cluster mode, so with a replica per shard every reported write waits for it
        (WAIT); a failover then loses no acknowledged job or result (docs/deploying.md)."""
        return 1 if REPLICAS_PER_SHARD > 0 else 0

    @property
    def url(self) -> str:
        """rediss:// URL of the configuration endpoint (a cluster client discovers the shards)."""
        return (
            f"rediss://{self.replication_group.attr_configuration_end_point_address}"
            f":{self.replication_group.attr_configuration_end_point_port}/0"
        )
