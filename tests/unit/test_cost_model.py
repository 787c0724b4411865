"""The cost model (tools/cost/model.py): known inputs give known dollars, so the figures in
docs/cost.md can be checked by hand."""

from __future__ import annotations

import re

import pytest

from tools.cost import model
from tools.cost.model import Function, Route, Shape, Usage, total

FUNCTIONS = {
    "daemon": Function(128),
    "jobs": Function(256),
    "payloads": Function(512),
    "public": Function(512),
    "authorizer": Function(512),
    "admin": Function(256),
    "metrics": Function(256),
    "renewals": Function(256),
}
SHAPE = Shape(functions=FUNCTIONS)
POLL = Route("daemon", cpu_ms=1.0)
AUTH = Route("authorizer", cpu_ms=0.3)
IDLE = Usage({}, {}, idle_polls_per_min={8: 6.0}, idle_in_flight={8: 1.0})


def item(lines, prefix: str) -> float:
    (value,) = [v for name, v in lines if name.startswith(prefix)]
    return value


def test_an_idle_daemon_holding_one_128_mb_poll_all_month_costs_its_gb_seconds_plus_requests():
    # Given one poll in flight all the time, 6 polls a minute, 128 MB x86_64
    lines = model.idle_daemon(SHAPE, IDLE, 8, POLL, AUTH)
    # Then the GB-seconds are 2,592,000 s x 0.125 GB x $0.0000166667
    assert item(lines, "Lambda GB-s") == pytest.approx(5.40, abs=0.005)
    # And 259,200 polls a month are API Gateway requests ($3.50/M), Lambda requests ($0.20/M)
    # and X-Ray traces ($5/M, all sampled)
    assert item(lines, "API Gateway") == pytest.approx(0.9072)
    assert item(lines, "Lambda requests") == pytest.approx(0.05184)
    assert item(lines, "X-Ray") == pytest.approx(1.296)
    # And logs: 680 B a poll (access log + Lambda's lines) at $0.50/GB
    assert item(lines, "CloudWatch Logs") == pytest.approx(259_200 * 680 / 2**30 * 0.5)
    # And the authorizer runs once a minute (API Gateway caches it 60 s): 22 ms at 512 MB
    assert item(lines, "authorizer") == pytest.approx(
        43_200 * (0.2e-6 + 0.5 * 0.022 * 0.0000166667) + 43_200 * 420 / 2**30 * 0.5
    )
    # So the goal (at most $8 a month for an idle daemon) holds at 128 MB
    assert total(lines) == pytest.approx(7.76, abs=0.01)
    assert total(lines) <= 8


def test_twice_the_memory_doubles_the_gb_seconds_and_arm64_takes_a_fifth_off():
    big = Shape(functions={**FUNCTIONS, "daemon": Function(256)})
    arm = Shape(functions={**FUNCTIONS, "daemon": Function(128, "arm64")})
    assert item(model.idle_daemon(big, IDLE, 8, POLL, AUTH), "Lambda GB-s") == pytest.approx(
        10.80, abs=0.005
    )
    assert item(model.idle_daemon(arm, IDLE, 8, POLL, AUTH), "Lambda GB-s") == pytest.approx(
        4.32, abs=0.005
    )


def test_billed_duration_stretches_cpu_by_the_memory_share_plus_io_rounded_up():
    # 1 ms of CPU at 256 MB (256/1769 of a vCPU) is 6.91 ms, + 2 ms of Redis -> 9 ms
    assert model.billed_ms(Route("jobs", 1.0), FUNCTIONS["jobs"]) == 9
    # At 1,769 MB or more the CPU share is one vCPU: no stretch
    assert model.billed_ms(Route("x", 1.0, io_ms=0.0), Function(3008)) == 1


def test_a_million_calls_of_one_route_cost_the_request_lambda_logs_and_5_percent_traces():
    lines = model.workload(SHAPE, {"R": 1.0}, {"R": Route("jobs", 1.0)}, 1_000_000)
    assert item(lines, "API Gateway") == pytest.approx(3.50)
    assert item(lines, "Lambda (jobs)") == pytest.approx(0.2 + 0.25 * 0.009 * 0.0000166667 * 1e6)
    assert item(lines, "X-Ray") == pytest.approx(0.25)
    assert total(lines) == pytest.approx(4.30, abs=0.01)


