"""Operations on jobs that exist, with Redis past its maxmemory (noeviction, the guard off so
Redis itself refuses): a retry cut between its job step and its queue step is finished by its
re-send, and a keyed cancel ends its job; new work is still refused 503 (issue 43). The real
handlers, a real redis-server of its own and the S3 emulator over HTTP."""

from __future__ import annotations

import base64
import uuid

import pytest
import redis

from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import RedisServer
from tests.integration.test_operate import fail, take
from tests.integration.test_redis_full import over_the_wall
from tests.support.control_plane import ControlPlane, create_blob
from tests.support.env import single_server_env
from tests.support.faults import cut_once

NO_GUARD = {"REDIS_MEMORY_HIGH_WATER_PCT": "100", "REDIS_MEMORY_HARD_PCT": "100"}


@pytest.fixture
def full_redis_cp(tmp_path, settings_env):
    """A control plane on a redis-server of its own (16 MB, noeviction), and that server."""
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False, maxmemory="16mb").start()
    try:
        settings_env(**single_server_env(server.url), **NO_GUARD)
        yield ControlPlane("f" + uuid.uuid4().hex[:10]), redis.Redis.from_url(server.url)
    finally:
        server.stop()


def keyed(cp: ControlPlane, method: str, resource: str, params: dict, key: str):
    return cp.call("jobs", method, resource, params, headers={"Idempotency-Key": key})


def retry_keyed(cp: ControlPlane, job_id: str, key: str):
    params = {"ns": cp.ns, "job_id": job_id}
    return keyed(cp, "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", params, key)


def test_a_retry_cut_between_its_steps_is_finished_by_its_resend_when_redis_is_full(
    full_redis_cp, monkeypatch
):
    cp, r = full_redis_cp
    # Given a failed job whose keyed retry ran its job step and was cut before its queue step
    job = cp.enqueue(inline=b"\x01").json["job_id"]
    take(cp, job)
    fail(cp, job)
    cut_once(monkeypatch, "requeue")
    assert retry_keyed(cp, job, "k-retry").status == 503
    assert r.hmget(keys.job(job), "s", "x") == [b"queued", b"*"]
    # And Redis past its maxmemory, so new work is refused
    over_the_wall(r)
    assert cp.enqueue(inline=b"\x02").status == 503
    # When the retry is sent again with its Idempotency-Key
    reply = retry_keyed(cp, job, "k-retry")
    # Then it is finished: 200 queued, and the job is delivered (its arguments with it)
    assert reply.status == 200, reply.raw_body
    assert reply.json["state"] == "queued"
    delivered = take(cp, job)
    assert delivered["job_id"] == job
    assert cp.poll().status == 204


def test_a_keyed_cancel_ends_a_queued_job_when_redis_is_full(full_redis_cp):
    cp, r = full_redis_cp
    # Given a queued job and Redis past its maxmemory
    job = cp.enqueue(inline=b"\x01").json["job_id"]
    over_the_wall(r)
    assert cp.enqueue(inline=b"\x02").status == 503
    # When a client cancels it with an Idempotency-Key (as the SDK sends one)
    params = {"ns": cp.ns, "job_id": job}
    reply = keyed(cp, "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", params, "k-cancel")
    # Then the cancel is done, and no daemon is handed the job
    assert reply.status == 200, reply.raw_body
    assert cp.status(job).json["state"] == "cancelled"
    assert cp.poll().status == 204


