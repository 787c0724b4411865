"""The operations dashboard, and the alarm on a queue that stopped draining.

Plain `aws_cloudwatch` rather than cdk-monitoring-constructs: the widgets name our own EMF metrics
and dimensions exactly (a test checks them against what the code emits), and one more jsii
dependency would buy little for one dashboard.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from payloadstore_controlplane.routes import ROUTES

PERIOD = cdk.Duration.minutes(1)
# EMF metrics the widgets show (each is emitted by functions/payloadstore_controlplane, see observability.py).
JOBS_ENQUEUED = "JobsEnqueued"
JOBS_COMPLETED = "JobsCompleted"
PAYLOAD_BYTES = "PayloadBytes"
QUEUE_DEPTH = "QueueDepth"
IN_FLIGHT = "InFlight"
OLDEST_JOB_AGE = "OldestJobAgeSeconds"
PAYLOAD_PROBLEMS = ("PayloadCorrupt", "PayloadLost")


class OperationsDashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        api: apigw.RestApi,
        stage_name: str,
        metrics_namespace: str,
        service: str,
        redis_node_ids: list[str],
        topic: sns.ITopic,
        oldest_job_age_alarm_s: int,
        rerouted_metric: str | None = None,
        detailed_metrics: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self._ns = metrics_namespace
        self._service = service
        stack = cdk.Stack.of(self)
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{stack.stack_name}-operations",
            default_interval=cdk.Duration.hours(3),
        )
        self._build_api_widgets(api, stage_name, detailed_metrics)
        self._build_job_widgets()
        self._build_queue_widgets()
        self._build_storage_widgets(redis_node_ids, rerouted_metric)
        self.oldest_job_age = self._build_oldest_age_alarm(topic, oldest_job_age_alarm_s)

    # -- helpers -------------------------------------------------------------------------

    def _emf(self, name: str, statistic: str = "Sum", **dimensions: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=self._ns,
            metric_name=name,
            dimensions_map={"service": self._service, **dimensions},
            statistic=statistic,
            period=PERIOD,
        )

    def _search(
        self, name: str, dimensions: str, statistic: str, label: str
    ) -> cloudwatch.MathExpression:
        """Every series of an EMF metric, whatever its dimension values (one line each)."""
        return cloudwatch.MathExpression(
            expression=f"SEARCH('{{{self._ns},{dimensions}}} MetricName=\"{name}\"', "
            f"'{statistic}', {int(PERIOD.to_seconds())})",
            label=label,
            period=PERIOD,
        )

    # -- widgets -------------------------------------------------------------------------

    def _build_api_widgets(self, api: apigw.RestApi, stage_name: str, per_method: bool) -> None:
        """Requests and latency per route where per-method metrics are on
        (payloadstore:detailedMetrics), else the stage's own (free) figures."""

        def per_route(metric: str, statistic: str) -> list[cloudwatch.IMetric]:
            return [
                cloudwatch.Metric(
                    namespace="AWS/ApiGateway",
                    metric_name=metric,
                    dimensions_map={
                        "ApiName": api.rest_api_name,
                        "Method": route.method,
                        "Resource": route.path,
                        "Stage": stage_name,
                    },
                    statistic=statistic,
                    period=PERIOD,
                    label=f"{route.method} {route.path}",
                )
                for route in ROUTES
            ]

        def whole_api(metric: str, statistic: str) -> list[cloudwatch.IMetric]:
            return [api.metric(metric, period=PERIOD, statistic=statistic, label="all routes")]

        series, scope = (per_route, "per route") if per_method else (whole_api, "(all routes)")
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title=f"Requests {scope}", left=series("Count", "Sum"), width=12, stacked=True
            ),
            cloudwatch.GraphWidget(
                title="API 4xx / 5xx",
                left=[
                    api.metric_client_error(period=PERIOD, statistic="Sum"),
                    api.metric_server_error(period=PERIOD, statistic="Sum"),
                ],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title=f"Latency p50 {scope} (ms)", left=series("Latency", "p50"), width=12
            ),
            cloudwatch.GraphWidget(
                title=f"Latency p99 {scope} (ms)", left=series("Latency", "p99"), width=12
            ),
        )

    def _build_job_widgets(self) -> None:
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Jobs enqueued by tier",
                left=[self._emf(JOBS_ENQUEUED, tier=t) for t in ("inline", "s3")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Jobs completed by state",
                left=[self._search(JOBS_COMPLETED, "service,state", "Sum", "")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Payload bytes by tier",
                left=[
                    self._emf(PAYLOAD_BYTES, tier=t, kind=k)
                    for t in ("inline", "s3")
                    for k in ("args", "result")
                ],
                width=8,
            ),
        )

    def _build_queue_widgets(self) -> None:
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Queue depth (per namespace and queue)",
                left=[self._search(QUEUE_DEPTH, "namespace,queue,service", "Maximum", "")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="In flight (per namespace and queue)",
                left=[self._search(IN_FLIGHT, "namespace,queue,service", "Maximum", "")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Oldest queued job age (s)",
                left=[self._emf(OLDEST_JOB_AGE, "Maximum")],
                width=8,
            ),
        )

    def _build_storage_widgets(
        self, redis_node_ids: list[str], rerouted_metric: str | None
    ) -> None:
        memory = [
            cloudwatch.Metric(
                namespace="AWS/ElastiCache",
                metric_name="DatabaseMemoryUsagePercentage",
                dimensions_map={"CacheClusterId": node_id},
                statistic="Maximum",
                period=PERIOD,
                label=node_id,
            )
            for node_id in redis_node_ids
        ]
        problems = [self._emf(name) for name in PAYLOAD_PROBLEMS]
        if rerouted_metric:
            problems.append(self._emf(rerouted_metric))
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Redis memory used (%)", left=memory, width=12),
            cloudwatch.GraphWidget(
                title="Rerouted, corrupt and lost payloads", left=problems, width=12
            ),
        )

    def _build_oldest_age_alarm(self, topic: sns.ITopic, threshold_s: int) -> cloudwatch.Alarm:
        alarm = self._emf(OLDEST_JOB_AGE, "Maximum").create_alarm(
            self,
            "OldestJobAge",
            # Named after the stage like every alarm of the stack (infra/alarms.py).
            alarm_name=f"{cdk.Stack.of(self).stack_name}-OldestJobAge",
            alarm_description=f"a job has waited more than {threshold_s} s for a daemon: "
            "a queue stopped draining (no daemon, or too few)",
            threshold=threshold_s,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=3,
            # No data means the metrics function did not run: that is its own problem, not this one.
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(topic))
        return alarm
