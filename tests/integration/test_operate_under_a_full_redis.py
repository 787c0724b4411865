"""Operations on jobs that exist, with Redis past its maxmemory (noeviction, the guard off so
Redis itself refuses): a retry cut between its job step and its queue step is finished by its
re-send, and a keyed cancel ends its job; new work is still refused 503 (issue 43). The real
handlers, a real redis-server of its own and the S3 emulator over HTTP."""

from __future__ import annotations

import uuid

import pytest
import redis

from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from payloadstore_devstack.services import RedisServer
from tests.integration.test_operate import fail, take
from tests.integration.test_redis_full import over_the_wall
from tests.support.control_plane import ControlPlane
from tests.support.env import single_server_env

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


def cut_once(monkeypatch, step: str) -> None:
    """The next call of this store step never reaches Redis (its connection is reset)."""
    real = getattr(RedisJobStore, step)
    left = {"n": 1}

    def cut(self, *a, **kw):
        if left["n"]:
            left["n"] -= 1
            raise redis.exceptions.ConnectionError("connection reset by peer")
        return real(self, *a, **kw)

    monkeypatch.setattr(RedisJobStore, step, cut)


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
