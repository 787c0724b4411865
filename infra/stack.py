"""One stage of the payload store (`PayloadStore-<stage>`): storage, network, cache, functions, API
and alarms, wired together."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from infra.alarms import Alarms
from infra.api import DEFAULT_THROTTLE_BURST, DEFAULT_THROTTLE_RATE, ControlPlaneApi
from infra.cache import (
    DEFAULT_MAINTENANCE_WINDOW,
    DEFAULT_NODE_TYPE,
    DEFAULT_SNAPSHOT_WINDOW,
    DEV_REPLICAS_PER_SHARD,
    PRODUCTION_REPLICAS_PER_SHARD,
    RedisCache,
    ServerlessValkeyCache,
)
from infra.config import (
    ADMIN_FUNCTION,
    AUTHORIZER_FUNCTION,
    CTX_ALARM_EMAIL,
    CTX_ALARM_TOPIC_ARN,
    CTX_CACHE_MAINTENANCE_WINDOW,
    CTX_CACHE_NODE_TYPE,
    CTX_CACHE_SHARDS,
    CTX_CACHE_SNAPSHOT_WINDOW,
    CTX_OLDEST_JOB_AGE_ALARM_S,
    CTX_SNAP_START,
    CTX_THROTTLE_BURST,
    CTX_THROTTLE_RATE,
    DEFAULT_OLDEST_JOB_AGE_ALARM_S,
    DEFAULT_STAGE,
    REDIS_FUNCTIONS,
    SERVICE_NAME,
    StageNames,
    availability_zone_ids_of,
    cache_engine_of,
    cache_replicas_of,
    cache_shape_of,
    cache_windows,
    context_bool,
    context_int,
    context_str,
    destroy_on_removal,
    detailed_metrics_of,
    kms_keys_of,
    monitoring_of,
    serverless_limits_of,
)
from infra.dashboard import OperationsDashboard
from infra.functions import ControlPlaneFunctions, snap_start_entrypoints
from infra.network import Network
from infra.schedules import Schedules
from infra.storage import PayloadStorage
from payloadstore_controlplane.routes import SCHEDULES


class AlarmDestinationMissing(ValueError):
    """A stage other than dev would raise alarms nobody receives."""


def alarm_destination(scope: Construct, stage: str) -> tuple[str | None, str | None]:
    """(email, topic ARN) from context; refuses a stage other than dev without either."""
    email = context_str(scope, CTX_ALARM_EMAIL, "") or None
    topic_arn = context_str(scope, CTX_ALARM_TOPIC_ARN, "") or None
    if email and topic_arn:
        raise ValueError(f"set one of -c {CTX_ALARM_EMAIL} and -c {CTX_ALARM_TOPIC_ARN}, not both")
    if not (email or topic_arn) and stage != DEFAULT_STAGE:
        raise AlarmDestinationMissing(
            f"stage {stage!r}: alarms would reach no one. Pass -c {CTX_ALARM_EMAIL}=you@example.com "
            f"(a topic is created and the address subscribed) or -c {CTX_ALARM_TOPIC_ARN}=arn:... "
            f"(an existing SNS topic). Only the {DEFAULT_STAGE!r} stage may go without."
        )
    return email, topic_arn


class PayloadStoreStack(cdk.Stack):
    def __init__(self, scope: Construct, *, stage: str, **kwargs) -> None:
        names = StageNames(stage)
        super().__init__(scope, names.stack_name, **kwargs)
        self.names = names
        destroy = destroy_on_removal(self)
        email, topic_arn = alarm_destination(self, stage)

        self.storage = PayloadStorage(
            self,
            "Storage",
            destroy_on_removal=destroy,
        )
        self.cache_shape = cache_shape_of(self, stage)
        self.monitoring = monitoring_of(self, stage)
        engine = cache_engine_of(self)
        self.network = Network(
            self,
            "Network",
            destroy_on_removal=destroy,
            # Only the nodes' AUTH token is read from Secrets Manager inside the VPC.
            secrets_endpoint=self.cache_shape == "nodes",
            availability_zone_ids=availability_zone_ids_of(self),
        )
        self.cache: RedisCache | ServerlessValkeyCache
        if self.cache_shape == "serverless":
            max_data_gb, max_ecpu = serverless_limits_of(self)
            self.cache = ServerlessValkeyCache(
                self,
                "Cache",
                vpc=self.network.vpc,
                subnets=self.network.isolated,
                clients=self.network.functions_sg,
                cache_name=names.replication_group_id,
                engine=engine,
                max_data_gb=max_data_gb,
                max_ecpu_per_second=max_ecpu,
            )
        else:
            maintenance_window, snapshot_window = cache_windows(
                context_str(self, CTX_CACHE_MAINTENANCE_WINDOW, DEFAULT_MAINTENANCE_WINDOW),
                context_str(self, CTX_CACHE_SNAPSHOT_WINDOW, DEFAULT_SNAPSHOT_WINDOW),
            )
            self.cache = RedisCache(
                self,
                "Cache",
                vpc=self.network.vpc,
                subnets=self.network.isolated,
                clients=self.network.functions_sg,
                replication_group_id=names.replication_group_id,
                node_type=context_str(self, CTX_CACHE_NODE_TYPE, DEFAULT_NODE_TYPE),
                shards=context_int(self, CTX_CACHE_SHARDS, 1),
                replicas_per_shard=cache_replicas_of(
                    self, stage, PRODUCTION_REPLICAS_PER_SHARD, DEV_REPLICAS_PER_SHARD
                ),
                maintenance_window=maintenance_window,
                snapshot_window=snapshot_window,
                destroy_on_removal=destroy,
                engine=engine,
            )
        auth_secret = self.cache.auth_secret
        self.functions = ControlPlaneFunctions(
            self,
            "Functions",
            names=names,
            vpc=self.network.vpc,
            subnets=self.network.isolated,
            security_group=self.network.functions_sg,
            bucket_arn=self.storage.bucket.bucket_arn,
            bucket_name=self.storage.bucket.bucket_name,
            redis_url=self.cache.url,
            redis_cluster=True,
            redis_auth_secret_arn=auth_secret.secret_arn if auth_secret is not None else None,
            # Nodes: acknowledged means replicated, every reported write WAITs for a replica.
            # Serverless: no WAIT (docs/deploying.md says what an acknowledgement means there).
            redis_min_replica_acks=self.cache.min_replica_acks,
            redis_iam=(self.cache.iam_cache_name, self.cache.iam_user_id)
            if self.cache.iam_cache_name and self.cache.iam_user_id
            else None,
            metrics_enabled=self.monitoring == "full",
            destroy_on_removal=destroy,
            kms_key_arn=self.storage.key.key_arn,
            extra_kms_keys=kms_keys_of(self),
        )
        for group in REDIS_FUNCTIONS:
            self.cache.grant_connect(self.functions.roles[group])
        scheduled = {s.function for s in SCHEDULES}
        api_functions = {
            group: fn
            for group, fn in self.functions.functions.items()
            if group not in (AUTHORIZER_FUNCTION, ADMIN_FUNCTION) and group not in scheduled
        }
        authorizer_function = self.functions.functions[AUTHORIZER_FUNCTION]
        if context_bool(self, CTX_SNAP_START):
            live = snap_start_entrypoints(self.functions, [*api_functions, AUTHORIZER_FUNCTION])
            api_functions = {group: live[group] for group in api_functions}
            authorizer_function = live[AUTHORIZER_FUNCTION]
        self.api = ControlPlaneApi(
            self,
            "Api",
            stage_name=stage,
            functions=api_functions,
            authorizer_function=authorizer_function,
            throttle_rate=context_int(self, CTX_THROTTLE_RATE, DEFAULT_THROTTLE_RATE),
            throttle_burst=context_int(self, CTX_THROTTLE_BURST, DEFAULT_THROTTLE_BURST),
            destroy_on_removal=destroy,
            detailed_metrics=detailed_metrics_of(self),
        )
        self.alarms = Alarms(
            self,
            "Alarms",
            names=names,
            api=self.api.api,
            functions=self.functions.functions,
            redis_node_ids=self.cache.node_ids,
            email=email,
            topic_arn=topic_arn,
            redis_node_type=context_str(self, CTX_CACHE_NODE_TYPE, DEFAULT_NODE_TYPE),
            minimal=self.monitoring == "minimal",
            serverless_cache_name=self.cache.iam_cache_name,
            serverless_max_data_gb=getattr(self.cache, "max_data_gb", None),
        )
        self.schedules = Schedules(self, "Schedules", functions=self.functions.functions)
        self.dashboard: OperationsDashboard | None = None
        if self.monitoring == "full":
            self._add_dashboard(names, stage)
        self._add_outputs(names)

    def _add_dashboard(self, names: StageNames, stage: str) -> None:
        self.dashboard = OperationsDashboard(
            self,
            "Dashboard",
            api=self.api.api,
            stage_name=self.api.api.deployment_stage.stage_name,
            metrics_namespace=names.metrics_namespace,
            service=SERVICE_NAME,
            redis_node_ids=list(self.cache.node_ids),
            detailed_metrics=detailed_metrics_of(self),
            topic=self.alarms.topic,
            rerouted_metric="InlineRefused",
            oldest_job_age_alarm_s=context_int(
                self, CTX_OLDEST_JOB_AGE_ALARM_S, DEFAULT_OLDEST_JOB_AGE_ALARM_S
            ),
        )

    def _add_outputs(self, names: StageNames) -> None:
        cdk.CfnOutput(self, "ApiUrl", value=self.api.url, description="base URL of the v1 API")
        cdk.CfnOutput(
            self,
            "PayloadBucketName",
            value=self.storage.bucket.bucket_name,
            description="bucket holding payloads/ (2-day lifecycle)",
        )
        cdk.CfnOutput(
            self,
            "TokenParameterPath",
            value=self.functions.token_path,
            description="SSM Parameter Store path of this deployment's tokens (one parameter per "
            "token hash)",
        )
        cdk.CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.alarms.topic.topic_arn,
            description="SNS topic of this stage's alarms (docs/operations.md lists them)",
        )
        cdk.CfnOutput(
            self,
            "AdminFunctionName",
            value=self.functions.functions[ADMIN_FUNCTION].function_name,
            description="mint or revoke tokens: payloadstore admin --function <this> ...",
        )
        if self.cache.auth_secret is not None:
            cdk.CfnOutput(
                self,
                "RedisAuthSecretArn",
                value=self.cache.auth_secret.secret_arn,
                description="Secrets Manager secret holding the Redis AUTH token",
            )
