"""The Redis layout of a job (issue 8): compact hashes that stay listpack, entries that carry only
the job id, results in the done list, no per-key idempotency records, and the bytes per job."""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path

import pytest
import redis

from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import RedisServer
from tests.support.control_plane import ControlPlane, upload
from tests.support.env import single_server_env


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def job_key(job_id: str) -> str:
    return keys.job(job_id)


@pytest.fixture
def r(redis_view):
    return redis_view


def assert_compact(r, job_id: str) -> dict:
    key = job_key(job_id)
    fields = r.hgetall(key)
    assert r.object("encoding", key) == b"listpack", fields
    assert all(len(v) <= 64 and len(k) <= 2 for k, v in fields.items()), fields
    return fields


def test_s3_job_hash_stays_listpack_through_its_life(cp, r):
    # Given an S3-tier job with a sha256 and a content type that is not the default
    data = b"\x01" * 5000
    pre = cp.presign_put(len(data), content_type="application/x-custom+msgpack")
    assert pre.status == 200
    job = pre.json["job_id"]
    assert assert_compact(r, job)[b"s"] == b"awaiting_upload"
    ref = upload(cp, b"\x02" * 3000)  # a second job, with sha256, default type
    assert cp.enqueue(ref=ref).status == 201
    job = ref["key"].split("/")[-2]
    queued = assert_compact(r, job)
    assert queued[b"s"] == b"queued" and len(queued[b"ph"]) == 32 and b"pc" not in queued
    # When it runs and ends with an S3 result
    assert cp.poll().json["job_id"] == job
    assert assert_compact(r, job)[b"s"] == b"running"
    result = upload(cp, b"\x03" * 70_000, role="daemon", job_id=job)
    assert cp.post_result(job, {"resultRef": result}).status == 204
    # Then the hash stayed listpack, and the references are rebuilt from it
    assert assert_compact(r, job)[b"s"] == b"succeeded"
    status = cp.status(job).json
    assert status["payloadRef"] == ref
    assert status["resultRef"] == result
    assert cp.result(job).json["resultRef"] == result


def test_inline_results_and_long_errors_live_in_the_done_list(cp, r):
    # Given two inline jobs, one ending with a 256 KiB result, one with a 60 KiB traceback
    big = b"\x07" * 262_144
    ok = cp.enqueue(raw=b"\x01").json["job_id"]
    bad = cp.enqueue(raw=b"\x02").json["job_id"]
    cp.poll()
    cp.poll()
    assert cp.post_result(ok, {"resultInline": b64(big)}).status == 204
    error = {"type": "ValueError", "message": "x" * 1000, "traceback": "t" * 60_000}
    assert cp.post_result(bad, {"error": error}).status == 204
    # Then both hashes stay listpack, and the results are whole
    assert_compact(r, ok)
    assert_compact(r, bad)
    assert base64.b64decode(cp.result(ok).json["resultInline"]) == big
    got = cp.result(bad).json
    assert got["state"] == "failed" and got["error"]["traceback"] == "t" * 60_000
    assert cp.status(bad).json["error"]["message"] == "x" * 1000
    assert r.ttl(keys.done(ok)) > 172_000


def test_queued_inline_job_has_no_hash_and_no_idempotency_record(cp, r):
    # Given an inline job enqueued with an Idempotency-Key
    h = {"Idempotency-Key": uuid.uuid4().hex}
    first = cp.enqueue(raw=b"\x01", headers=h)
    job = first.json["job_id"]
    # Then it is one stream entry plus one field of the namespace's inline index: no job hash,
    # no idempotency string
    assert not r.exists(job_key(job))
    assert not list(r.scan_iter(match=keys.idempotency(cp.ns, "*")))
    assert r.smembers(keys.queue_names(cp.ns)) == {cp.queue.encode()}
    status = cp.status(job).json
    assert (status["state"], status["tier"], status["queue"]) == ("queued", "inline", cp.queue)
    # And a retry of the request finds it, without a second entry
    again = cp.enqueue(raw=b"\x01", headers=h)
    assert (again.status, again.json["job_id"]) == (200, job)
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 1
    # And its hash is born at the first delivery
    assert cp.poll().json["job_id"] == job
    assert assert_compact(r, job)[b"s"] == b"running"
    # And a retry after delivery still finds the same job
    assert cp.enqueue(raw=b"\x01", headers=h).json["job_id"] == job