def test_100_mib_payloads_are_stored_until_the_lifecycle_expires_them():
    lines = model.workload(SHAPE, {}, {}, 1_000_000, 100 << 20)
    # 1 M x 100 MiB kept 2.5 days: 8,138 GB-month at $0.023
    assert item(lines, "S3 storage") == pytest.approx(1e6 * 100 / 1024 * 2.5 / 30 * 0.023)
    assert item(lines, "S3 PUT-class: 1 per job") == pytest.approx(5.00)
    # And a multipart upload (create, 7 parts, complete) is 9 PUT-class requests
    multipart = model.workload(SHAPE, {}, {}, 1_000_000, 100 << 20, {"put": 9, "head": 1, "get": 1})
    assert item(multipart, "S3 PUT-class: 9 per job") == pytest.approx(45.00)
    assert item(lines, "S3 HEAD + GET") == pytest.approx(0.80)


def test_sqs_with_the_extended_client_costs_six_requests_a_job_and_an_hour_of_storage():
    assert total(model.sqs_workload(1_000_000, 100)) == pytest.approx(2.40)
    big = model.sqs_workload(1_000_000, 100 << 20)
    assert total(big) == pytest.approx(2.40 + 5.00 + 0.40 + 1e6 * 100 / 1024 / 720 * 0.023)
    # An idle consumer long-polls 20 s: 129,600 empty receives a month
    assert total(model.sqs_idle_consumer(1)) == pytest.approx(0.05184)


def test_the_fixed_cost_prices_what_the_stack_creates():
    lines = model.fixed_monthly(SHAPE, {"metrics": Route("metrics", 1.0)})
    assert item(lines, "ElastiCache (redis): 2 x cache.t4g.small") == pytest.approx(46.08)
    assert item(lines, "VPC interface endpoints") == pytest.approx(28.80)
    assert item(lines, "NAT gateways: 0") == 0
    assert item(lines, "CloudWatch dashboards") == pytest.approx(3.00)
    no_metrics = Shape(functions=FUNCTIONS, api_methods=17)
    with_metrics = Shape(functions=FUNCTIONS, api_methods=17, method_metrics=True)
    metrics_run = {"metrics": Route("metrics", 1.0)}
    assert item(model.fixed_monthly(with_metrics, metrics_run), "API Gateway") == (
        pytest.approx(25.50)
    )
    assert item(model.fixed_monthly(no_metrics, metrics_run), "API Gateway") == 0


def test_every_scheduled_function_is_priced_by_its_runs():
    # Given the metrics function every minute and the blob renewer every 5 minutes, each run
    # measured at 1 ms of CPU and 500 B of logs
    shape = Shape(functions=FUNCTIONS, schedules={"metrics": 1.0, "renewals": 0.2})
    run = {g: Route(g, cpu_ms=1.0, log_bytes=500) for g in ("metrics", "renewals")}
    lines = model.fixed_monthly(shape, run)
    # Then the renewer's line counts 8,640 runs a month (43,200 minutes / 5)
    (label,) = [name for name, _ in lines if name.startswith("renewals function")]
    assert "8,640 runs" in label
    ms = 9.0  # ceil(1 ms x 1769/256 MB + 2 ms of Redis): billed ms at 256 MB
    per_run = (
        0.20 / 1e6 + 0.25 * ms / 1000 * 0.0000166667 + (420 + 500) / 1024**3 * 0.50 + 5.0 / 1e6
    )
    assert item(lines, "renewals function") == pytest.approx(8_640 * per_run, rel=1e-3)
    # And five times as many runs cost the metrics function five times as much
    assert item(lines, "metrics function") == pytest.approx(5 * item(lines, "renewals function"))
    # And a scheduled function without a measured run is refused, not priced at zero
    with pytest.raises(ValueError, match="renewals"):
        model.fixed_monthly(shape, {"metrics": run["metrics"]})


def test_the_cost_line_ends_with_the_consume_figure_when_given():
    line = model.cost_line(7.756, 17.651, 216.43, 116.04, 82.5)
    assert line.endswith(", fixed $116.04/month, 1M 100 MiB jobs under consume $82.50")


def test_100_mib_jobs_under_consume_cost_at_most_90_dollars_a_million():
    # Given the S3 part of 1 M 100 MiB jobs (single-part figures, no calls priced): a PUT-class
    # request per part, HEAD, GET and the tagging read, stored 1 h under consume
    from tools.cost.report import S3_PAYLOAD, s3_requests

    shape = Shape(functions=FUNCTIONS, api_methods=17)
    req = {**s3_requests(S3_PAYLOAD), "delete": 1 / 1000}
    lifecycle = model.workload(shape, {}, {}, 1_000_000, S3_PAYLOAD, req)
    consume = model.workload(
        shape, {}, {}, 1_000_000, S3_PAYLOAD, req, storage_days=model.S3_CONSUME_HOURS / 24
    )
    # Then storage is almost all of the lifecycle's S3 cost and a few dollars under consume
    storage = next(usd for label, usd in consume if label.startswith("S3 storage"))
    assert storage < 5
    assert total(lifecycle) - total(consume) > 150
    assert total(consume) < 90


