"""The stage's cache, in one of two shapes (`-c payloadstore:cache=serverless|nodes`), on Valkey
by default (`-c payloadstore:cacheEngine=valkey|redis`):

- `nodes` (every stage but dev, by default): a replication group, cluster mode, Multi-AZ with
  replicas, TLS required, AUTH token, and a parameter group of our own that never evicts
  (RedisCache below);
- `serverless` (the dev stage, by default): ElastiCache Serverless (ServerlessValkeyCache below),
  TLS only, IAM authentication (no AUTH token, no secret), metered by data stored and ECPUs, with
  usage limits (`payloadstore:cacheMaxDataGb`, `:cacheMaxEcpuPerSecond`). What it supports and
  guarantees (no WAIT, scripts whose keys share a slot): docs/deploying.md.

On nodes:

Replicas per shard (issue 32): 2 for every stage but dev, 1 for dev (`payloadstore:cacheReplicas`
overrides, 1..5). Writes wait for one replica's acknowledgement (REDIS_MIN_REPLICA_ACKS=1): with two,
a shard whose primary dies and is replaced still has a replica beside the promoted one, so its
writes keep being acknowledged while ElastiCache rebuilds the lost node (minutes); with one, the
promoted primary has none until then (docs/deploying.md, "What a Redis failover costs").

Maintenance (node replacements, engine patches, minor version upgrades) happens only in the
weekly maintenance window set here, and the daily snapshot in its own window, apart from it and
from each other (`payloadstore:cacheMaintenanceWindow`, `:cacheSnapshotWindow`, UTC).
AutoMinorVersionUpgrade stays on: minor releases carry security fixes, AWS applies them only in
that window, one node at a time with a failover, which the replicas above make a few seconds of
503s on one shard (AWS Security Hub's ElastiCache.2 control asks for it too).

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

# engine -> (engine version, parameter group family) of the replication group.
NODE_ENGINES: dict[str, tuple[str, str]] = {
    "valkey": ("8.0", "valkey8"),
    "redis": ("7.1", "redis7"),
}
ENGINE_VERSION, PARAMETER_GROUP_FAMILY = NODE_ENGINES["redis"]
# engine -> the serverless cache's major engine version.
SERVERLESS_ENGINES: dict[str, str] = {"valkey": "8", "redis": "7"}
# A serverless cache serves on 6379 and its reader endpoint on 6380.
SERVERLESS_READER_PORT = 6380
# The default group (default.redis7.cluster.on) says volatile-lru: every job hash has a TTL, so
# under memory pressure Redis would evict live jobs while their stream entries stay. noeviction
# turns a full Redis into refused writes, which the control plane answers with 503.
PARAMETERS = {"cluster-enabled": "yes", "maxmemory-policy": "noeviction"}
DEFAULT_NODE_TYPE = "cache.t4g.small"
# Replicas per shard: production survives losing a primary with a replica still acknowledging;
# dev trades that for one node less per shard (its data is throw-away).
PRODUCTION_REPLICAS_PER_SHARD = 2
DEV_REPLICAS_PER_SHARD = 1
MAX_REPLICAS_PER_SHARD = 5  # ElastiCache's limit
# UTC. Sunday 05:00-06:00: the quietest hour for most; the snapshot (daily, retention 1) runs
# 03:00-04:00, finished well before maintenance starts (the two must not overlap).
DEFAULT_MAINTENANCE_WINDOW = "sun:05:00-sun:06:00"
DEFAULT_SNAPSHOT_WINDOW = "03:00-04:00"


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
        replicas_per_shard: int = PRODUCTION_REPLICAS_PER_SHARD,
        maintenance_window: str = DEFAULT_MAINTENANCE_WINDOW,
        snapshot_window: str = DEFAULT_SNAPSHOT_WINDOW,
        engine: str = "valkey",
    ) -> None:
        super().__init__(scope, construct_id)
        engine_version, parameter_family = NODE_ENGINES[engine]
        self.engine = engine
        if not 1 <= replicas_per_shard <= MAX_REPLICAS_PER_SHARD:
            raise ValueError(
                f"replicas per shard must be 1..{MAX_REPLICAS_PER_SHARD} (automatic failover "
                f"needs one); got {replicas_per_shard}"
            )
        self.replicas_per_shard = replicas_per_shard
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
            cache_parameter_group_family=parameter_family,
            description=f"payloadstore {engine}: cluster mode, never evict (a lost key is a lost job)",
            properties=dict(PARAMETERS),
        )

        self.replication_group_id = replication_group_id
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_id=self.replication_group_id,
            replication_group_description="payloadstore job queues, job state and inline payloads",
            engine=engine,
            engine_version=engine_version,
            cache_node_type=node_type,
            cache_parameter_group_name=self.parameter_group.ref,
            cluster_mode="enabled",
            num_node_groups=shards,
            replicas_per_node_group=replicas_per_shard,
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
            snapshot_window=snapshot_window,
            preferred_maintenance_window=maintenance_window,
            # Minor versions carry security fixes; applied only in the window above (docstring).
            auto_minor_version_upgrade=True,
        )
        self.replication_group.apply_removal_policy(removal)
        self.node_ids = [
            f"{self.replication_group_id}-{shard:04d}-{node:03d}"
            for shard in range(1, shards + 1)
            for node in range(1, replicas_per_shard + 2)
        ]

    shape = "nodes"
    iam_user_id: str | None = None
    iam_cache_name: str | None = None

    def grant_connect(self, role) -> None:
        """Nothing to grant: connections authenticate with the AUTH token (the secret)."""

    @property
    def min_replica_acks(self) -> int:
        """REDIS_MIN_REPLICA_ACKS for the functions: replication is asynchronous and there is no
        AOF in cluster mode, so every reported write waits for one replica (WAIT); a failover
        then loses no acknowledged job or result (docs/deploying.md). One of two replicas, so a
        shard that lost a node still acknowledges."""
        return 1

    @property
    def url(self) -> str:
        """rediss:// URL of the configuration endpoint (a cluster client discovers the shards)."""
        return (
            f"rediss://{self.replication_group.attr_configuration_end_point_address}"
            f":{self.replication_group.attr_configuration_end_point_port}/0"
        )


