"""The cost model: measured inputs x list prices -> dollars. Pure arithmetic, no I/O.

Inputs (all measured on the local stack, see tools/cost/measure.py and bench/bench_function_cpu.py):
- CPU ms per call of each route, and the log bytes a call prints, per function;
- control-plane calls per job (by route, per tier) and per idle minute of a daemon process, and
  the share of an idle minute a poll is in flight (the daemon function is held for its wait);
- the stack's shape as synthesized (tools/cost/shape.py): functions' memory and architecture,
  cache nodes, interface endpoints, NAT gateways, alarms, dashboards, API methods, secrets.
Each figure below is a list of (item, dollars) lines so the document can show its arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tools.cost.prices import price

MONTH_S = 30 * 86_400  # a 30-day month: 2,592,000 s, 720 h, 43,200 min
MONTH_H = MONTH_S / 3600
MONTH_MIN = MONTH_S / 60
VCPU_MB = 1769  # Lambda: 1,769 MB of memory = one vCPU; CPU share scales with memory
GIB = 1024**3

# What a call waits on besides its own CPU, on AWS (not measurable here): one Redis round trip in
# the VPC with the replica's WAIT (REDIS_MIN_REPLICA_ACKS=1), and an S3 HEAD where the call checks
# an upload (enqueue of a reference, result post of a reference).
REDIS_CALL_MS = 2.0
S3_HEAD_MS = 15.0
# A cache miss at API Gateway runs the authorizer, which may list the token path (SSM) first.
AUTHORIZER_IO_MS = 20.0
AUTHORIZER_CACHE_S = 60  # infra/api.py AUTHORIZER_CACHE_TTL
# Log bytes per call that the local stack cannot print: Lambda's START/END/REPORT lines (REPORT
# with the X-Ray trace id), and API Gateway's access log line (infra/api.py's JSON fields).
LAMBDA_PLATFORM_LOG_BYTES = 420
ACCESS_LOG_BYTES = 260
# X-Ray's default sampling rule: the first request each second, then 5 %. An idle daemon's polls
# (one every few seconds) all fall in that reservoir; a workload's calls are charged at 5 % (the
# reservoir is worth at most 2.59 M traces, $12.96, a month whatever the workload).
XRAY_BUSY_FRACTION = 0.05
XRAY_IDLE_FRACTION = 1.0
# API Gateway's per-method CloudWatch metrics (metricsEnabled): Count, 4XXError, 5XXError,
# Latency, IntegrationLatency, each a custom metric (no cache: no CacheHit/MissCount).
METRICS_PER_METHOD = 5
# EMF series the functions emit (observability.py): event counters by their dimension values,
# ColdStart per function, the stack-wide queue figures, and three per queue.
EMF_EVENT_SERIES = 17
EMF_STACK_SERIES = 3
EMF_SERIES_PER_QUEUE = 3
# S3 lifecycle: payloads expire 2 whole days after the midnight following their upload, so an
# object lives 2-3 days (2.5 on average); the CP never deletes one earlier.
S3_TIER_DAYS = 2.5
# A namespace with retention `consume` (docs/operations.md, "Namespace policies"): the control
# plane deletes a succeeded job's arguments within a minute of its success (a result minutes
# after its first read), so an object is stored while the job waits and runs: 1 hour assumed,
# as for the SQS comparison below.
S3_CONSUME_HOURS = 1.0
# SQS + Extended Client: the payload object is deleted with the message (its default), so it is
# stored while the job waits and runs; assumed 1 hour.
SQS_S3_HOURS = 1.0
SQS_LONG_POLL_S = 20  # ReceiveMessage's longest wait
SQS_CHUNK_BYTES = 64 * 1024
# ElastiCache Serverless bills the data it holds from a minimum (Valkey 100 MB, Redis OSS 1 GB)
# and ECPUs: 1 per simple command moving up to 1 KB, more for larger values and for scripts by
# their vCPU time. A job is ~5 scripts and a few plain commands (ARCHITECTURE.md: ~313 us of
# server time); counted here as ECPUS_PER_JOB plus 2 per KB of inline payload (written once,
# read once). An estimate, not a measurement: AWS publishes no ECPU figure per script.
SERVERLESS_MIN_GB = {"valkey": 0.1, "redis": 1.0}
ECPUS_PER_JOB = 40
# What the metrics function's run reads each minute (a few keys per queue).
ECPUS_PER_SCHEDULED_RUN = 10


@dataclass(frozen=True)
class Function:
    memory_mb: int
    architecture: str = "x86_64"

    @property
    def gb(self) -> float:
        return self.memory_mb / 1024

    @property
    def gb_s_price(self) -> float:
        return price(f"lambda_gb_s_{self.architecture}")


@dataclass(frozen=True)
class Route:
    """One measured call: its function, CPU ms (warm, median), log bytes it prints, and what it
    waits on besides CPU on AWS."""

    function: str
    cpu_ms: float
    log_bytes: int = 0
    io_ms: float = REDIS_CALL_MS


@dataclass(frozen=True)
class Shape:
    functions: dict[str, Function]
    cache_node_type: str = "cache.t4g.small"
    cache_nodes: int = 2
    interface_endpoints: int = 2
    availability_zones: int = 2
    nat_gateways: int = 0
    alarm_metrics: int = 0
    dashboards: int = 1
    api_methods: int = 0
    method_metrics: bool = False  # payloadstore:detailedMetrics (off by default)
    secrets: int = 1
    # "nodes" (a replication group of cache_nodes nodes) or "serverless"; engine valkey|redis.
    kms_keys: int = 0
    cache_shape: str = "nodes"
    cache_engine: str = "redis"
    # payloadstore:monitoring=minimal turns the functions' EMF metrics off (no series billed).
    emf_metrics: bool = True
    # Scheduled functions: group -> runs per minute (its EventBridge rule's rate).
    schedules: dict[str, float] = field(default_factory=lambda: {"metrics": 1.0})
    queues: int = 1


@dataclass(frozen=True)
class Usage:
    """Measured control-plane usage: calls per job per tier ({route key: calls}), and an idle
    daemon process's polls per minute and the share of time a poll is in flight."""

    inline_calls: dict[str, float]
    s3_calls: dict[str, float]
    idle_polls_per_min: dict[int, float]  # concurrency -> polls per minute
    idle_in_flight: dict[int, float]  # concurrency -> share of the time a poll is held
    # tier -> what an enqueue that waits for its job holds the jobs function beyond a plain
    # enqueue (ms, measured): priced as I/O wait of that call.
    enqueue_wait_held_ms: dict[str, float] = field(default_factory=dict)
    # A busy daemon's leases long-poll: calls per minute, share of the time one is in flight.
    busy_leases_per_min: float = 0.0
    busy_in_flight: float = 0.0


