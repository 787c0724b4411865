"""Logs, metrics and traces: one Logger, Tracer and Metrics for the whole control plane, and the
one decorator stack every `lambda_handler` wears.

Cold start: only what is switched on is imported. With tracing off (POWERTOOLS_TRACE_DISABLED,
or outside Lambda) the X-Ray SDK is never imported (Powertools' Tracer imports it even when
disabled, ~0.1-0.3 s); with metrics off (POWERTOOLS_METRICS_DISABLED) no Metrics object exists
and no ColdStart metric line is printed. See docs/operations.md ("Cold start").
"""

from __future__ import annotations

import functools
import os
import threading
import warnings

from aws_lambda_powertools.logging import Logger
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from .runtime.logformat import LeanJsonFormatter
from .runtime.once import built_once

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "payloadstore")
METRICS_NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "PayloadStore")

logger = Logger(service=SERVICE, logger_formatter=LeanJsonFormatter())


def tracing_enabled() -> bool:
    """Powertools' own rule: off when POWERTOOLS_TRACE_DISABLED is true, outside Lambda, or in
    SAM local; on otherwise (a deployed function with active tracing)."""
    if os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() in ("1", "true", "yes", "on"):
        return False
    if not os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or os.environ.get("AWS_SAM_LOCAL"):
        return False
    return not os.environ.get("CHALICE_LOCAL")


class _NoTracer:
    """What the handlers use of Powertools' Tracer, doing nothing (tracing off)."""

    disabled = True

    def put_annotation(self, key: str, value) -> None:
        return None

    def put_metadata(self, key: str, value, namespace: str | None = None) -> None:
        return None

    def capture_lambda_handler(self, handler=None, **_kwargs):
        return handler if handler is not None else (lambda fn: fn)

    def capture_method(self, method=None, **_kwargs):
        return method if method is not None else (lambda fn: fn)


def _make_tracer():
    if not tracing_enabled():
        return _NoTracer()
    from aws_lambda_powertools import Tracer

    return Tracer(service=SERVICE)


tracer = _make_tracer()


@built_once(maxsize=1)
def get_metrics():
    """The shared Metrics set (flushed by lambda_entry), created on first use."""
    from aws_lambda_powertools import Metrics

    return Metrics(service=SERVICE, namespace=METRICS_NAMESPACE)


# Routes that emit only per-dimension metrics (single_metric) leave the shared set empty.
warnings.filterwarnings("ignore", message="No application metrics to publish")


def metrics_count(name: str, value: float = 1, **dimensions: str) -> None:
    """Emit one EMF metric now, with its own dimensions (e.g. tier=s3, op=put)."""
    _emit(name, "Count", value, dimensions)


def metrics_bytes(name: str, value: float, **dimensions: str) -> None:
    _emit(name, "Bytes", value, dimensions)


# POWERTOOLS_METRICS_DISABLED as lambda_entry read it for the invocation this thread serves
# (None outside one): read once per invocation, not once per metric.
_invocation = threading.local()


def _metrics_off() -> bool:
    off = getattr(_invocation, "metrics_off", None)
    return is_metrics_disabled() if off is None else off


def _emit(name: str, unit: str, value: float, dimensions: dict[str, str]) -> None:
    # single_metric prints at once and ignores POWERTOOLS_METRICS_DISABLED; honour it here too.
    if _metrics_off():
        return
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with single_metric(
        name=name, unit=MetricUnit(unit), value=value, namespace=METRICS_NAMESPACE
    ) as metric:
        metric.add_dimension(name="service", value=SERVICE)
        for key, dim_value in dimensions.items():
            metric.add_dimension(name=key, value=str(dim_value))


# Queue figures published every minute by the scheduled metrics function.
QUEUE_DEPTH = "QueueDepth"
IN_FLIGHT = "InFlight"
# Jobs that ended failed within the retention and were not retried since (the queues route's
# `failed`, what `payloadstore queues` shows under FAILED).
FAILED_JOBS = "FailedJobs"
OLDEST_JOB_AGE = "OldestJobAgeSeconds"
REDIS_MEMORY_USED = "RedisMemoryUsedBytes"
REDIS_MEMORY_MAX = "RedisMemoryMaxBytes"