def test_the_cost_line_has_the_four_figures_in_dollars():
    line = model.cost_line(7.756, 17.651, 216.43, 116.04)
    assert line == (
        "cost: idle daemon (concurrency 8) $7.76/month, 1M inline jobs $17.65, "
        "1M 100 MiB jobs $216.43, fixed $116.04/month"
    )
    assert re.fullmatch(
        r"cost: idle daemon \(concurrency 8\) \$[\d.]+/month, 1M inline jobs \$[\d.]+, "
        r"1M 100 MiB jobs \$[\d.]+, fixed \$[\d.]+/month",
        line,
    )


def test_a_busy_daemon_hour_prices_its_one_leases_long_poll():
    # Given a busy daemon whose leases long-poll (a 20 s wait each) is in flight all the time
    shape = Shape(functions=FUNCTIONS, api_methods=17)
    poll = model.Route("daemon", 5.0, 300)
    auth = model.Route("authorizer", 3.0, 0)
    lines = model.busy_daemon_hour(shape, 3.0, 1.0, poll, auth)
    # Then the hour holds the daemon function 3,600 s and is 180 API requests
    held = lines[0][1]
    assert held == pytest.approx(3600 * FUNCTIONS["daemon"].gb * FUNCTIONS["daemon"].gb_s_price)
    assert lines[2][0] == "API Gateway: 180 requests"
    # And the cost line carries it after the existing figures
    line = model.cost_line(7.756, 17.651, 216.43, 116.04, 82.5, busy_hour=total(lines))
    assert line.startswith(
        "cost: idle daemon (concurrency 8) $7.76/month, 1M inline jobs $17.65, "
        "1M 100 MiB jobs $216.43, fixed $116.04/month, 1M 100 MiB jobs under consume $82.50, "
        "busy daemon $"
    )
    assert line.endswith("/hour") and 0.001 < total(lines) < 0.05


def test_a_serverless_dev_stage_costs_its_minimum_data_and_at_most_12_dollars_fixed():
    # Given the dev stage's shape: ElastiCache Serverless on Valkey, no interface endpoint, no
    # secret, no dashboard, three alarm metrics, no EMF series (payloadstore:monitoring=minimal)
    shape = Shape(
        functions=FUNCTIONS,
        cache_shape="serverless",
        cache_engine="valkey",
        cache_nodes=0,
        interface_endpoints=0,
        availability_zones=0,
        alarm_metrics=3,
        dashboards=0,
        secrets=0,
        kms_keys=1,
        emf_metrics=False,
        schedules={"metrics": 1.0},
    )
    lines = model.fixed_monthly(shape, {"metrics": Route("metrics", 1.0, 500)})
    # Then the cache is Valkey's 100 MB minimum at $0.084 per GB-hour: $6.05 a month
    assert item(lines, "ElastiCache Serverless (valkey)") == pytest.approx(0.1 * 0.084 * 720)
    assert item(lines, "EMF custom metrics") == 0
    # And the whole fixed month stays within the $12 of issue 45
    assert total(lines) <= 12
    # And a job on it adds its ECPUs at $0.0023 per million
    (ecpu,) = model.serverless_ecpus(shape, 1_000_000, 100)
    assert ecpu[1] == pytest.approx(1_000_000 * (model.ECPUS_PER_JOB + 2) * 0.0023 / 1e6)


def test_valkey_nodes_are_priced_20_percent_below_redis():
    redis = Shape(functions=FUNCTIONS, cache_engine="redis", cache_nodes=3)
    valkey = Shape(functions=FUNCTIONS, cache_engine="valkey", cache_nodes=3)
    hours = model.MONTH_H
    assert model.cache_fixed(valkey, hours)[1] == pytest.approx(
        0.8 * model.cache_fixed(redis, hours)[1]
    )


def test_the_cost_line_carries_the_dev_and_prod_fixed_months():
    line = model.cost_line(7.756, 9.75, 216.43, 7.66, 63.9, fixed_prod=86.5)
    assert ", fixed dev $7.66/month, fixed prod $86.50/month, 1M 100 MiB jobs under consume" in line