Lines = list[tuple[str, float]]


def total(lines: Lines) -> float:
    return sum(v for _, v in lines)


def billed_ms(route: Route, fn: Function) -> float:
    """Lambda's billed duration: CPU ms stretched by the memory's CPU share, plus the I/O wait,
    rounded up to 1 ms."""
    share = min(1.0, fn.memory_mb / VCPU_MB)
    return float(math.ceil(route.cpu_ms / share + route.io_ms))


def lambda_cost(fn: Function, ms: float, invocations: float) -> float:
    return invocations * (price("lambda_request") + fn.gb * ms / 1000 * fn.gb_s_price)


def log_cost(nbytes: float) -> float:
    return nbytes / GIB * price("logs_ingest_gb")


def api_call_cost(route: Route, shape: Shape, xray_fraction: float = XRAY_BUSY_FRACTION) -> Lines:
    """One API call: the REST request, its Lambda invocation, its logs and traces."""
    fn = shape.functions[route.function]
    log_bytes = ACCESS_LOG_BYTES + LAMBDA_PLATFORM_LOG_BYTES + route.log_bytes
    return [
        ("API Gateway request", price("apigw_rest_request")),
        (f"Lambda ({route.function})", lambda_cost(fn, billed_ms(route, fn), 1)),
        ("CloudWatch Logs", log_cost(log_bytes)),
        ("X-Ray", xray_fraction * price("xray_trace")),
    ]