class ServerlessValkeyCache(Construct):
    """ElastiCache Serverless (Valkey by default): one endpoint, TLS only, IAM authentication.

    The functions connect as one ElastiCache user whose authentication mode is IAM (its user
    name must equal its id), in a user group of the cache. On Redis OSS the group also holds a
    `default` user that is off (a Redis OSS user group must have one); on Valkey it does not:
    AWS lets a VALKEY user group hold only users that authenticate with a password or IAM, so
    a no-password `default` would fail CreateUserGroup (ElastiCache RBAC docs). Their roles get
    elasticache:Connect on the cache and that user (grant_connect); a connection's password is
    a SigV4-signed token (functions' store/elasticache_iam.py). No secret, so no Secrets
    Manager endpoint.

    No WAIT: REDIS_MIN_REPLICA_ACKS is 0 in this shape (docs/deploying.md says what an
    acknowledged write means here). Teardown deletes it with the stack: a dev stage's jobs are
    throw-away, and a retained cache would keep the VPC alive as the replication group would.
    """

    shape = "serverless"
    node_ids: tuple[str, ...] = ()

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        clients: ec2.ISecurityGroup,
        cache_name: str,
        engine: str = "valkey",
        max_data_gb: int,
        max_ecpu_per_second: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.engine = engine
        self.cache_name = cache_name
        self.auth_secret = None
        self.security_group = ec2.SecurityGroup(
            self,
            "Sg",
            vpc=vpc,
            description=f"payloadstore {engine} serverless: reachable from the functions only",
            allow_all_outbound=False,
        )
        ports = ec2.Port.tcp_range(REDIS_PORT, SERVERLESS_READER_PORT)
        self.security_group.add_ingress_rule(
            clients, ports, "cache from the control-plane functions"
        )
        clients.add_egress_rule(self.security_group, ports, "cache of this stage")

        self.iam_user_id = f"{cache_name}-functions"
        functions_user = elasticache.CfnUser(
            self,
            "FunctionsUser",
            engine=engine,
            user_id=self.iam_user_id,
            user_name=self.iam_user_id,
            # Every command on every key: the control plane is the cache's only client.
            access_string="on ~* &* +@all",
            authentication_mode={"Type": "iam"},
        )
        members = [functions_user]
        if engine == "redis":
            members.append(
                elasticache.CfnUser(
                    self,
                    "DefaultUser",
                    engine=engine,
                    user_id=f"{cache_name}-default",
                    user_name="default",
                    access_string="off -@all",
                    authentication_mode={"Type": "no-password-required"},
                )
            )
        self.user_group = elasticache.CfnUserGroup(
            self,
            "Users",
            engine=engine,
            user_group_id=cache_name,
            user_ids=[user.user_id for user in members],
        )
        for user in members:
            self.user_group.add_resource_dependency(user)
        self.cache = elasticache.CfnServerlessCache(
            self,
            "ServerlessCache",
            engine=engine,
            major_engine_version=SERVERLESS_ENGINES[engine],
            serverless_cache_name=cache_name,
            description="payloadstore job queues, job state and inline payloads",
            cache_usage_limits=elasticache.CfnServerlessCache.CacheUsageLimitsProperty(
                data_storage=elasticache.CfnServerlessCache.DataStorageProperty(
                    unit="GB", maximum=max_data_gb
                ),
                ecpu_per_second=elasticache.CfnServerlessCache.ECPUPerSecondProperty(
                    maximum=max_ecpu_per_second
                ),
            ),
            security_group_ids=[self.security_group.security_group_id],
            subnet_ids=vpc.select_subnets(subnet_type=subnets.subnet_type).subnet_ids,
            user_group_id=self.user_group.user_group_id,
        )
        self.cache.add_resource_dependency(self.user_group)
        self.cache.apply_removal_policy(cdk.RemovalPolicy.DESTROY)
        self.max_data_gb = max_data_gb
        self.max_ecpu_per_second = max_ecpu_per_second
        self.iam_cache_name = cache_name

    def grant_connect(self, role) -> None:
        """elasticache:Connect on this cache and the functions' IAM user (AWS: both ARNs)."""
        from aws_cdk import aws_iam as iam

        stack = cdk.Stack.of(self)
        user_arn = stack.format_arn(
            service="elasticache",
            resource="user",
            resource_name=self.iam_user_id,
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["elasticache:Connect"], resources=[self.cache.attr_arn, user_arn]
            )
        )

    @property
    def min_replica_acks(self) -> int:
        """0: serverless does not offer WAIT (docs/deploying.md, with AWS's sources)."""
        return 0

    @property
    def url(self) -> str:
        return f"rediss://{self.cache.attr_endpoint_address}:{self.cache.attr_endpoint_port}/0"
