"""docs/cost.md from the measured inputs, the stack's shape and the price table."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from tools.cost import model
from tools.cost.model import Lines, Route, Shape, Usage, total
from tools.cost.prices import PRICES, READ, REGION

MIB = 1 << 20
S3_PAYLOAD = 100 * MIB
JOBS = 1_000_000

ENQUEUE = "POST /v1/namespaces/{ns}/queues/{queue}/jobs"
POLL = "POST /v1/daemon/poll"
RESULT_POST = "POST /v1/namespaces/{ns}/jobs/{job_id}/result"
RESULT_GET = "GET /v1/namespaces/{ns}/jobs/{job_id}/result"
PRESIGN = "POST /v1/namespaces/{ns}/payloads/presign"
# A call that also waits for its job (enqueue ?wait) or fetches the next job (`next` on a result
# post): tools/cost/measure.py names them with these suffixes.
WAITS = " ?wait"
NEXT = " +next"
ENQUEUE_WAIT = ENQUEUE + WAITS
RESULT_POST_NEXT = RESULT_POST + NEXT
# Such a call does the work of two measured calls in one invocation: priced as both (CPU, log
# lines and I/O added up), plus, for the enqueue, the measured time it holds its function while
# the job runs. The wait of a result post for a next job that is not there yet is what a poll's
# wait is: the idle cost, not priced per job.
COMPOSED_ROUTE = {
    (ENQUEUE_WAIT, "inline"): ("enqueue inline", "result get inline"),
    (ENQUEUE_WAIT, "s3"): ("enqueue s3", "result get inline"),
    (RESULT_POST_NEXT, "s3"): ("result post s3", "poll with s3 job"),
}
# The bench's measured call (bench/bench_function_cpu.py) for each route and tier.
BENCH_ROUTE = {
    (ENQUEUE, "inline"): "enqueue inline",
    (ENQUEUE, "s3"): "enqueue s3",
    (POLL, "inline"): "poll with job",
    (POLL, "s3"): "poll with s3 job",
    (RESULT_POST, "inline"): "result post inline",
    (RESULT_POST_NEXT, "inline"): "result post inline next",
    (RESULT_POST, "s3"): "result post s3",
    (RESULT_GET, "inline"): "result get inline",
    (RESULT_GET, "s3"): "result get s3",
    (PRESIGN, "inline"): "presign put",
    (PRESIGN, "s3"): "presign put",
    ("GET /v1/config", "inline"): "config",
    ("GET /v1/config", "s3"): "config",
}
# Calls that HEAD an upload in S3 before answering.
S3_HEAD_CALLS = {"enqueue s3", "result post s3"}


@dataclass(frozen=True)
class Figures:
    fixed: Lines
    fixed_prod: Lines | None
    idle: dict[int, Lines]
    inline: Lines
    s3: Lines
    s3_consume: Lines
    sqs_inline: Lines
    sqs_s3: Lines
    sqs_idle: dict[int, Lines]
    line: str
    busy: Lines = dataclasses.field(default_factory=list)


def bench_route(bench: dict, name: str) -> Route:
    row = bench["routes"][name]
    io = model.REDIS_CALL_MS + (model.S3_HEAD_MS if name in S3_HEAD_CALLS else 0.0)
    if name.endswith(" next"):
        io += model.REDIS_CALL_MS  # the post, then the next job's delivery
    if name == "config":
        io = 0.0
    return Route(row["function"], row["cpu_ms"], row["log_bytes"], io)


def composed_route(bench: dict, names: tuple[str, ...], held_ms: float = 0.0) -> Route:
    """One invocation doing the work of several measured calls (see COMPOSED_ROUTE)."""
    parts = [bench_route(bench, n) for n in names]
    return Route(
        parts[0].function,
        sum(p.cpu_ms for p in parts),
        sum(p.log_bytes for p in parts),
        sum(p.io_ms for p in parts) + held_ms,
    )


def routes_for(
    bench: dict, calls: dict[str, float], tier: str, held_ms: float = 0.0
) -> dict[str, Route]:
    """The priced Route of each measured call: the bench's figure for that route and tier (or
    the figures it is composed of, COMPOSED_ROUTE; `held_ms` what an enqueue that waits holds),
    else the median of the function's measured routes."""
    out: dict[str, Route] = {}
    for key in calls:
        composed = COMPOSED_ROUTE.get((key, tier))
        if composed:
            out[key] = composed_route(bench, composed, held_ms if key == ENQUEUE_WAIT else 0.0)
            continue
        name = BENCH_ROUTE.get((key, tier))
        if name:
            out[key] = bench_route(bench, name)
            continue
        group = function_of(key)
        rows = [r for r in bench["routes"].values() if r["function"] == group]
        out[key] = Route(
            group,
            statistics.median(r["cpu_ms"] for r in rows),
            int(statistics.median(r["log_bytes"] for r in rows)),
        )
    return out