def scheduled_monthly(
    group: str, per_minute: float, route: Route, shape: Shape
) -> tuple[str, float]:
    """A scheduled function's month with nothing to do: its runs (Lambda, the log lines each
    run prints with the platform's, an X-Ray trace each: the sampling reservoir takes them)."""
    runs = per_minute * MONTH_MIN
    fn = shape.functions[group]
    return (
        f"{group} function: {runs:,.0f} runs (Lambda, the log ingestion baseline, X-Ray)",
        lambda_cost(fn, billed_ms(route, fn), runs)
        + log_cost(runs * (LAMBDA_PLATFORM_LOG_BYTES + route.log_bytes))
        + runs * XRAY_IDLE_FRACTION * price("xray_trace"),
    )


def fixed_monthly(shape: Shape, scheduled: dict[str, Route]) -> Lines:
    """What a stage costs a month with no traffic at all. `scheduled`: the measured run of each
    scheduled function (every one the shape has must be measured)."""
    hours = MONTH_H
    emf = EMF_EVENT_SERIES + len(shape.functions) - 1 + EMF_STACK_SERIES
    emf += EMF_SERIES_PER_QUEUE * shape.queues
    missing = set(shape.schedules) - set(scheduled)
    if missing:
        raise ValueError(f"no measured run for the scheduled function(s) {sorted(missing)}")
    if not shape.emf_metrics:
        emf = 0
    lines: Lines = [
        cache_fixed(shape, hours),
        (
            f"VPC interface endpoints: {shape.interface_endpoints} x {shape.availability_zones} AZ",
            shape.interface_endpoints
            * shape.availability_zones
            * price("interface_endpoint_hour")
            * hours,
        ),
        (
            f"NAT gateways: {shape.nat_gateways}",
            shape.nat_gateways * price("nat_gateway_hour") * hours,
        ),
        (
            f"CloudWatch alarms: {shape.alarm_metrics} metrics",
            shape.alarm_metrics * price("alarm_metric"),
        ),
        (f"CloudWatch dashboards: {shape.dashboards}", shape.dashboards * price("dashboard")),
        (
            f"API Gateway per-method metrics: {shape.api_methods} methods x {METRICS_PER_METHOD}",
            shape.api_methods * METRICS_PER_METHOD * price("custom_metric"),
        )
        if shape.method_metrics
        else (
            "API Gateway per-method metrics: off (payloadstore:detailedMetrics=on adds them)",
            0.0,
        ),
        (f"EMF custom metrics: {emf} series ({shape.queues} queue)", emf * price("custom_metric"))
        if shape.emf_metrics
        else ("EMF custom metrics: off (payloadstore:monitoring=full turns them on)", 0.0),
        (f"Secrets Manager: {shape.secrets} secret", shape.secrets * price("secret_month")),
        (f"KMS: {shape.kms_keys} key (the stack's own)", shape.kms_keys * price("kms_key_month")),
    ]
    lines += [
        scheduled_monthly(group, per_minute, scheduled[group], shape)
        for group, per_minute in sorted(shape.schedules.items())
    ]
    if shape.cache_shape == "serverless":
        runs = sum(shape.schedules.values()) * MONTH_MIN
        ecpus = runs * ECPUS_PER_SCHEDULED_RUN
        lines.append(
            (
                f"ElastiCache Serverless ECPUs of the scheduled runs: {ecpus:,.0f}",
                ecpus * price(f"serverless_{shape.cache_engine}_ecpu"),
            )
        )
    return lines


def cache_fixed(shape: Shape, hours: float) -> tuple[str, float]:
    """The cache with no traffic: its nodes, or a serverless cache's minimum data."""
    if shape.cache_shape == "serverless":
        gb = SERVERLESS_MIN_GB[shape.cache_engine]
        return (
            f"ElastiCache Serverless ({shape.cache_engine}): {gb:g} GB minimum of data",
            gb * price(f"serverless_{shape.cache_engine}_gb_hour") * hours,
        )
    name = shape.cache_node_type
    key = f"valkey:{name}" if shape.cache_engine == "valkey" else name
    return (
        f"ElastiCache ({shape.cache_engine}): {shape.cache_nodes} x {name}",
        shape.cache_nodes * price(key) * hours,
    )


