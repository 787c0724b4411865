"""Alarms that need a human: corrupt payloads, API 5xx, Redis memory. All go to one SNS topic."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import METRICS_NAMESPACE, SERVICE_NAME

# A corrupt payload is never expected: one is a bug or tampering, so any count alarms.
PAYLOAD_CORRUPT_METRIC = "PayloadCorrupt"
API_5XX_THRESHOLD = 5  # per 5 minutes: more than a blip while Redis fails over
REDIS_MEMORY_PERCENT = 80  # leaves room to add a shard before evictions or OOM errors


class Alarms(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        api: apigw.RestApi,
        redis_node_ids: list[str],
        email: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", display_name="payloadstore alarms", enforce_ssl=True)
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        action = cw_actions.SnsAction(self.topic)

        corrupt = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=PAYLOAD_CORRUPT_METRIC,
            dimensions_map={"service": SERVICE_NAME},
            statistic="Sum",
            period=cdk.Duration.minutes(1),
        )
        self.payload_corrupt = corrupt.create_alarm(
            self,
            "PayloadCorrupt",
            alarm_description="a daemon reported a payload whose sha256 did not match its reference",
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

        self.api_5xx = api.metric_server_error(
            period=cdk.Duration.minutes(5), statistic="Sum"
        ).create_alarm(
            self,
            "Api5xx",
            alarm_description=f"the API answered more than {API_5XX_THRESHOLD} 5xx in 5 minutes",
            threshold=API_5XX_THRESHOLD,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

        node_metrics = {
            f"m{i}": cloudwatch.Metric(
                namespace="AWS/ElastiCache",
                metric_name="DatabaseMemoryUsagePercentage",
                dimensions_map={"CacheClusterId": node_id},
                statistic="Maximum",
                period=cdk.Duration.minutes(5),
            )
            for i, node_id in enumerate(redis_node_ids)
        }
        self.redis_memory = cloudwatch.MathExpression(
            expression="MAX([" + ",".join(node_metrics) + "])",
            using_metrics=node_metrics,
            label="redis memory used, fullest node (%)",
            period=cdk.Duration.minutes(5),
        ).create_alarm(
            self,
            "RedisMemory",
            alarm_description=f"a redis node uses more than {REDIS_MEMORY_PERCENT}% of its memory",
            threshold=REDIS_MEMORY_PERCENT,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=2,
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        for alarm in (self.payload_corrupt, self.api_5xx, self.redis_memory):
            alarm.add_alarm_action(action)