def function_of(key: str) -> str:
    from payloadstore_controlplane.routes import ROUTES

    method, path = key.split(" ", 2)[:2]
    for route in ROUTES:
        if route.method.upper() == method and route.path == path:
            return route.function
    raise KeyError(key)


def s3_requests(size: int) -> dict[str, float]:
    """S3 requests of one S3-tier job of `size` bytes under the default settings: a single PUT,
    or a multipart upload (create, a PUT per part, complete: all PUT-class) above
    MULTIPART_THRESHOLD; the control plane's verifying HEAD; the daemon's GET."""
    from payloadstore_controlplane.models.settings import Settings

    settings = Settings(payload_bucket="cost")
    puts = 1
    if settings.multipart(size):
        puts = -(-size // settings.multipart_part_bytes_for(size)) + 2
    # tagging: the control plane reads the retention tag of the reference it accepts (its
    # namespace policy's check), one GetObjectTagging beside the HEAD.
    return {"put": float(puts), "head": 1.0, "get": 1.0, "tagging": 1.0}


PARTS = "POST /v1/namespaces/{ns}/payloads/parts"
PARTS_PER_CALL = 100  # docs/wire.md: 1..100 parts a call


def priced_s3_calls(measured: dict) -> dict[str, float]:
    """The measured calls of an S3-tier job; when the SDK could only send a single-PUT job (no
    multipart uploads yet), plus the parts calls a 100 MiB multipart upload makes: none for the
    first FIRST_PART_URLS parts, whose URLs come with the presign answer (issue 34)."""
    from payloadstore_controlplane.logic.presign import FIRST_PART_URLS

    calls = dict(measured["s3_calls"])
    parts = s3_requests(S3_PAYLOAD)["put"] - 2 - FIRST_PART_URLS
    if measured.get("s3_fallback") and parts > 0 and PARTS not in calls:
        calls[PARTS] = float(-(-int(parts) // PARTS_PER_CALL))
    return calls


INLINE_PAYLOAD = 100  # bytes: the inline job the SQS comparison prices too


def figures(shape: Shape, usage: Usage, bench: dict, prod_shape: Shape | None = None) -> Figures:
    """Every figure for `shape` (the dev stage as synthesized by default); the fixed month of
    `prod_shape` (-c payloadstore:stage=prod) too, when given."""
    scheduled = {group: bench_route(bench, f"{group} (schedule)") for group in shape.schedules}
    poll = bench_route(bench, "poll empty (wait)")
    auth = bench_route(bench, "authorizer (cached token)")
    fixed = model.fixed_monthly(shape, scheduled)
    fixed_prod = None
    if prod_shape is not None:
        prod_scheduled = {
            group: bench_route(bench, f"{group} (schedule)") for group in prod_shape.schedules
        }
        fixed_prod = model.fixed_monthly(prod_shape, prod_scheduled)
    idle = {c: model.idle_daemon(shape, usage, c, poll, auth) for c in usage.idle_polls_per_min}
    held = usage.enqueue_wait_held_ms
    inline = model.workload(
        shape,
        usage.inline_calls,
        routes_for(bench, usage.inline_calls, "inline", held.get("inline", 0.0)),
        JOBS,
    ) + model.serverless_ecpus(shape, JOBS, INLINE_PAYLOAD)
    s3 = model.workload(
        shape,
        usage.s3_calls,
        routes_for(bench, usage.s3_calls, "s3", held.get("s3", 0.0)),
        JOBS,
        S3_PAYLOAD,
        s3_requests(S3_PAYLOAD),
    ) + model.serverless_ecpus(shape, JOBS)
    s3_consume = model.workload(
        shape,
        usage.s3_calls,
        routes_for(bench, usage.s3_calls, "s3"),
        JOBS,
        S3_PAYLOAD,
        {**s3_requests(S3_PAYLOAD), "delete": 1 / 1000},
        storage_days=model.S3_CONSUME_HOURS / 24,
    ) + model.serverless_ecpus(shape, JOBS)
    # The leases long-poll is a waiting daemon-function call, priced as an empty poll's.
    busy = model.busy_daemon_hour(
        shape, usage.busy_leases_per_min, usage.busy_in_flight, poll, auth
    )
    line = model.cost_line(
        total(idle[8]),
        total(inline),
        total(s3),
        total(fixed),
        total(s3_consume),
        fixed_prod=total(fixed_prod) if fixed_prod is not None else None,
        busy_hour=total(busy),
    )
    return Figures(
        fixed=fixed,
        fixed_prod=fixed_prod,
        idle=idle,
        inline=inline,
        s3=s3,
        s3_consume=s3_consume,
        sqs_inline=model.sqs_workload(JOBS, 100),
        sqs_s3=model.sqs_workload(JOBS, S3_PAYLOAD),
        sqs_idle={1: model.sqs_idle_consumer(1), 8: model.sqs_idle_consumer(8)},
        line=line,
        busy=busy,
    )


def usd(x: float) -> str:
    if x and abs(x) < 0.01:
        return f"${x:.4f}"
    return f"${x:,.2f}"


def lines_table(title: str, lines: Lines) -> list[str]:
    out = [f"| {title} | $ |", "|---|---:|"]
    out += [f"| {item} | {usd(v)} |" for item, v in lines]
    out.append(f"| **total** | **{usd(total(lines))}** |")
    return out


def render(shape: Shape, usage: Usage, bench: dict, measured: dict, f: Figures) -> str:
    daemon, jobs = shape.functions["daemon"], shape.functions["jobs"]
    idle8, idle1 = total(f.idle[8]), total(f.idle[1])
    doc = [
        "# What it costs",
        "",
        "<!-- written by `make cost` (tools/cost): do not edit by hand -->",
        "",
        f"List prices for **{REGION}** (recorded {READ}, table below), a 30-day month, on-demand,",
        "no free tier. Every usage figure is measured on the local stack: control-plane calls per",
        "job and per idle minute by `make cost` itself, CPU per call and memory per function by",
        "`bench/bench_function_cpu.py` (bench/RESULTS.md). What cannot be measured here (I/O waits",
        "on AWS, Lambda's and API Gateway's own log lines, X-Ray sampling) is an assumption, listed",
        "at the end.",
        "",
        "## Summary",
        "",
        "| | payloadstore | SQS + Extended Client + S3 |",
        "|---|---:|---:|",
        f"| fixed, per month | {usd(total(f.fixed))} | $0.00 |",
        (
            f"| idle daemon process, concurrency 1, per month | {usd(idle1)} | "
            f"{usd(total(f.sqs_idle[1]))} |"
        ),
        (
            f"| idle daemon process, concurrency 8, per month | {usd(idle8)} | "
            f"{usd(total(f.sqs_idle[1]))} (one poller) to {usd(total(f.sqs_idle[8]))} (8) |"
        ),
        (
            f"| busy daemon process (jobs in hand), per hour beyond its jobs' calls | "
            f"{usd(total(f.busy))} | $0.00 (a visibility change per job only when it nears "
            "its timeout) |"
        ),
        f"| 1 M inline jobs | {usd(total(f.inline))} | {usd(total(f.sqs_inline))} |",
        f"| 1 M 100 MiB jobs | {usd(total(f.s3))} | {usd(total(f.sqs_s3))} |",
        (
            f"| 1 M 100 MiB jobs, namespace retention `consume` | {usd(total(f.s3_consume))} | "
            f"{usd(total(f.sqs_s3))} |"
        ),
        "",
        (
            "**Where we cost more, honestly.** SQS has no fixed cost; a stage costs "
            f"{usd(total(f.fixed))} a month before the first job as a dev stage (ElastiCache "
            "Serverless's minimum is most of it)"
            + (
                f", {usd(total(f.fixed_prod))} in the production shape (the replication group, "
                "its Secrets Manager endpoint, alarms and the dashboard)"
                if f.fixed_prod is not None
                else ""
            )
            + f". An idle daemon costs {usd(idle8)} a month against "
            f"{usd(total(f.sqs_idle[1]))} for an idle SQS consumer: each waiting poll holds a Lambda "
            f"function ({daemon.memory_mb} MB) for its whole wait, and is an API Gateway request. "
            f"Per job we cost {total(f.inline) / max(total(f.sqs_inline), 1e-9):.0f}x SQS for inline "
            "jobs (API Gateway at $3.50 per million requests, a Lambda invocation per call, against "
            "$0.40 per million SQS requests). For 100 MiB jobs the S3 storage dominates: we keep "
            f"payloads until the 2-day lifecycle expires them (~{model.S3_TIER_DAYS:g} days), while "
            "the Extended Client deletes the object with its message (a namespace with retention "
            "`consume` gets the same saving: "
            f"{usd(total(f.s3_consume))} for the same jobs, arguments deleted within a minute of "
            "success); and a payload above "
            "MULTIPART_THRESHOLD is a multipart upload "
            f"({s3_requests(S3_PAYLOAD)['put']:g} PUT-class requests for 100 MiB) where the "
            "Extended Client makes one PUT."
        ),
        "",
        (
            "**What the price buys** (not priced on the SQS side): job status and results stored "
            "and readable by id, leases with heartbeats and redelivery limits, sha256 checks of every "
            "payload, namespaces with bearer tokens (clients and daemons hold no AWS credentials: with "
            "SQS + S3 each needs IAM access to the queue and the bucket), one API for any payload size."
        ),
        "",
        "## Memory of the long-poll functions",
        "",
        (
            f"An idle daemon holds one waiting poll at a time, so its cost is the daemon function's "
            f"memory x the month: at {daemon.memory_mb} MB {daemon.architecture} that is "
            f"{usd(total(f.idle[8][:1]))} of the {usd(idle8)}. The memory comes from the measured peak "
            "(table below: Lambda's runtime interface client included) with room to spare; `-c payloadstore:memory:daemon=MB` overrides it "
            "and `-c payloadstore:architecture=arm64` prices GB-seconds 20 % lower "
            "([Memory and architecture](deploying.md#memory-and-architecture) has the "
            "cold-start trade-off)."
        ),
        "",
        "| daemon function | idle daemon (concurrency 8), per month |",
        "|---|---:|",
    ]
    for memory_mb, arch in ((128, "x86_64"), (128, "arm64"), (256, "x86_64"), (512, "x86_64")):
        variant = dataclasses.replace(
            shape, functions={**shape.functions, "daemon": model.Function(memory_mb, arch)}
        )
        idle = model.idle_daemon(
            variant,
            usage,
            8,
            bench_route(bench, "poll empty (wait)"),
            bench_route(bench, "authorizer (cached token)"),
        )
        chosen = " (as synthesized)" if variant.functions["daemon"] == daemon else ""
        doc.append(f"| {memory_mb} MB {arch}{chosen} | {usd(total(idle))} |")
    # A Daemon asking for the server's longest wait (POLL_MAX_WAIT_S, 20 s) polls half as often.
    longer = dataclasses.replace(usage, idle_polls_per_min={8: usage.idle_polls_per_min[8] / 2})
    idle = model.idle_daemon(
        shape,
        longer,
        8,
        bench_route(bench, "poll empty (wait)"),
        bench_route(bench, "authorizer (cached token)"),
    )
    doc.append(
        f"| {daemon.memory_mb} MB {daemon.architecture}, `Daemon(wait_s=20)` (modeled: half "
        f"the polls) | {usd(total(idle))} |"
    )
    doc += [
        "",
        (
            "| function | memory (MB) | architecture | RSS after import (MB) | RSS warm (MB) | "
            "RSS peak, largest calls (MB) | import CPU (ms) |"
        ),
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for group, fn in sorted(shape.functions.items()):
        b = bench["functions"].get(group)
        if b:
            doc.append(
                f"| {group} | {fn.memory_mb} | {fn.architecture} | {b['rss_import_mb']} | "
                f"{b['rss_calls_mb']} | {b['rss_peak_mb']} | {b['import_cpu_ms']:.0f} |"
            )
        else:
            doc.append(f"| {group} | {fn.memory_mb} | {fn.architecture} | - | - | - | - |")
    doc += [
        "",
        "## Measured inputs",
        "",
        (
            f"CPU per call ({bench['command']}; {bench['taken']}, load {bench['load']}): warm, median; "
            "billed ms is the CPU stretched by the function's CPU share (memory / 1,769 MB) plus the "
            "assumed I/O wait, as Lambda would bill it at the synthesized memory."
        ),
        "",
        "| call | function | CPU ms | billed ms | log bytes |",
        "|---|---|---:|---:|---:|",
    ]
    for name, row in bench["routes"].items():
        route = bench_route(bench, name)
        fn = shape.functions[route.function]
        doc.append(
            f"| {name} | {route.function} | {row['cpu_ms']:.2f} | "
            f"{model.billed_ms(route, fn):.0f} | {row['log_bytes']} |"
        )
    doc += [
        "",
        (
            f"Calls per job at steady load, by route ({measured['jobs']} inline jobs, one after "
            f"the other, then {measured['s3_jobs']} S3-tier jobs of "
            f"{measured.get('s3_single_bytes', 0) / MIB:g} MiB (a single PUT) and "
            f"{measured['s3_jobs']} of 100 MiB (a multipart upload), each through `queue.call`, "
            "whose enqueue waits for the result (`?wait`), served by a Daemon whose result posts "
            "fetch its next job (`+next`). A call counts for the job it is about; the warm-up job "
            "(delivered by a poll to an idle daemon), the daemon's empty polls (the idle cost) "
            "and the per-process config read are not counted):"
        ),
        "",
        "| route | inline job | S3-tier job (single PUT) | multipart job (100 MiB) |",
        "|---|---:|---:|---:|",
    ]
    if measured.get("s3_fallback"):
        doc[-2:-2] = [
            (
                f"The S3-tier jobs were measured at {measured['s3_payload_bytes'] / MIB:.0f} MiB: "
                "the SDK of this commit could not send 100 MiB (`"
                + measured["s3_fallback"][:120].replace("|", "/")
                + "`), so the multipart upload's parts calls (one per "
                f"{PARTS_PER_CALL} parts past the first 64, whose URLs come with the presign) "
                "are added by the model, not measured."
            ),
            "",
        ]
    single = measured.get("s3_single_calls") or {}
    for key in sorted(set(usage.inline_calls) | set(single) | set(usage.s3_calls)):
        doc.append(
            f"| `{key}` | {usage.inline_calls.get(key, 0):g} | {single.get(key, 0):g} | "
            f"{usage.s3_calls.get(key, 0):g} |"
        )
    doc.append(
        f"| **all calls** | **{sum(usage.inline_calls.values()):g}** | "
        f"**{sum(single.values()):g}** | **{sum(usage.s3_calls.values()):g}** |"
    )
    held = usage.enqueue_wait_held_ms
    doc += [
        "",
        (
            f"An enqueue that waits holds the jobs function while its job runs (and, under a "
            "backlog, while it is queued: size the daemons so that jobs do not wait): measured "
            f"{held.get('inline', 0.0):g} ms beyond a plain enqueue for an inline job and "
            f"{held.get('s3', 0.0):g} ms for a 100 MiB one (the daemon's download), priced as that "
            "call's wait. An inline job's `+next` post is measured as such (`result post inline next`); a 100 MiB job's is priced as a result post and a poll in one invocation."
        ),
    ]
    doc += [
        "",
        (
            f"Idle daemon process ({measured['idle_s']:g} s window, Daemon default wait_s="
            f"{measured['wait_s']:g}, one poller per process):"
        ),
        "",
        "| concurrency | polls per minute | share of time a poll is in flight | other calls |",
        "|---:|---:|---:|---|",
    ]
    for c in sorted(usage.idle_polls_per_min):
        others = measured["idle_other_calls"].get(str(c), measured["idle_other_calls"].get(c, {}))
        doc.append(
            f"| {c} | {usage.idle_polls_per_min[c]:g} | {usage.idle_in_flight[c]:.3f} | "
            f"{', '.join(f'{k} x{v}' for k, v in others.items()) or 'none'} |"
        )
    doc += [
        "",
        (
            f"Busy daemon process ({measured.get('busy_jobs', 0)} jobs in hand through the same "
            "window, concurrency 4): its leases long-poll renews every lease and brings a "
            "cancel at once, one call at a time whatever its job count (a heartbeat per job "
            "every VISIBILITY_TIMEOUT_S/3 before: 36 calls per job-hour with the default 300 s):"
        ),
        "",
        "| leases calls per minute | share of time one is in flight | other calls |",
        "|---:|---:|---|",
        (
            f"| {usage.busy_leases_per_min:g} | {usage.busy_in_flight:.3f} | "
            + (
                ", ".join(f"{k} x{v}" for k, v in (measured.get("busy_other_calls") or {}).items())
                or "none"
            )
            + " |"
        ),
    ]
    doc += ["", "## The figures, line by line", ""]
    doc += lines_table(
        "fixed, per month: the dev stage as synthesized with the default flags (serverless)",
        f.fixed,
    )
    if f.fixed_prod is not None:
        doc += [""] + lines_table(
            "fixed, per month: -c payloadstore:stage=prod (a replication group, full monitoring)",
            f.fixed_prod,
        )
    for c in sorted(f.idle):
        doc += [""] + lines_table(f"idle daemon process, concurrency {c}, per month", f.idle[c])
    doc += [""] + lines_table(
        "busy daemon process, per hour (its leases long-poll; its jobs' calls are priced per job)",
        f.busy,
    )
    doc += [""] + lines_table("1 M inline jobs", f.inline)
    doc += [""] + lines_table("1 M 100 MiB jobs (small inline results)", f.s3)
    doc += [""] + lines_table(
        "1 M 100 MiB jobs under retention `consume` (arguments deleted within a minute of success)",
        f.s3_consume,
    )
    doc += [""] + lines_table("SQS + Extended Client: 1 M small jobs", f.sqs_inline)
    doc += [""] + lines_table("SQS + Extended Client: 1 M 100 MiB jobs", f.sqs_s3)
    doc += [""] + lines_table("SQS: an idle consumer with one poller, per month", f.sqs_idle[1])
    doc += [
        "",
        (
            "Not in either column: the machines the clients and daemons run on, data transfer (the "
            "same S3 bytes either way; free within the region), ElastiCache backup storage (one "
            "snapshot, free up to the cluster's size). A client waiting in `result?wait` holds the "
            f"jobs function ({jobs.memory_mb} MB): "
            f"{usd(jobs.gb * jobs.gb_s_price * JOBS)} per million jobs for each second waited."
        ),
        "",
        "## Prices",
        "",
        (
            f"Recorded {READ} from AWS's pricing pages for {REGION} (tools/cost/prices.py; no live "
            "fetching):"
        ),
        "",
        "| price | USD | unit | page |",
        "|---|---:|---|---|",
    ]
    for name, p in PRICES.items():
        doc.append(f"| {name} | {p.usd:.10g} | {p.unit} | {p.source} |")
    doc += [
        "",
        "## Assumptions",
        "",
        (
            f"- I/O wait per call on AWS: {model.REDIS_CALL_MS:g} ms (Redis in the VPC, with the "
            f"replica's WAIT), +{model.S3_HEAD_MS:g} ms where the call HEADs an upload, "
            f"{model.AUTHORIZER_IO_MS:g} ms for an authorizer run on an API Gateway cache miss; "
            "twice the Redis wait for a result post that also takes the next job."
        ),
        (
            "- Calls with no row of their own in the CPU table are priced as the calls they do "
            "in one invocation: an enqueue that waits as an enqueue and a result read plus the "
            "measured time it holds its function; a 100 MiB job's `+next` post as a result post "
            "and a poll. A post's wait for a next job that is not queued yet is a poll's wait: "
            "the idle daemon's cost, already priced there."
        ),
        (
            f"- Log bytes per call: {model.ACCESS_LOG_BYTES} (API Gateway access log) + "
            f"{model.LAMBDA_PLATFORM_LOG_BYTES} (Lambda START/END/REPORT) + what the handler printed "
            "(measured)."
        ),
        (
            "- X-Ray's default sampling: an idle daemon's polls are all traced (they fall within the "
            "1 request/s reservoir); a workload's calls at 5 % (the reservoir adds at most $12.96 a "
            "month)."
        ),
        (
            "- API Gateway authorizer: cached per token for 60 s, so a busy workload's authorizer "
            "calls are negligible; an idle daemon causes about one a minute."
        ),
        (
            "- Scheduled functions (the metrics function every minute, the blob renewer every "
            "RENEWAL_EVERY_MINUTES): each run priced as the bench's run with nothing to do. A "
            "renewer's run that copies blobs costs more, and its copies are S3 requests (a "
            "CopyObject, or an UploadPartCopy per COPY_PART_BYTES part, once per lifecycle period of "
            "each blob jobs still reference); neither is in these figures."
        ),
        (
            "- Per-method metrics: 5 metrics per method; EMF series: every series emitted all month "
            "(an upper bound: a metric is billed for the hours it is emitted)."
        ),
        (
            f"- S3-tier payloads stored {model.S3_TIER_DAYS:g} days (lifecycle), "
            f"{model.S3_CONSUME_HOURS:g} h under retention `consume` (waiting and running, then "
            "deleted by the control plane); the SQS Extended "
            f"Client's objects {model.SQS_S3_HOURS:g} h (deleted with the message)."
        ),
        (
            "- Cold starts are not priced: Lambda bills a container's Init (~0.5 s of CPU here) "
            "once per new container; idle daemons keep theirs warm."
        ),
        (
            "- SQS: a job message (send, receive, delete) and a result message on a reply queue "
            "(send, receive, delete); a 100-byte payload is one 64 KiB chunk."
        ),
        "",
        f.line,
        "",
    ]
    return "\n".join(doc)


def usage_from(measured: dict) -> Usage:
    return Usage(
        inline_calls=dict(measured["inline_calls"]),
        s3_calls=priced_s3_calls(measured),
        idle_polls_per_min={int(k): v for k, v in measured["idle_polls_per_min"].items()},
        idle_in_flight={int(k): v for k, v in measured["idle_in_flight"].items()},
        enqueue_wait_held_ms={
            "inline": float(measured.get("enqueue_wait_held_ms") or 0.0),
            "s3": float(measured.get("enqueue_wait_held_ms_s3") or 0.0),
        },
        busy_leases_per_min=float(measured.get("busy_leases_per_min") or 0.0),
        busy_in_flight=float(measured.get("busy_in_flight") or 0.0),
    )