def serverless_ecpus(shape: Shape, jobs: float, inline_bytes: int = 0) -> Lines:
    """A serverless cache's ECPUs for `jobs` jobs (ECPUS_PER_JOB's estimate)."""
    if shape.cache_shape != "serverless":
        return []
    ecpus = jobs * (ECPUS_PER_JOB + 2 * math.ceil(inline_bytes / 1024))
    return [
        (
            f"ElastiCache Serverless ECPUs: ~{ecpus / jobs:g} per job (estimate)",
            ecpus * price(f"serverless_{shape.cache_engine}_ecpu"),
        )
    ]


def idle_daemon(
    shape: Shape, usage: Usage, concurrency: int, poll: Route, authorizer: Route
) -> Lines:
    """One idle daemon process for a month: its one waiting poll at a time holds the daemon
    function for the whole wait; each poll is an API request; the authorizer runs once per
    cache period of its token."""
    fn = shape.functions[poll.function]
    polls = usage.idle_polls_per_min[concurrency] * MONTH_MIN
    held_s = usage.idle_in_flight[concurrency] * MONTH_S
    auth_fn = shape.functions[authorizer.function]
    auth_calls = min(usage.idle_polls_per_min[concurrency], 60 / AUTHORIZER_CACHE_S) * MONTH_MIN
    auth_route = Route(
        authorizer.function, authorizer.cpu_ms, authorizer.log_bytes, AUTHORIZER_IO_MS
    )
    per_poll = api_call_cost(poll, shape, XRAY_IDLE_FRACTION)
    return [
        (
            f"Lambda GB-s: {fn.memory_mb} MB {fn.architecture} held {held_s / 1e6:.2f} M s",
            held_s * fn.gb * fn.gb_s_price,
        ),
        (f"Lambda requests: {polls:,.0f} polls", polls * price("lambda_request")),
        (f"API Gateway: {polls:,.0f} requests", polls * price("apigw_rest_request")),
        (
            f"authorizer: {auth_calls:,.0f} calls (API Gateway caches {AUTHORIZER_CACHE_S} s)",
            lambda_cost(auth_fn, billed_ms(auth_route, auth_fn), auth_calls)
            + log_cost(auth_calls * LAMBDA_PLATFORM_LOG_BYTES),
        ),
        (
            f"X-Ray: {polls:,.0f} traces (all sampled)",
            polls * XRAY_IDLE_FRACTION * price("xray_trace"),
        ),
        ("CloudWatch Logs", polls * dict(per_poll)["CloudWatch Logs"]),
    ]


def busy_daemon_hour(
    shape: Shape, calls_per_min: float, in_flight: float, leases: Route, authorizer: Route
) -> Lines:
    """One busy daemon process for an hour, beyond its jobs' own calls: its leases long-poll
    (one at a time) holds the daemon function for its wait and is an API request each; the
    authorizer runs at most once per cache period of its token."""
    fn = shape.functions[leases.function]
    calls = calls_per_min * 60
    held_s = in_flight * 3600
    auth_fn = shape.functions[authorizer.function]
    auth_calls = min(calls_per_min, 60 / AUTHORIZER_CACHE_S) * 60
    auth_route = Route(
        authorizer.function, authorizer.cpu_ms, authorizer.log_bytes, AUTHORIZER_IO_MS
    )
    per_call = dict(api_call_cost(leases, shape, XRAY_IDLE_FRACTION))
    return [
        (
            f"Lambda GB-s: {fn.memory_mb} MB {fn.architecture} held {held_s:,.0f} s",
            held_s * fn.gb * fn.gb_s_price,
        ),
        (f"Lambda requests: {calls:,.0f} leases calls", calls * price("lambda_request")),
        (f"API Gateway: {calls:,.0f} requests", calls * price("apigw_rest_request")),
        (
            f"authorizer: {auth_calls:,.0f} calls (API Gateway caches {AUTHORIZER_CACHE_S} s)",
            lambda_cost(auth_fn, billed_ms(auth_route, auth_fn), auth_calls)
            + log_cost(auth_calls * LAMBDA_PLATFORM_LOG_BYTES),
        ),
        (f"X-Ray: {calls:,.0f} traces", calls * XRAY_IDLE_FRACTION * price("xray_trace")),
        ("CloudWatch Logs", calls * per_call["CloudWatch Logs"]),
    ]