# A write found its node with fewer online replicas than REDIS_MIN_REPLICA_ACKS (at most once
# a second per node and container): the shard takes writes on fewer copies than asked for.
REPLICA_ACKS_BELOW_TARGET = "ReplicaAcksBelowTarget"

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
        # the job life cycle: deliveries past MAX_DELIVERIES, cancelled jobs
        "DeliveryLimitExceeded",
        "JobsCancelled",
        # operating the queues: jobs queued again by retry or redrive
        "JobsRetried",
        # the memory guard: inline bytes refused (and so rerouted through S3), enqueues refused
        "InlineRefused",
        "EnqueueRefused",
        # blobs: uploads verified; the renewer's copies, failures (tried again by its next runs)
        # and needed blobs found gone
        "BlobsVerified",
        "BlobsRenewed",
        "BlobRenewalsFailed",
        "BlobsLost",
        # result-and-next: a result post stored, but fetching the next jobs failed (answered none)
        "NextFetchFailed",
        # namespace policies: an upload refused for a missing retention tag or SSE key; objects
        # of `consume` namespaces deleted by the control plane
        "PolicyMismatch",
        "ConsumedDeleted",
        # enqueue-and-wait: the job was queued, its wait failed (answered 201 waited: false)
        "EnqueueWaitFailed",
        # a cancel whose wake-up of the holder's leases long-poll failed (it arrives with the
        # daemon's next renewal instead)
        "CancelWakeFailed",
        # the token store answered from its last good listing: SSM failed or throttled (alarm)
        "TokenListingStale",
        # a Redis node with fewer online replicas than REDIS_MIN_REPLICA_ACKS (alarm)
        REPLICA_ACKS_BELOW_TARGET,
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
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    batch = EphemeralMetrics(service=SERVICE, namespace=METRICS_NAMESPACE)
    for key, dim_value in dimensions.items():
        batch.add_dimension(name=key, value=str(dim_value))
    for name, (unit, value) in values.items():
        batch.add_metric(name=name, unit=MetricUnit[unit], value=value)
    batch.flush_metrics()


def replicas_below_target(node: str, online: int, target: int) -> None:
    """The store found `node` with `online` replicas where REDIS_MIN_REPLICA_ACKS is `target`
    (store/replicated.py): its writes now wait for `online` only."""
    metrics_count(REPLICA_ACKS_BELOW_TARGET)
    logger.warning(
        "redis replicas below target, writes wait for the online ones",
        extra={"node": node, "online_replicas": online, "min_replica_acks": target},
    )


def bind_job(job_id: str) -> None:
    """Make job_id the correlation id of every log line from here on in this invocation."""
    logger.set_correlation_id(job_id)
    logger.append_keys(job_id=job_id)
    tracer.put_annotation(key="job_id", value=job_id)


def lambda_entry(handler):
    """The decorator stack of every lambda_handler: logger context, tracing, metrics flush.
    Traces carry timings and annotations only (job_id, ColdStart), never a response or an error
    body. Tracing and the metrics flush (with its ColdStart metric) are left out when switched off;
    POWERTOOLS_METRICS_DISABLED is read per invocation, as Powertools does.

    Decorating is the last thing a handler module does: its imports are done, and garbage
    collection, paused for them in Lambda, resumes (runtime/gcpause.py)."""
    from .runtime import gcpause

    gcpause.resume()
    if not isinstance(tracer, _NoTracer):
        # Never the answer nor the exception as trace metadata: answers hold plain tokens (mint),
        # presigned URLs and inline payload bytes, readable by anyone with X-Ray read access.
        # Explicit here, whatever POWERTOOLS_TRACER_CAPTURE_* say (the stacks set both false).
        handler = tracer.capture_lambda_handler(
            handler, capture_response=False, capture_error=False
        )
    inner = handler
    measured = None

    @functools.wraps(inner)
    def run(event, context):
        nonlocal measured
        # Powertools' correlation_id_path=API_GATEWAY_REST ("requestContext.requestId"), read
        # without a JMESPath search per invocation (None when absent, as the search gives).
        logger.set_correlation_id(_request_id(event))
        _invocation.metrics_off = off = is_metrics_disabled()
        try:
            if off:
                return inner(event, context)
            if measured is None:
                measured = get_metrics().log_metrics(capture_cold_start_metric=True)(inner)
            return measured(event, context)
        finally:
            _invocation.metrics_off = None

    return logger.inject_lambda_context(clear_state=True)(run)


def _request_id(event) -> str | None:
    context = event.get("requestContext") if isinstance(event, dict) else None
    return context.get("requestId") if isinstance(context, dict) else None