def test_idempotency_key_is_remembered_for_its_ttl_only(cp, r, settings_env, monkeypatch):
    # Given IDEMPOTENCY_TTL_S=120 and a job enqueued with a key
    settings_env(IDEMPOTENCY_TTL_S="120")
    from payloadstore_controlplane.runtime import clock

    h = {"Idempotency-Key": "order-7"}
    t0 = time.time()
    first = cp.enqueue(raw=b"\x01", headers=h).json["job_id"]
    # When the same key comes again 100 s later, it is the same job; 200 s later, a new one
    monkeypatch.setattr(clock, "now", lambda: t0 + 100)
    assert cp.enqueue(raw=b"\x01", headers=h).json["job_id"] == first
    monkeypatch.setattr(clock, "now", lambda: t0 + 200)
    later = cp.enqueue(raw=b"\x01", headers=h)
    assert later.status == 201 and later.json["job_id"] != first


def test_idempotency_key_repeat_across_an_hour_of_the_inline_index(cp, r, monkeypatch):
    # Given a job enqueued with a key in the last minute of an hour (its index hash is that hour's)
    from payloadstore_controlplane.runtime import clock

    hour = (int(time.time()) // 3600) * 3600
    h = {"Idempotency-Key": "order-hour"}
    monkeypatch.setattr(clock, "now", lambda: hour - 30.0)
    first = cp.enqueue(raw=b"\x01", headers=h).json["job_id"]
    # When the same key comes two minutes later, in the next hour (its candidates span two index
    # hashes), it is the same job, and no second entry was appended
    monkeypatch.setattr(clock, "now", lambda: hour + 90.0)
    again = cp.enqueue(raw=b"\x01", headers=h)
    assert again.status == 200 and again.json["job_id"] == first
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 1


def _commands(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}


def test_repeated_key_is_found_by_its_key_field_not_minute_by_minute(private_cp, monkeypatch):
    # Given a control plane that has enqueued keyed jobs for a while (its keyed-since marker,
    # set by the first keyed enqueue, lies in the past), and a job enqueued with a key then
    from payloadstore_controlplane.logic.enqueue import idempotency_tail
    from payloadstore_controlplane.runtime import clock

    cp, r = private_cp
    t0 = (int(time.time()) // 3600) * 3600 - 1800.0
    monkeypatch.setattr(clock, "now", lambda: t0)
    cp.enqueue(raw=b"\x00", headers={"Idempotency-Key": "first-of-the-namespace"})
    monkeypatch.setattr(clock, "now", lambda: t0 + 1200)
    first = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "order-k"}).json["job_id"]
    # Then its index hash names the key's newest job by its minute
    tail = idempotency_tail(cp.ns, "order-k")
    index = keys.inline_index(cp.ns, int((t0 + 1200) * 1000))
    assert r.hget(index, "k" + tail) == first[:10].encode()
    # When the same key comes 50 minutes later (the next hour: two index hashes to look in)
    monkeypatch.setattr(clock, "now", lambda: t0 + 1200 + 3000)
    r.config_resetstat()
    again = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "order-k"})
    calls = _commands(r)
    # Then it is the same job, found with one HGET per index hash and its queue's: no
    # per-minute lookups (there were 61 for the hour window)
    assert (again.status, again.json["job_id"]) == (200, first)
    assert "hmget" not in calls and calls.get("hget", 0) <= 3, calls
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 2
    # And once the key's hour (IDEMPOTENCY_TTL_S) has passed, the key makes a new job
    monkeypatch.setattr(clock, "now", lambda: t0 + 1200 + 3600 + 61)
    later = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "order-k"})
    assert later.status == 201 and later.json["job_id"] != first


