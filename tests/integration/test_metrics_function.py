"""The scheduled metrics function: queue figures and Redis memory as EMF, from real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgpack

from tests.support.events import FakeLambdaContext

EVENT = json.loads((Path(__file__).parents[2] / "events" / "metrics_schedule.json").read_text())


def value(doc: dict, name: str) -> float:
    """EMF allows one value or an array of values for a metric."""
    v = doc[name]
    return v[0] if isinstance(v, list) else v


def emf_documents(text: str) -> list[dict]:
    docs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"_aws"' in line:
            docs.append(json.loads(line))
    return docs


def test_the_schedule_event_publishes_depth_in_flight_and_age_per_queue(cp, capsys):
    from payloadstore_controlplane.handlers import metrics

    # Given a namespace with three jobs on its queue and one of them taken by a daemon
    for i in range(3):
        cp.enqueue(raw=msgpack.packb(i))
    assert cp.poll().status == 200
    capsys.readouterr()
    # When EventBridge's scheduled event reaches the function
    summary = metrics.lambda_handler(EVENT, FakeLambdaContext())
    # Then it reports the queue: two waiting, one in flight
    [mine] = [q for q in summary["queues"] if q["namespace"] == cp.ns]
    assert (mine["name"], mine["queued"], mine["in_flight"]) == (cp.queue, 2, 1)
    assert summary["redis_memory"]["used"] > 0
    # And it printed EMF documents CloudWatch turns into metrics with these dimensions
    docs = emf_documents(capsys.readouterr().out)
    [queue_doc] = [d for d in docs if d.get("namespace") == cp.ns and d.get("queue") == cp.queue]
    assert (value(queue_doc, "QueueDepth"), value(queue_doc, "InFlight")) == (2, 1)
    assert value(queue_doc, "OldestJobAgeSeconds") >= 0
    directive = queue_doc["_aws"]["CloudWatchMetrics"][0]
    names = {m["Name"] for m in directive["Metrics"]}
    assert names == {"QueueDepth", "InFlight", "FailedJobs", "OldestJobAgeSeconds"}
    assert sorted(directive["Dimensions"][0]) == ["namespace", "queue", "service"]
    [stack_doc] = [d for d in docs if "RedisMemoryUsedBytes" in d]
    assert value(stack_doc, "OldestJobAgeSeconds") >= value(queue_doc, "OldestJobAgeSeconds")
    assert sorted(stack_doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == ["service"]


def test_the_schedule_publishes_failed_jobs_and_counts_a_cancelled_queued_job_out(cp, capsys):
    from payloadstore_controlplane.handlers import metrics
    from tests.support.control_plane import cancel

    # Given three inline jobs (with Idempotency-Keys, as the SDK sends them): one failed on its
    # daemon, one cancelled while queued (it has no hash yet), one waiting
    ids = [
        cp.enqueue(raw=msgpack.packb(i), headers={"Idempotency-Key": f"m-{i}"}).json["job_id"]
        for i in range(3)
    ]
    polled = cp.poll()
    assert polled.status == 200 and polled.json["job_id"] == ids[0]
    failed = cp.post_result(ids[0], {"error": {"type": "ValueError", "message": "no"}})
    assert failed.status == 204, failed.json
    assert cancel(cp, ids[1]).json["state"] == "cancelled"
    capsys.readouterr()
    # When the scheduled event runs the function
    summary = metrics.lambda_handler(EVENT, FakeLambdaContext())
    # Then the queue counts one queued (the cancelled job left at once), none in flight, and
    # one failed, in its answer and in its EMF document
    [mine] = [q for q in summary["queues"] if q["namespace"] == cp.ns]
    assert (mine["queued"], mine["in_flight"], mine["failed"]) == (1, 0, 1)
    docs = emf_documents(capsys.readouterr().out)
    [doc] = [d for d in docs if d.get("namespace") == cp.ns and d.get("queue") == cp.queue]
    assert (value(doc, "QueueDepth"), value(doc, "InFlight"), value(doc, "FailedJobs")) == (1, 0, 1)
    # And the one waiting job is the one a daemon gets next
    assert cp.poll().json["job_id"] == ids[2]


def test_the_local_stack_scheduler_runs_the_metrics_function_on_its_timer(cp):
    from payloadstore_devstack.scheduler import Scheduler

    # Given the local stack's scheduler with its minute shrunk to 0.3 s
    cp.enqueue(raw=b"\x01")
    scheduler = Scheduler("us-east-1", period_scale=0.3 / 60).start()
    try:
        deadline = time.monotonic() + 10
        while scheduler.runs.get("metrics", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        scheduler.stop()
    # Then the metrics function ran again and again, and answered with its summary
    assert scheduler.runs["metrics"] >= 2
    assert "queues" in scheduler.last_result["metrics"]


def test_the_schedule_removes_a_queue_nobody_uses_any_more(cp, settings_env, redis_view):
    from payloadstore_controlplane.handlers import metrics
    from payloadstore_controlplane.store import keys

    r_client = redis_view
    # Given a namespace whose only queue was drained and has had no job for STALE_CONSUMER_IDLE_S,
    # and no daemon polls it any more
    settings_env(STALE_CONSUMER_IDLE_S="1")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    lease = cp.poll().json["lease"]
    assert cp.post_result(job, {"resultInline": "AQ==", "lease": lease}).status == 204
    busy = cp.queue + "busy"
    cp.enqueue(raw=b"\x02", queue=busy)
    time.sleep(1.2)
    # When the schedule runs
    metrics.lambda_handler(EVENT, FakeLambdaContext())
    # Then the unused queue's stream and name are gone, and the queue with a job stays
    assert not r_client.exists(keys.queue(cp.ns, cp.queue))
    assert cp.queue.encode() not in r_client.smembers(keys.queue_names(cp.ns))
    assert r_client.exists(keys.queue(cp.ns, busy))


def test_namespaces_come_from_redis_and_the_token_store_is_never_read(
    cp, other_cp, redis_view, monkeypatch
):
    """Issue 23: the metrics function does not list tokens (SSM's Get* rate is the
    authorizer's); it lists the namespaces that enqueued or polled, kept in Redis."""
    from payloadstore_controlplane.handlers import metrics
    from payloadstore_controlplane.store import keys, tokens

    # Given one namespace that enqueued and one whose daemon only polled (no token minted)
    cp.enqueue(raw=b"\x01")
    assert other_cp.poll().status == 204
    members = redis_view.smembers(keys.namespaces())
    assert {cp.ns.encode(), other_cp.ns.encode()} <= members

    # When the schedule runs with every token-store read failing
    def no_ssm(*_a, **_k):
        raise AssertionError("the metrics function read the token store")

    monkeypatch.setattr(tokens.TokenStore, "_load", no_ssm)
    monkeypatch.setattr(tokens.TokenStore, "list", no_ssm)
    summary = metrics.lambda_handler(EVENT, FakeLambdaContext())
    # Then both namespaces' queues are published
    published = {q["namespace"] for q in summary["queues"]}
    assert cp.ns in published
