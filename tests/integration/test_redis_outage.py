"""Redis stopped mid-test: clear 503s with Retry-After, and queued jobs survive a restart."""

from __future__ import annotations

import time

import pytest

from tests.support.env import single_server_env


@pytest.fixture
def restart_redis_after(redis_server, settings_env):
    # The session's own redis-server (appendonly) serves the handlers, whatever
    # PAYLOADSTORE_REDIS says: a local cluster's outages are the failover suite's (RELIABILITY.md).
    settings_env(**single_server_env(redis_server.url))
    yield redis_server
    if redis_server.proc is None:
        redis_server.start()


def test_redis_down_is_503_with_retry_after_and_jobs_survive_restart(cp, restart_redis_after):
    redis_server = restart_redis_after
    # Given two queued jobs (appendonly on, as in the local stack)
    jobs = [cp.enqueue(raw=bytes([i])).json["job_id"] for i in range(2)]
    # When Redis stops
    redis_server.stop()
    started = time.monotonic()
    responses = [
        cp.enqueue(raw=b"\x09"),
        cp.status(jobs[0]),
        cp.poll(),
        cp.result(jobs[0], wait=1),
    ]
    elapsed = time.monotonic() - started
    # Then every route answers 503 with Retry-After and a plain message, quickly
    for r in responses:
        assert r.status == 503, r.raw_body
        assert r.headers.get("Retry-After") == "2"
        assert r.error["message"] == "redis is unreachable; retry shortly"
        assert "Traceback" not in r.raw_body
    print(f"503s took {elapsed:.2f}s")
    assert elapsed < 5
    health = cp.call("public", "GET", "/v1/health", namespace=None)
    assert health.status == 503 and health.json["failing"] == ["redis"]
    # And after a restart (once Redis has loaded its AOF and answers) the queued jobs are still
    # there and are delivered
    redis_server.start()
    deadline = time.monotonic() + 10
    while cp.call("public", "GET", "/v1/health", namespace=None).status != 200:
        assert time.monotonic() < deadline, "redis did not come back within 10 s"
        time.sleep(0.1)
    polls = [cp.poll() for _ in range(2)]
    assert [p.status for p in polls] == [200, 200], [p.raw_body for p in polls]
    delivered = {p.json["job_id"] for p in polls}
    assert delivered == set(jobs)
    assert cp.call("public", "GET", "/v1/health", namespace=None).status == 200
