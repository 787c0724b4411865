"""Alarms that need a human, all to one SNS topic of the stage (or a topic the user names).

- custom metrics the functions emit (EMF, the stage's namespace): PayloadCorrupt,
  DeliveryLimitExceeded (a job whose daemons died at each of MAX_DELIVERIES deliveries),
  ReplicaAcksBelowTarget (a shard taking writes on fewer replicas than REDIS_MIN_REPLICA_ACKS),
  TokenListingStale (the authorizer answering from its last good token listing: SSM failing);
- every function (generic over routes.FUNCTIONS): Lambda errors, throttles, duration near timeout;
  the authorizer's errors are its own function's errors (every guarded route fails with them);
- the API: 5xx;
- Redis, per node: memory, engine CPU, evictions (with noeviction, any eviction is a misconfiguration).

To add one: `stack.alarms.add(...)` with `stack.alarms.custom_metric(...)` for a metric the code
emits (tests/infra/test_infra_alarms.py checks its name and dimensions against the code).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import AUTHORIZER_FUNCTION, SERVICE_NAME, StageNames

# A corrupt payload is never expected: one is a bug or tampering, so any count alarms.
PAYLOAD_CORRUPT_METRIC = "PayloadCorrupt"
DELIVERY_LIMIT_METRIC = "DeliveryLimitExceeded"
# Emitted (at most once a second per node and container) while a shard has fewer online
# replicas than REDIS_MIN_REPLICA_ACKS: its acknowledged writes are on fewer copies than asked.
REPLICA_ACKS_BELOW_TARGET_METRIC = "ReplicaAcksBelowTarget"
# Emitted per request the authorizer answers from its last good token listing because SSM
# failed, throttled or hung (store/tokens.py): revocations are not seen meanwhile.
TOKEN_LISTING_STALE_METRIC = "TokenListingStale"
API_5XX_THRESHOLD = 5  # per 5 minutes: more than a blip while Redis fails over
REDIS_MEMORY_PERCENT = 80  # leaves room to add a shard before writes are refused
REDIS_ENGINE_CPU_PERCENT = 90  # Redis runs commands on one thread: past this, latency climbs
# Burstable (cache.t*) nodes run at a baseline (20% of a vCPU for t4g.small) and spend CPU
# credits above it; at zero they are throttled to the baseline and every call slows. One credit
# is one vCPU-minute; a t4g.small earns 24 an hour and holds at most 576. Below this the node
# has well under an hour of bursting left.
REDIS_CPU_CREDITS_LOW = 60
BURSTABLE_NODE_PREFIX = "cache.t"
# Duration alarms at this share of the function's timeout (p99 over 5 minutes, twice running).
# Long polls wait up to 20 s (25 s at most) on 28 s functions: 0.85 x 28 s = 23.8 s sits above
# the default wait, so an idle daemon's full-length polls do not alarm.
DURATION_NEAR_TIMEOUT = 0.85
# A metric-math alarm may use at most 10 metrics: one expression plus this many nodes.
NODES_PER_ALARM = 9
ONE_MINUTE = cdk.Duration.minutes(1)
FIVE_MINUTES = cdk.Duration.minutes(5)


def is_burstable(node_type: str | None) -> bool:
    """cache.t3.*, cache.t4g.*: nodes that run on CPU credits."""
    return bool(node_type) and str(node_type).startswith(BURSTABLE_NODE_PREFIX)


class Alarms(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: StageNames,
        api: apigw.RestApi,
        functions: dict[str, lambda_.Function],
        redis_node_ids: Sequence[str],
        email: str | None,
        topic_arn: str | None,
        redis_node_type: str | None = None,
        minimal: bool = False,
        serverless_cache_name: str | None = None,
        serverless_max_data_gb: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.names = names
        if topic_arn:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", topic_arn)
        else:
            self.topic = sns.Topic(
                self,
                "Topic",
                display_name=f"payloadstore {names.stage} alarms",
                enforce_ssl=True,
            )
            if email:
                self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self._action = cw_actions.SnsAction(self.topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}

        self.add(
            "Api5xx",
            api.metric_server_error(period=FIVE_MINUTES, statistic="Sum"),
            description=f"the API answered more than {API_5XX_THRESHOLD} 5xx in 5 minutes",
            threshold=API_5XX_THRESHOLD,
        )
        if serverless_cache_name:
            self._serverless_alarms(serverless_cache_name, serverless_max_data_gb)
        if minimal:
            # payloadstore:monitoring=minimal (the dev stage's default): the functions emit no
            # EMF metrics, so the alarms on them would never fire; per-function and per-node
            # alarms are $0.10 a metric each. What stays: the API's 5xx and the cache's limits.
            return
        self.add(
            "PayloadCorrupt",
            self.custom_metric(PAYLOAD_CORRUPT_METRIC),
            description="a daemon reported a payload whose sha256 did not match its reference",
            threshold=0,
        )
        self.add(
            "DeliveryLimitExceeded",
            self.custom_metric(DELIVERY_LIMIT_METRIC, period=FIVE_MINUTES),
            description="a job failed DeliveryLimitExceeded: its daemons died or lost it at each "
            "of MAX_DELIVERIES deliveries (a poison job: crash, OOM kill)",
            threshold=0,
        )
        self.add(
            "ReplicaAcksBelowTarget",
            self.custom_metric(REPLICA_ACKS_BELOW_TARGET_METRIC),
            description="a Redis shard has fewer online replicas than REDIS_MIN_REPLICA_ACKS "
            "(its replica was promoted, died or is still syncing): its writes are acknowledged "
            "on fewer copies until ElastiCache has replaced the replica (docs/deploying.md)",
            threshold=0,
        )
        self.add(
            "TokenListingStale",
            self.custom_metric(TOKEN_LISTING_STALE_METRIC, period=FIVE_MINUTES),
            description="the authorizer answered from its last good token listing: SSM Parameter "
            "Store failed, throttled or hung; a token revoked meanwhile still works, one minted "
            "meanwhile is not known yet, and past TOKEN_STALE_MAX_S requests fail "
            "(docs/operations.md, 'When SSM fails')",
            threshold=0,
        )
        for group in sorted(functions):
            self._function_alarms(group, functions[group])
        self._redis_alarms(list(redis_node_ids), burstable=is_burstable(redis_node_type))

    # --- building blocks (also for alarms added by other modules) ------------------------------

    def custom_metric(
        self,
        metric_name: str,
        *,
        statistic: str = "Sum",
        period: cdk.Duration = ONE_MINUTE,
        **dimensions: str,
    ) -> cloudwatch.Metric:
        """A metric the functions emit through observability.metrics_count: the stage's namespace,
        `service` plus exactly the dimensions the emitting call adds."""
        return cloudwatch.Metric(
            namespace=self.names.metrics_namespace,
            metric_name=metric_name,
            dimensions_map={"service": SERVICE_NAME, **dimensions},
            statistic=statistic,
            period=period,
        )

    def add(
        self,
        what: str,
        metric: cloudwatch.IMetric,
        *,
        description: str,
        threshold: float,
        evaluation_periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        ),
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        """An alarm named `PayloadStore-<stage>-<what>` that notifies the topic."""
        alarm = metric.create_alarm(
            self,
            what,
            alarm_name=self.names.alarm_name(what),
            alarm_description=f"payloadstore {self.names.stage}: {description}",
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        self.alarms[what] = alarm
        return alarm

    # --- the stack's own alarms -----------------------------------------------------------------

    def _function_alarms(self, group: str, fn: lambda_.Function) -> None:
        label = f"Fn{group.capitalize()}"
        if group == AUTHORIZER_FUNCTION:
            errors = "the bearer-token authorizer failed: every guarded route answered 500"
        else:
            errors = f"the {group} function crashed or timed out (Lambda Errors)"
        self.add(
            f"{label}Errors",
            fn.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
            description=errors,
            threshold=0,
        )
        self.add(
            f"{label}Throttles",
            fn.metric_throttles(period=FIVE_MINUTES, statistic="Sum"),
            description=f"the {group} function was throttled (account or reserved concurrency)",
            threshold=0,
        )
        timeout_ms = fn.timeout.to_milliseconds() if fn.timeout else 3000
        near_ms = round(timeout_ms * DURATION_NEAR_TIMEOUT)
        self.add(
            f"{label}DurationNearTimeout",
            fn.metric_duration(period=FIVE_MINUTES, statistic="p99"),
            description=(
                f"the {group} function's p99 duration passed {near_ms} ms of its "
                f"{timeout_ms} ms timeout twice running"
            ),
            threshold=near_ms,
            evaluation_periods=2,
        )

    def _node_metric(
        self, metric_name: str, statistic: str, node_ids: list[str], reduce: str, label: str
    ) -> cloudwatch.IMetric:
        node_metrics = {
            f"m{i}": cloudwatch.Metric(
                namespace="AWS/ElastiCache",
                metric_name=metric_name,
                dimensions_map={"CacheClusterId": node_id},
                statistic=statistic,
                period=FIVE_MINUTES,
            )
            for i, node_id in enumerate(node_ids)
        }
        return cloudwatch.MathExpression(
            expression=f"{reduce}([" + ",".join(node_metrics) + "])",
            using_metrics=node_metrics,
            label=label,
            period=FIVE_MINUTES,
        )

    def _serverless_alarms(self, cache_name: str, max_data_gb: int | None) -> None:
        """A serverless cache near its data limit (past it, writes are refused, and its fixed
        maxmemory-policy volatile-lru may evict keys with a TTL: job hashes), and commands it
        throttled (ECPU limit or scaling slower than the load)."""

        def metric(name: str, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace="AWS/ElastiCache",
                metric_name=name,
                dimensions_map={"clusterId": cache_name},
                statistic=statistic,
                period=FIVE_MINUTES,
            )

        if max_data_gb:
            self.add(
                "CacheDataNearLimit",
                metric("BytesUsedForCache", "Maximum"),
                description=f"the serverless cache holds more than {REDIS_MEMORY_PERCENT}% of "
                f"its {max_data_gb} GB limit (payloadstore:cacheMaxDataGb)",
                threshold=max_data_gb * 1e9 * REDIS_MEMORY_PERCENT / 100,
                missing=cloudwatch.TreatMissingData.MISSING,
            )
        self.add(
            "CacheThrottled",
            metric("ThrottledCmds", "Sum"),
            description="the serverless cache throttled commands: the ECPU/s limit "
            "(payloadstore:cacheMaxEcpuPerSecond) or load rising faster than it scales",
            threshold=0,
        )

    def _redis_alarms(self, node_ids: list[str], burstable: bool = False) -> None:
        chunks = [
            node_ids[i : i + NODES_PER_ALARM] for i in range(0, len(node_ids), NODES_PER_ALARM)
        ]
        for index, nodes in enumerate(chunks):
            suffix = "" if index == 0 else str(index + 1)
            self.add(
                f"RedisMemory{suffix}",
                self._node_metric(
                    "DatabaseMemoryUsagePercentage",
                    "Maximum",
                    nodes,
                    "MAX",
                    "redis memory used, fullest node (%)",
                ),
                description=f"a redis node uses more than {REDIS_MEMORY_PERCENT}% of its memory",
                threshold=REDIS_MEMORY_PERCENT,
                evaluation_periods=2,
                missing=cloudwatch.TreatMissingData.MISSING,
            )
            self.add(
                f"RedisEngineCpu{suffix}",
                self._node_metric(
                    "EngineCPUUtilization",
                    "Average",
                    nodes,
                    "MAX",
                    "redis engine CPU, busiest node (%)",
                ),
                description=(
                    f"a redis node's engine thread was above {REDIS_ENGINE_CPU_PERCENT}% "
                    "for 15 minutes"
                ),
                threshold=REDIS_ENGINE_CPU_PERCENT,
                evaluation_periods=3,
                missing=cloudwatch.TreatMissingData.MISSING,
            )
            self.add(
                f"RedisEvictions{suffix}",
                self._node_metric(
                    "Evictions", "Sum", nodes, "SUM", "redis keys evicted, all nodes"
                ),
                description=(
                    "redis evicted keys: the parameter group must say maxmemory-policy "
                    "noeviction, and an evicted job key is a lost job"
                ),
                threshold=0,
            )
            if burstable:
                self.add(
                    f"RedisCpuCredits{suffix}",
                    self._node_metric(
                        "CPUCreditBalance",
                        "Minimum",
                        nodes,
                        "MIN",
                        "redis CPU credits left, poorest node",
                    ),
                    description=(
                        f"a burstable redis node has fewer than {REDIS_CPU_CREDITS_LOW} CPU "
                        "credits left: at zero it is held to its baseline CPU and every call "
                        "slows (move to an m/r node type: docs/operations.md, node sizing)"
                    ),
                    threshold=REDIS_CPU_CREDITS_LOW,
                    comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                    evaluation_periods=2,
                    missing=cloudwatch.TreatMissingData.MISSING,
                )