def test_repeated_key_finds_a_job_an_older_control_plane_enqueued(private_cp, monkeypatch):
    # Given a keyed inline job as the control plane before key fields wrote it: its id is the
    # minute's chars + the key's tail, indexed by id alone, and no keyed-since marker
    from payloadstore_controlplane.logic.enqueue import idempotency_tail
    from payloadstore_controlplane.models.domain import job_id_time_chars
    from payloadstore_controlplane.runtime import clock

    cp, r = private_cp
    t0 = (int(time.time()) // 60) * 60.0
    minute_ms = int(t0 * 1000)
    old_job = job_id_time_chars(minute_ms) + idempotency_tail(cp.ns, "order-old")
    index = keys.inline_index(cp.ns, minute_ms)
    r.hset(index, old_job, cp.queue)
    r.pexpireat(index, minute_ms + 7_200_000)
    assert not r.exists(keys.inline_keyed_since(cp.ns))
    # When this control plane sees the key again, 5 and 40 minutes later (the second after its
    # marker's grace: the old job's minute is still before the marker)
    for later_s in (300, 2400):
        monkeypatch.setattr(clock, "now", lambda later_s=later_s: t0 + later_s)
        again = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "order-old"})
        # Then it is the older control plane's job, not a second one
        assert (again.status, again.json["job_id"]) == (200, old_job)
    assert r.xlen(keys.queue(cp.ns, cp.queue)) == 0
    # And the marker holds the minute from which keys are looked up by their field
    marker = r.get(keys.inline_keyed_since(cp.ns))
    assert marker == job_id_time_chars(minute_ms + 300_000 + 600_000).encode()


# -- bytes per job, on a private redis-server ---------------------------------------------


@pytest.fixture
def private_cp(tmp_path: Path, settings_env):
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False).start()
    settings_env(**single_server_env(server.url))
    try:
        yield ControlPlane("f" + uuid.uuid4().hex[:10]), redis.Redis.from_url(server.url)
    finally:
        server.stop()


def _per_job(r, n: int, make, then=None) -> float:
    r.flushall()
    before = int(r.info("memory")["used_memory"])
    for _ in range(n):
        make()
    for _ in range(n if then else 0):
        then()
    return (int(r.info("memory")["used_memory"]) - before) / n


def test_bytes_per_job_meet_the_goals_with_a_margin(private_cp):
    cp, r = private_cp
    kib = b"\x01" * 1024
    n = 150

    def s3_job():
        assert cp.enqueue(ref=upload(cp, b"\x05" * 300)).status == 201

    def inline_job():
        assert cp.enqueue(raw=kib, headers={"Idempotency-Key": uuid.uuid4().hex}).status == 201

    def finish(result_inline: bool):
        def run():
            job = cp.poll().json["job_id"]
            if result_inline:
                body = {"resultInline": b64(kib)}
            else:
                body = {"resultRef": upload(cp, b"\x06" * 400, role="daemon", job_id=job)}
            assert cp.post_result(job, body).status == 204

        return run

    # Warm up every path (Redis keeps loaded scripts across FLUSHALL)
    _per_job(r, 2, s3_job, finish(False))
    _per_job(r, 2, inline_job, finish(True))

    # Goals: S3 queued <= 512, finished <= 1024; inline queued <= payload + 400,
    # finished <= payload + result + 600. Asserted with a margin of ~10 %.
    assert _per_job(r, n, s3_job) <= 460
    assert _per_job(r, n, s3_job, finish(False)) <= 920
    assert _per_job(r, n, inline_job) <= 1024 + 360
    assert _per_job(r, n, inline_job, finish(True)) <= 2048 + 540
