"""A full (or nearly full) Redis: 503 with Retry-After and a code, never a 500, never a job id for
a job that is in no queue; the memory guard refuses inline bytes first, then new jobs."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
import redis

from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import RedisServer
from tests.support.control_plane import ControlPlane, upload
from tests.support.env import single_server_env

CHUNK = b"\x05" * 65_536


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def small_redis(tmp_path: Path, settings_env):
    """A redis-server of 4 MB (noeviction) and the handlers pointed at it; guard settings are
    given per test."""
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False, maxmemory="4mb").start()

    def use(**guard: str) -> tuple[ControlPlane, redis.Redis]:
        settings_env(**single_server_env(server.url), **guard)
        return ControlPlane("m" + uuid.uuid4().hex[:10]), redis.Redis.from_url(server.url)

    try:
        yield use
    finally:
        server.stop()


def drain(cp: ControlPlane, jobs: list[str]) -> None:
    """Take and finish these jobs as a daemon at the wall does: results through S3."""
    for job in jobs:
        polled = cp.poll()
        assert polled.status == 200 and polled.json["job_id"] == job, polled.raw_body
        result = upload(cp, b"\x01", role="daemon", job_id=job)
        assert cp.post_result(job, {"resultRef": result}).status == 204


def fill_until_refused(cp: ControlPlane, chunk: bytes = CHUNK, limit: int = 2000):
    """Inline enqueues with their own Idempotency-Keys until one is refused."""
    accepted = []
    for _ in range(limit):
        key = uuid.uuid4().hex
        r = cp.enqueue(raw=chunk, headers={"Idempotency-Key": key})
        if r.status != 201:
            return accepted, key, r
        accepted.append(r.json["job_id"])
    raise AssertionError("Redis never filled up")


def over_the_wall(r: redis.Redis, margin: int = 65_536) -> None:
    """Put Redis `margin` bytes past its maxmemory, so every write is refused whatever size it
    is. Filling with small writes until one is refused is not enough: the refused request's own
    buffer is freed after it, and the next small write may fit again."""
    r.config_set("maxmemory", r.info("memory")["used_memory"] - margin)


def test_oom_is_503_redis_memory_full_and_never_a_phantom(small_redis):
    # Given a Redis with maxmemory and the guard switched off, so Redis itself says OOM
    cp, r = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
    stream = keys.queue(cp.ns, cp.queue)
    # When clients enqueue until Redis is full
    accepted, key, refused = fill_until_refused(cp)
    # Then the refusal is a 503 with Retry-After and the code, not a 500
    assert refused.status == 503, refused.raw_body
    assert refused.error["code"] == "redis_memory_full"
    assert int(refused.headers["Retry-After"]) >= 1
    # And every accepted job id is in the queue, and the refused one left nothing behind
    ids = [f[b"j"].decode() for _, f in r.xrange(stream)]
    assert ids == accepted
    # And a retry with the same key, still full, is refused again (never a 200 for a phantom)
    again = cp.enqueue(raw=CHUNK, headers={"Idempotency-Key": key})
    assert (again.status, again.error["code"]) == (503, "redis_memory_full")
    # And once even small writes are refused (the 64 KiB request's own buffer counted too),
    # an S3-tier enqueue is refused the same way, at presign already
    over_the_wall(r)
    presign = cp.presign_put(10)
    assert (presign.status, presign.error["code"]) == (503, "redis_memory_full"), presign.raw_body

    # When daemons drain the full Redis (poll and results work at the wall)
    drain(cp, accepted[:10])
    # Then the retried enqueue now goes through, and that job runs
    retried = cp.enqueue(raw=CHUNK, headers={"Idempotency-Key": key})
    assert retried.status == 201
    assert retried.json["job_id"] in [f[b"j"].decode() for _, f in r.xrange(stream)]
    assert cp.status(retried.json["job_id"]).json["state"] == "queued"


def test_s3_enqueue_at_the_wall_answers_503_and_a_retry_completes_it(small_redis, settings_env):
    # Given an uploaded S3-tier payload, then Redis fills up
    cp, r = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
    ref = upload(cp, b"\x02" * 1000)
    job = ref["key"].split("/")[-2]
    accepted, _, refused = fill_until_refused(cp)
    over_the_wall(r)
    assert refused.status == 503
    # When the client enqueues the reference
    r1 = cp.enqueue(ref=ref)
    # Then it is refused with the code, and the job is not visible as a job
    assert (r1.status, r1.error["code"]) == (503, "redis_memory_full")
    assert cp.status(job).status == 404
    # When some jobs are drained and the client retries
    drain(cp, accepted[:10])
    r2 = cp.enqueue(ref=ref)
    # Then the append completes: the job is in the queue and is delivered
    assert r2.status in (200, 201) and r2.json["job_id"] == job
    assert cp.status(job).json["state"] == "queued"
    delivered = set()
    for _ in range(len(accepted) + 1):
        polled = cp.poll()
        if polled.status != 200:
            break
        delivered.add(polled.json["job_id"])
    assert job in delivered


def test_guard_refuses_inline_past_the_high_water_mark(small_redis, capsys):
    # Given a guard whose high-water mark is below what Redis already uses
    cp, r = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="1", REDIS_MEMORY_HARD_PCT="100")
    # When a client enqueues inline bytes
    inline = cp.enqueue(raw=b"\x01" * 100)
    # Then it is told to send them through S3: 503, Retry-After, code inline_unavailable
    assert (inline.status, inline.error["code"]) == (503, "inline_unavailable")
    assert int(inline.headers["Retry-After"]) >= 1
    assert "presign" in inline.error["message"]
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 0
    # And the refusal is counted (EMF)
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    assert any(m.get("InlineRefused") == [1.0] and m.get("kind") == "payload" for m in emitted)
    # And the same payload through S3 is accepted and delivered
    ref = upload(cp, b"\x01" * 100)
    assert cp.enqueue(ref=ref).status == 201
    job = cp.poll().json["job_id"]
    # And an inline result is refused the same way, while an S3 result is taken
    refused = cp.post_result(job, {"resultInline": b64(b"\x02")})
    assert (refused.status, refused.error["code"]) == (503, "inline_unavailable")
    assert cp.status(job).json["state"] == "running"
    result = upload(cp, b"\x02", role="daemon", job_id=job)
    assert cp.post_result(job, {"resultRef": result}).status == 204
    assert cp.result(job).json["resultRef"] == result
    # And health shows the memory figures and that the guard is on, still healthy (the public
    # answer says ok; the figures are in the details, for token holders)
    assert (
        cp.call("public", "GET", "/v1/health", namespace=None).json["checks"]["redis_memory"]
        == "ok"
    )
    health = cp.call("public", "GET", "/v1/health/details").json
    check = health["checks"]["redis_memory"]
    assert (
        check["ok"] is True and "guard on" in check["detail"] and "of 4194304 B" in check["detail"]
    )


def test_hard_mark_refuses_new_jobs_but_not_the_drain(small_redis):
    # Given one queued S3-tier job, then a hard mark below what Redis uses
    cp, _ = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
    ref = upload(cp, b"\x03" * 10)
    assert cp.enqueue(ref=ref).status == 201
    late = upload(cp, b"\x04" * 10)
    cp2, _ = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="1", REDIS_MEMORY_HARD_PCT="1")
    cp2.ns, cp2.queue = cp.ns, cp.queue
    # When clients add jobs
    presign = cp2.presign_put(10)
    enqueue = cp2.enqueue(ref=late)
    # Then both are refused with redis_memory_full and Retry-After
    for reply in (presign, enqueue):
        assert (reply.status, reply.error["code"]) == (503, "redis_memory_full"), reply.raw_body
        assert reply.headers.get("Retry-After")
    # And the queued job can still be taken and finished (through S3)
    job = cp2.poll().json["job_id"]
    result = upload(cp2, b"\x05", role="daemon", job_id=job)
    assert cp2.post_result(job, {"resultRef": result}).status == 204
    # And health says new jobs are refused
    health = cp2.call("public", "GET", "/v1/health", namespace=None)
    assert health.status == 503 and "redis_memory" in health.json["failing"]


def test_a_retry_refused_by_the_guard_gets_the_job_its_first_attempt_made(small_redis):
    # Given an inline job enqueued with an Idempotency-Key whose 201 the client never saw
    cp, r = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
    first = cp.enqueue(raw=b"\x01" * 100, headers={"Idempotency-Key": "retry-me"})
    batched = batch_call(cp, [{"payloadInline": b64(b"\x02"), "idempotency_key": "retry-batch"}])
    assert first.status == 201 and batched.status == 200
    # And Redis then passes the high-water mark
    walled, _ = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="1", REDIS_MEMORY_HARD_PCT="100")
    walled.ns, walled.queue = cp.ns, cp.queue
    stream = keys.queue(cp.ns, cp.queue)
    # When the client retries with the same key (once alone, once in a batch)
    again = walled.enqueue(raw=b"\x01" * 100, headers={"Idempotency-Key": "retry-me"})
    items = [
        {"payloadInline": b64(b"\x02"), "idempotency_key": "retry-batch"},
        {"payloadInline": b64(b"\x03"), "idempotency_key": "a-new-key"},
    ]
    batch_again = batch_call(walled, items)
    # Then each retry gets the job its first attempt made (200), not inline_unavailable, which
    # would have sent the bytes through S3 as a second job
    assert (again.status, again.json["job_id"]) == (200, first.json["job_id"]), again.raw_body
    answers = batch_again.json["jobs"]
    assert answers[0] == batched.json["jobs"][0]
    # And a new key is still refused, and nothing was added to the queue
    assert answers[1]["error"]["code"] == "inline_unavailable"
    new = walled.enqueue(raw=b"\x01" * 100, headers={"Idempotency-Key": "brand-new"})
    assert (new.status, new.error["code"]) == (503, "inline_unavailable")
    assert r.xlen(stream) == 2
    # And the key used on another queue is a conflict, as it is below the mark
    walled.queue = "other"
    other = walled.enqueue(raw=b"\x01" * 100, headers={"Idempotency-Key": "retry-me"})
    assert other.status == 409, other.raw_body


def batch_call(cp: ControlPlane, jobs: list[dict]):
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={"jobs": jobs},
    )


def test_at_the_wall_a_daemon_keeps_its_leases_and_a_cancel_still_wakes_it(small_redis):
    import threading
    import time

    from tests.support.control_plane import cancel, leases

    # Given: a daemon holding a running job, and a Redis past its maxmemory (every denyoom
    # write refused)
    cp, r = small_redis(REDIS_MEMORY_HIGH_WATER_PCT="100", REDIS_MEMORY_HARD_PCT="100")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    delivery = cp.poll(daemon_id="dw").json
    held = {job: delivery["lease"]}
    over_the_wall(r)
    # When: the daemon renews its leases
    renewed = leases(cp, "dw", held, wait_s=0)
    # Then: they are renewed (a daemon draining at the wall must not lose its jobs)
    assert renewed.status == 200, renewed.raw_body
    assert renewed.json["lost"] == []
    # And when a client cancels the job while the daemon waits, the wait ends with it
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(leases(cp, "dw", held, wait_s=10)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.5)
    asked = cancel(cp, job)
    waiter.join(15)
    assert asked.status == 202, asked.raw_body
    assert answers and answers[0].json["cancel_requested"] == [job], answers
    assert time.monotonic() - started < 3.0