def workload(
    shape: Shape,
    calls: dict[str, float],
    routes: dict[str, Route],
    jobs: float,
    payload_bytes: int = 0,
    s3_requests: dict[str, float] | None = None,
    storage_days: float = S3_TIER_DAYS,
) -> Lines:
    """`jobs` jobs through the control plane: each measured call priced (by route), plus S3 for
    S3-tier payloads (requests and the storage until the lifecycle expires them, or, under
    retention `consume`, until the control plane deletes them: `storage_days`)."""
    by_item: dict[str, float] = {}
    for key, n in sorted(calls.items()):
        for item, usd in api_call_cost(routes[key], shape):
            by_item[item] = by_item.get(item, 0.0) + usd * n * jobs
    per_job = sum(calls.values())
    lines: Lines = [
        (f"API Gateway: {per_job:g} calls per job" if item == "API Gateway request" else item, usd)
        for item, usd in by_item.items()
    ]
    if payload_bytes:
        req = s3_requests or {"put": 1.0, "head": 1.0, "get": 1.0}
        gb_month = jobs * payload_bytes / GIB * storage_days / 30
        held = (
            f"{storage_days:g} days each"
            if storage_days >= 1
            else f"{storage_days * 24:g} h each, deleted by the control plane"
        )
        lines += [
            (f"S3 PUT-class: {req['put']:g} per job", jobs * req["put"] * price("s3_put")),
            ("S3 HEAD + GET", jobs * (req["head"] + req["get"]) * price("s3_get")),
        ]
        if req.get("tagging"):
            lines.append(
                (
                    "S3 GetObjectTagging (the policy check of an accepted reference)",
                    jobs * req["tagging"] * price("s3_get"),
                )
            )
        if req.get("delete"):
            # DeleteObjects, 1000 keys a call (a POST: PUT-class).
            lines.append(
                ("S3 DeleteObjects (retention consume)", jobs * req["delete"] * price("s3_put"))
            )
        lines.append(
            (f"S3 storage: {gb_month:,.0f} GB-month ({held})", gb_month * price("s3_gb_month"))
        )
    return lines


def sqs_workload(jobs: float, payload_bytes: int = 0) -> Lines:
    """The same jobs on SQS with the Extended Client Library: a job message (send, receive,
    delete) and a result message on a reply queue (send, receive, delete); a payload over SQS's
    inline limit goes to S3 (PUT, GET) and is deleted with its message."""
    chunks = 1 if payload_bytes > 256 * 1024 else max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))
    requests = (chunks + 2) + 3
    lines: Lines = [(f"SQS: {requests} requests per job", jobs * requests * price("sqs_request"))]
    if payload_bytes > 256 * 1024:
        gb_month = jobs * payload_bytes / GIB * SQS_S3_HOURS / MONTH_H
        lines += [
            ("S3 PUT", jobs * price("s3_put")),
            ("S3 GET", jobs * price("s3_get")),
            (
                f"S3 storage: {gb_month:,.0f} GB-month ({SQS_S3_HOURS:g} h each)",
                gb_month * price("s3_gb_month"),
            ),
        ]
    return lines


def sqs_idle_consumer(pollers: int = 1) -> Lines:
    receives = pollers * 60 / SQS_LONG_POLL_S * MONTH_MIN
    return [
        (f"SQS: {receives:,.0f} empty receives (20 s long polls)", receives * price("sqs_request"))
    ]


def cost_line(
    idle8: float,
    inline: float,
    s3: float,
    fixed: float,
    consume: float | None = None,
    *,
    fixed_prod: float | None = None,
    busy_hour: float | None = None,
) -> str:
    """`fixed`: the dev stage's fixed month (the default synth); `fixed_prod`: the production
    shape's (-c payloadstore:stage=prod), when given."""
    fixed_part = (
        f"fixed ${fixed:.2f}/month"
        if fixed_prod is None
        else f"fixed dev ${fixed:.2f}/month, fixed prod ${fixed_prod:.2f}/month"
    )
    line = (
        f"cost: idle daemon (concurrency 8) ${idle8:.2f}/month, 1M inline jobs ${inline:.2f}, "
        f"1M 100 MiB jobs ${s3:.2f}, {fixed_part}"
    )
    if consume is not None:
        line += f", 1M 100 MiB jobs under consume ${consume:.2f}"
    if busy_hour is not None:
        line += f", busy daemon ${busy_hour:.4f}/hour"
    return line
