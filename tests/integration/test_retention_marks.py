"""Retention marks (issue 43, defect 5): a result read never fails because Redis is full, and the
marks a result post leaves for its namespace's retention (`consume`: the arguments' deletion;
`7d`/`30d`: the record's longer life) are written again by a re-sent post, so a post answered
503 after it was stored loses none of them. Real handlers, a redis-server with maxmemory, the
S3 emulator over HTTP."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis

from payloadstore_controlplane.models.policy import NamespacePolicy
from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import RedisServer
from tests.integration.test_namespace_policy import _exists, _run_scheduled
from tests.support.control_plane import ControlPlane, cancel, upload
from tests.support.env import single_server_env
from tests.support.faults import cut_once


@pytest.fixture
def full_redis(tmp_path: Path, settings_env):
    """A redis-server with maxmemory (noeviction), the handlers pointed at it, the memory guard
    off (Redis itself says OOM), args grace 0 s and result grace 60 s."""
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False, maxmemory="8mb").start()
    settings_env(
        **single_server_env(server.url),
        REDIS_MEMORY_HIGH_WATER_PCT="100",
        REDIS_MEMORY_HARD_PCT="100",
        CONSUME_ARGS_GRACE_S="0",
        CONSUME_RESULT_GRACE_S="60",
    )
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def _namespace(retention: str) -> ControlPlane:
    return ControlPlane("r" + uuid.uuid4().hex[:10], NamespacePolicy(retention, "none", "allowed"))


def _run_to_s3_result(cp: ControlPlane) -> tuple[dict, dict, str]:
    """A job whose args and result are in S3, polled; its result uploaded, not posted."""
    args = upload(cp, b"A" * 400)
    job_id = cp.enqueue(ref=args).json["job_id"]
    assert cp.poll().status == 200
    result = upload(cp, b"R" * 500, role="daemon", job_id=job_id)
    return args, result, job_id


def _past_maxmemory(r: redis.Redis, margin: int = 65_536) -> None:
    """Every write that adds data is refused from now on (OOM)."""
    r.config_set("maxmemory", r.info("memory")["used_memory"] - margin)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.set("probe:" + uuid.uuid4().hex, b"x" * 1000)


def test_a_consume_result_reads_200_with_redis_past_maxmemory(full_redis, s3_client):
    # Given a `consume` namespace's job that succeeded with its result in S3
    cp = _namespace("consume")
    _, result, job_id = _run_to_s3_result(cp)
    assert cp.post_result(job_id, {"resultRef": result}).status == 204
    # And Redis is past its maxmemory
    _past_maxmemory(full_redis)
    # When the client reads the result
    read = cp.result(job_id)
    # Then it gets it, with a download that works (a read never fails because Redis is full)
    assert read.status == 200, read.raw_body
    assert read.json["resultRef"]["key"] == result["key"]
    import requests

    assert requests.get(read.json["download"]["url"], timeout=30).content == b"R" * 500
    # And the read still started the result's grace: the drain deletes it once that is over
    due = full_redis.zscore(keys.consume_due(cp.ns), result["key"])
    assert due is not None and due > time.time() * 1000
    # And a re-read within the grace keeps the first read's time
    assert cp.result(job_id).status == 200
    assert full_redis.zscore(keys.consume_due(cp.ns), result["key"]) == due


def test_a_consume_post_past_maxmemory_schedules_the_arguments_deletion(full_redis, s3_client):
    # Given a `consume` namespace's job with its result uploaded, and Redis past maxmemory
    cp = _namespace("consume")
    args, result, job_id = _run_to_s3_result(cp)
    _past_maxmemory(full_redis)
    # When the daemon posts the result (and re-sends it while it is not answered 204)
    posted = cp.post_result(job_id, {"resultRef": result})
    for _ in range(3):
        if posted.status == 204:
            break
        full_redis.config_set("maxmemory", 0)
        posted = cp.post_result(job_id, {"resultRef": result})
    assert posted.status == 204, posted.raw_body
    # Then the scheduled function deletes the succeeded job's arguments (grace 0 s)
    full_redis.config_set("maxmemory", 0)
    _run_scheduled()
    assert not _exists(s3_client, args["bucket"], args["key"])
    assert _exists(s3_client, result["bucket"], result["key"])


@pytest.mark.parametrize("form", ["resultRef", "resultInline"])
def test_a_post_re_sent_after_a_503_schedules_the_arguments_deletion(
    full_redis, s3_client, monkeypatch, form
):
    # Given a `consume` namespace's job whose result post was stored, then answered 503 because
    # the connection broke before its retention marks were written
    cp = _namespace("consume")
    args, result, job_id = _run_to_s3_result(cp)
    body = {"resultRef": result} if form == "resultRef" else {"resultInline": "AQID"}
    cut_once(monkeypatch, "schedule_deletions")
    first = cp.post_result(job_id, body)
    assert first.status == 503, first.raw_body
    assert cp.status(job_id).json["state"] == "succeeded"
    # When the daemon re-sends the same post
    again = cp.post_result(job_id, body)
    # Then it is answered 204, and the arguments' deletion is scheduled all the same
    assert again.status == 204, again.raw_body
    _run_scheduled()
    assert not _exists(s3_client, args["bucket"], args["key"])


@pytest.mark.parametrize("form", ["resultRef", "resultInline"])
def test_a_7d_post_re_sent_after_a_503_keeps_the_record_for_7_days(full_redis, monkeypatch, form):
    # Given a `7d` namespace's job whose result post was stored, then answered 503 because the
    # connection broke before the record's longer life was set
    cp = _namespace("7d")
    _, result, job_id = _run_to_s3_result(cp)
    body = {"resultRef": result} if form == "resultRef" else {"resultInline": "AQID"}
    cut_once(monkeypatch, "keep_finished_job")
    assert cp.post_result(job_id, body).status == 503
    # When the daemon re-sends the same post, twice
    assert cp.post_result(job_id, body).status == 204
    ttl_first = full_redis.pttl(keys.job(job_id))
    time.sleep(0.05)
    assert cp.post_result(job_id, body).status == 204
    # Then the job's record (hash and done list) lives 7 days from its end, not RESULT_TTL_S
    week_ms = 7 * 86_400 * 1000
    for key in (keys.job(job_id), keys.done(job_id)):
        assert full_redis.pttl(key) > week_ms - 60_000, key
    # And a repeat sets the same end-based expiry, never a later one
    assert full_redis.pttl(keys.job(job_id)) <= ttl_first


@pytest.mark.parametrize("retention", ["consume", "7d"])
def test_a_posts_retention_marks_are_scripts_followed_by_wait(full_redis, settings_env, retention):
    import threading

    # Given handlers that acknowledge writes once a replica holds them (REDIS_MIN_REPLICA_ACKS)
    url = full_redis.connection_pool.connection_kwargs
    settings_env(
        REDIS_URL=f"redis://{url['host']}:{url['port']}",
        REDIS_MIN_REPLICA_ACKS="1",
        REDIS_REPLICA_ACK_TIMEOUT_MS="20",
    )
    cp = _namespace(retention)
    _, result, job_id = _run_to_s3_result(cp)
    # When the daemon posts the result, watched by MONITOR
    seen: list[str] = []
    in_lua: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with full_redis.monitor() as m:
            ready.set()
            for command in m.listen():
                if command.get("client_type") == "lua":
                    in_lua.append(command["command"])
                    continue
                seen.append(command["command"])
                if command["command"].startswith("ECHO stop"):
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ready.wait(5)
    time.sleep(0.2)
    assert cp.post_result(job_id, {"resultRef": result}).status == 204
    full_redis.execute_command("ECHO", "stop")
    watcher.join(10)
    # Then no retention mark is a plain command outside a script: ZADD, HSETNX and EXPIRE run
    # only inside EVALSHA, each of which is followed by a WAIT on the same connection
    plain = [c for c in seen if c.split(" ", 1)[0] in ("ZADD", "HSETNX", "EXPIRE", "PEXPIREAT")]
    assert plain == [], plain
    scripts = [c for c in seen if c.startswith("EVALSHA")]
    waits = [c for c in seen if c.startswith("WAIT")]
    assert scripts and len(waits) >= len(scripts), (scripts, waits)
    marks = {"consume": "ZADD", "7d": "PEXPIREAT"}[retention]
    assert any(c.startswith(marks) for c in in_lua), in_lua


def test_a_result_wait_with_redis_past_maxmemory_answers_202_then_200(full_redis):
    import threading

    # Given a running job (any namespace) and Redis past its maxmemory
    cp = _namespace("2d")
    _, result, job_id = _run_to_s3_result(cp)
    _past_maxmemory(full_redis)
    # When the client waits for its result (Redis refuses BLMOVE, flagged denyoom)
    pending = cp.result(job_id, wait=1)
    # Then the wait answers 202 pending after it, not 503
    assert pending.status == 202, pending.raw_body
    # And a wait during which the daemon's result lands answers 200 with it
    poster = threading.Timer(0.5, lambda: cp.post_result(job_id, {"resultRef": result}))
    poster.start()
    done = cp.result(job_id, wait=2)
    poster.join()
    assert done.status == 200, done.raw_body
    assert done.json["resultRef"]["key"] == result["key"]


@pytest.mark.parametrize("state", ["payload_corrupt", "payload_lost"])
def test_a_7d_failure_report_re_sent_after_a_503_keeps_the_record_for_7_days(
    full_redis, monkeypatch, settings_env, state
):
    # Given a `7d` namespace's running job (a lost payload fails it at once)
    settings_env(PAYLOAD_LOST_POLICY="fail")
    cp = _namespace("7d")
    job_id = cp.enqueue(ref=upload(cp, b"A" * 400)).json["job_id"]
    assert cp.poll().status == 200
    # And a failure report that ends it, stored, then answered 503 because the connection
    # broke before the record's longer life was set
    cut_once(monkeypatch, "keep_finished_job")
    body = {"state": state, "detail": "checksum mismatch"}
    assert cp.report(job_id, body).status == 503
    assert cp.status(job_id).json["state"] == state
    # When the daemon re-sends the same report
    assert cp.report(job_id, body).status == 204
    # Then the job's record (hash and done list) lives 7 days from its end, as a result post's
    week_ms = 7 * 86_400 * 1000
    for key in (keys.job(job_id), keys.done(job_id)):
        assert full_redis.pttl(key) > week_ms - 60_000, key


def test_a_7d_cancel_re_sent_after_a_503_keeps_the_record_for_7_days(full_redis, monkeypatch):
    # Given a `7d` namespace's queued job, whose cancel was stored, then answered 503 because
    # the connection broke before the record's longer life was set
    cp = _namespace("7d")
    job_id = cp.enqueue(ref=upload(cp, b"A" * 400)).json["job_id"]
    cut_once(monkeypatch, "keep_finished_job")
    assert cancel(cp, job_id).status == 503
    assert cp.status(job_id).json["state"] == "cancelled"
    # When the client sends the cancel again
    again = cancel(cp, job_id)
    # Then it is told the job is cancelled already (its first cancel worked)
    assert again.status == 409 and again.error["state"] == "cancelled", again.raw_body
    # And the job's record lives 7 days from its end, as a cancel answered 200 leaves it
    week_ms = 7 * 86_400 * 1000
    assert full_redis.pttl(keys.job(job_id)) > week_ms - 60_000
