"""Enqueue-and-wait under change (issue 43): once the job is queued the answer is 201 with its
id whatever happens to the wait (`waited: false` when the wait failed), and a batch that leaves
a result out of its answer for the byte budget starts nothing for it (a `consume` result's grace
starts with the read that carries it). Real handlers, real Redis, the S3 emulator."""

from __future__ import annotations

import base64
import threading
import time
import uuid

import msgpack
import requests

from payloadstore_controlplane.models.api import EnqueueResponse
from payloadstore_controlplane.models.limits import (
    DELIVERIES_BUDGET,
    delivery_bytes,
    largest_inline_threshold,
)
from payloadstore_controlplane.models.policy import NamespacePolicy
from tests.integration.test_enqueue_wait import b64, batch_wait, daemon, enqueue_wait
from tests.integration.test_namespace_policy import _run_scheduled
from tests.integration.test_redis_outage import restart_redis_after  # noqa: F401 - fixture
from tests.support.control_plane import ControlPlane, upload


def stop_after(redis_server, delay_s: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), redis_server.stop()))
    thread.start()
    return thread


def wait_for_redis(cp) -> None:
    deadline = time.monotonic() + 10
    while cp.call("public", "GET", "/v1/health", namespace=None).status != 200:
        assert time.monotonic() < deadline, "redis did not come back within 10 s"
        time.sleep(0.1)


def test_redis_failing_during_the_wait_answers_201_with_the_queued_job(cp, restart_redis_after):  # noqa: F811
    redis_server = restart_redis_after
    # Given an enqueue that waits up to 5 s for its job, and Redis stopping 0.5 s into the wait
    stopper = stop_after(redis_server, 0.5)
    # When the enqueue (no Idempotency-Key, as a plain wire client sends it) answers
    r = enqueue_wait(cp, 5, body={"payloadInline": b64(b"\x01")})
    stopper.join()
    # Then it is 201 with the job id, saying it did not wait: the client has its job and does
    # not enqueue again
    assert r.status == 201, r.raw_body
    assert r.json["waited"] is False and "state" not in r.json
    job_id = r.json["job_id"]
    # And once Redis is back that job, the only one, is queued and delivered
    redis_server.start()
    wait_for_redis(cp)
    got = cp.poll()
    assert got.status == 200 and got.json["job_id"] == job_id
    assert cp.poll().status == 204


def test_redis_failing_during_a_batch_wait_answers_every_queued_job(cp, restart_redis_after):  # noqa: F811
    redis_server = restart_redis_after
    # Given a batch of 3 jobs that waits up to 5 s, and Redis stopping 0.5 s into the wait
    stopper = stop_after(redis_server, 0.5)
    r = batch_wait(cp, 5, [{"payloadInline": b64(msgpack.packb(i))} for i in range(3)])
    stopper.join()
    # Then each job answers its id, none waited
    assert r.status == 200, r.raw_body
    jobs = r.json["jobs"]
    assert [j.get("waited") for j in jobs] == [False, False, False], jobs
    redis_server.start()
    wait_for_redis(cp)
    polled = [cp.poll().json["job_id"] for _ in range(3)]
    assert polled == [j["job_id"] for j in jobs]


def _result_size(size: int) -> int:
    """What a batch answer item carrying an inline result of `size` bytes weighs."""
    item = EnqueueResponse(
        job_id="0" * 26, tier="inline", state="succeeded", resultInline=b64(b"\0" * size)
    )
    return delivery_bytes(item)


def test_a_result_left_out_of_a_batch_answer_is_not_consumed(cp_env, settings_env, s3_client):
    # Given a `consume` namespace (result grace 1 s), the largest INLINE_THRESHOLD, and a batch
    # of three jobs whose results fill the answer's budget: two inline results that leave under
    # 40 bytes of it, then an S3 result
    settings_env(CONSUME_RESULT_GRACE_S="1", INLINE_THRESHOLD=str(largest_inline_threshold()))
    ns = ControlPlane("c" + uuid.uuid4().hex[:10], NamespacePolicy("consume", "none", "allowed"))
    first = largest_inline_threshold()
    left = DELIVERIES_BUDGET - _result_size(first)
    second = next(n for n in range(left, 0, -1) if _result_size(n) <= left)
    assert left - _result_size(second) < 40
    results = {0: b"a" * first, 1: b"b" * second, 2: b"stored in S3"}

    def answer(mine, job):
        i = msgpack.unpackb(base64.b64decode(job["payloadInline"]))
        if i < 2:
            return {"resultInline": b64(results[i])}
        return {"resultRef": upload(mine, results[2], role="daemon", job_id=job["job_id"])}

    worker = daemon(ns, 3, answer)
    # When the batch is enqueued with ?wait
    r = batch_wait(ns, 10, [{"payloadInline": b64(msgpack.packb(i))} for i in range(3)])
    worker.join(10)
    # Then the answer carries the two inline results and leaves the S3 one out
    assert r.status == 200, r.raw_body[:300]
    jobs = r.json["jobs"]
    assert [j.get("state") for j in jobs] == ["succeeded", "succeeded", None]
    assert r.proxy_bytes <= 6 * 1024 * 1024
    # And past the grace (the scheduled deletions run), the first real read of the left-out
    # result answers it, and its bytes download
    time.sleep(1.2)
    _run_scheduled()
    read = ns.result(jobs[2]["job_id"])
    assert read.status == 200, read.raw_body
    assert requests.get(read.json["download"]["url"], timeout=30).content == results[2]