def test_keyed_operations_under_a_full_redis_keep_nothing_per_key(full_redis_cp):
    cp, r = full_redis_cp
    # Given a running job, an empty queue, and Redis past its maxmemory
    job = cp.enqueue(inline=b"\x01").json["job_id"]
    take(cp, job)
    over_the_wall(r)
    assert cp.enqueue(inline=b"\x02").status == 503
    # When clients send 200 purges and 200 redrives of the empty queue and 200 cancels of the
    # running job, each with a key of its own (measured after a first round: Redis caches each
    # script once)
    queue = {"ns": cp.ns, "queue": "empty"}
    sent, answers = [], []
    for n in range(-1, 200):
        if n == 0:
            before = r.info("memory")["used_memory"]
        for method, resource, params in (
            ("POST", "/v1/namespaces/{ns}/queues/{queue}/purge", queue),
            ("POST", "/v1/namespaces/{ns}/queues/{queue}/redrive", queue),
            ("DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": cp.ns, "job_id": job}),
        ):
            key = f"k{n}-{method}-{resource.rsplit('/', 1)[-1].strip('{}')}"
            sent.append(key)
            answers.append(keyed(cp, method, resource, params, key).status)
    # Then each is answered (the cancel requested of the running job)
    assert set(answers) <= {200, 202}, answers
    # And Redis, full, keeps none of their keys: it grows by no record per request (~330 B
    # each, kept for IDEMPOTENCY_TTL_S, before the fix: 600 keyed no-ops, ~200 KB past the wall)
    assert [k for k in sent if r.exists(keys.operation(cp.ns, k))] == []
    assert r.info("memory")["used_memory"] - before < 32_768


def test_a_keyed_cancel_sent_again_under_a_full_redis_tells_its_cancel_worked(full_redis_cp):
    cp, r = full_redis_cp
    # Given a queued job, Redis past its maxmemory, and a keyed cancel of it done (its answer,
    # the client's connection cut, never read)
    job = cp.enqueue(inline=b"\x01").json["job_id"]
    over_the_wall(r)
    params = {"ns": cp.ns, "job_id": job}
    assert keyed(cp, "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", params, "k-c").status == 200
    # When the client sends it again with its key
    again = keyed(cp, "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", params, "k-c")
    # Then its answer tells the job is cancelled (the answer was not kept, Redis full: the
    # repeat runs as one without a key does, and its conflict names the state)
    assert again.status in (200, 409), again.raw_body
    assert again.status == 200 or again.error["state"] == "cancelled"
    assert cp.status(job).json["state"] == "cancelled"


def test_a_redrive_under_a_full_redis_retries_every_job_it_can(full_redis_cp):
    cp, r = full_redis_cp
    # Given seven failed jobs of a queue, the fourth referencing a blob, and Redis past its
    # maxmemory (a retry of a job with blobs records their need first, which Redis refuses)
    sha = create_blob(cp, b"blob-bytes")
    blob_args = {"blobs": [sha], "payloadInline": base64.b64encode(b"\x91\x02").decode()}
    older = [cp.enqueue(inline=b"\x91\x01").json["job_id"] for _ in range(3)]
    with_blob = cp.enqueue(body=blob_args).json["job_id"]
    newer = [cp.enqueue(inline=b"\x91\x01").json["job_id"] for _ in range(3)]
    for job in [*older, with_blob, *newer]:
        take(cp, job)
        fail(cp, job)
    over_the_wall(r)
    # When the queue is redriven (with an Idempotency-Key, as the SDK sends one)
    params = {"ns": cp.ns, "queue": cp.queue}
    resource = "/v1/namespaces/{ns}/queues/{queue}/redrive"
    reply = keyed(cp, "POST", resource, params, "k-redrive")
    # Then every job without blobs is retried, the older ones too (before the fix the redrive
    # stopped at the job with the blob: 503, the three newer retried, every re-send the same)
    assert [cp.status(j).json["state"] for j in older + newer] == ["queued"] * 6
    # And the job with the blob waits for room, untouched, and the answer says to try again
    assert cp.status(with_blob).json["state"] == "failed"
    assert (reply.status, reply.error["code"]) == (503, "redis_memory_full"), reply.raw_body
    assert int(reply.headers["Retry-After"]) >= 1
    # When Redis has room again and the redrive is sent again with its key
    r.config_set("maxmemory", 16 * 1024 * 1024)
    again = keyed(cp, "POST", resource, params, "k-redrive")
    # Then it retries the job with the blob, and each of the seven is delivered once
    assert again.status == 200, again.raw_body
    assert again.json == {"retried": 1, "skipped": 0}
    delivered = [cp.poll().json["job_id"] for _ in range(7)]
    assert sorted(delivered) == sorted([*older, with_blob, *newer])
    assert cp.poll().status == 204
