"""Logs, metrics and traces: one Logger, Tracer and Metrics for the whole control plane, and the
one decorator stack every `lambda_handler` wears."""

from __future__ import annotations

import os
import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit, single_metric

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "payloadstore")
METRICS_NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "PayloadStore")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=METRICS_NAMESPACE)

# Routes that emit only per-dimension metrics (single_metric) leave the shared set empty.
warnings.filterwarnings("ignore", message="No application metrics to publish")


def metrics_count(name: str, value: float = 1, **dimensions: str) -> None:
    """Emit one EMF metric now, with its own dimensions (e.g. tier=s3, op=put)."""
    _emit(name, MetricUnit.Count, value, dimensions)


def metrics_bytes(name: str, value: float, **dimensions: str) -> None:
    _emit(name, MetricUnit.Bytes, value, dimensions)


def _emit(name: str, unit: MetricUnit, value: float, dimensions: dict[str, str]) -> None:
    # single_metric prints at once and ignores POWERTOOLS_METRICS_DISABLED; honour it here too.
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
        return
    with single_metric(name=name, unit=unit, value=value, namespace=METRICS_NAMESPACE) as metric:
        metric.add_dimension(name="service", value=SERVICE)
        for key, dim_value in dimensions.items():
            metric.add_dimension(name=key, value=str(dim_value))


# Queue figures published every minute by the scheduled metrics function.
QUEUE_DEPTH = "QueueDepth"
IN_FLIGHT = "InFlight"
OLDEST_JOB_AGE = "OldestJobAgeSeconds"
REDIS_MEMORY_USED = "RedisMemoryUsedBytes"
REDIS_MEMORY_MAX = "RedisMemoryMaxBytes"

# Every metric name the control plane emits. The dashboard and the alarms may name only these
# (tests/infra checks both, and that every metrics_count/metrics_bytes name in the code is here).
EMITTED_METRICS = frozenset(
    {
        "JobsEnqueued",
        "JobsDelivered",
        "JobsCompleted",
        "PayloadBytes",
        "Presigns",
        "PayloadCorrupt",
        "PayloadLost",
        QUEUE_DEPTH,
        IN_FLIGHT,
        OLDEST_JOB_AGE,
        REDIS_MEMORY_USED,
        REDIS_MEMORY_MAX,
    }
)


def emit_metric_set(dimensions: dict[str, str], values: dict[str, tuple[str, float]]) -> None:
    """Several metrics sharing one dimension set, in one EMF document (name -> (unit, value))."""
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
        return
    from aws_lambda_powertools.metrics import EphemeralMetrics

    batch = EphemeralMetrics(service=SERVICE, namespace=METRICS_NAMESPACE)
    for key, dim_value in dimensions.items():
        batch.add_dimension(name=key, value=str(dim_value))
    for name, (unit, value) in values.items():
        batch.add_metric(name=name, unit=MetricUnit[unit], value=value)
    batch.flush_metrics()


def bind_job(job_id: str) -> None:
    """Make job_id the correlation id of every log line from here on in this invocation."""
    logger.set_correlation_id(job_id)
    logger.append_keys(job_id=job_id)
    tracer.put_annotation(key="job_id", value=job_id)


def lambda_entry(handler):
    """The decorator stack of every lambda_handler: logger context, tracing, metrics flush."""
    handler = metrics.log_metrics(capture_cold_start_metric=True)(handler)
    handler = tracer.capture_lambda_handler(handler)
    return logger.inject_lambda_context(
        correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
    )(handler)
