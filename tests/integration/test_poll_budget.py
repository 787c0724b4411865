"""Lambda's limits enforced before AWS does (issue 32): a poll's answer has a byte budget
(models/limits.py), so a `max_jobs=16` poll of large inline jobs stops adding jobs before
Lambda's 6 MB response limit, and what does not fit stays queued, never leased. Real handlers,
real Redis, the S3 emulator."""

from __future__ import annotations

import base64
import os
import time
import uuid

from payloadstore_controlplane.models.limits import LAMBDA_RESPONSE_LIMIT

KIB = 1024


def poll_many(cp, max_jobs: int):
    return cp.call(
        "daemon",
        "POST",
        "/v1/daemon/poll",
        role="daemon",
        body={
            "namespace": cp.ns,
            "queues": [cp.queue],
            "wait_s": 0,
            "daemon_id": "d1",
            "max_jobs": max_jobs,
        },
    )


def enqueue(cp, data: bytes) -> str:
    """The job id of an inline enqueue, retried on 503 as the SDK does (a multi-MB write can
    outlast REDIS_REPLICA_ACK_TIMEOUT_MS on a loaded machine: redis_replication_lag)."""
    key = uuid.uuid4().hex
    deadline = time.monotonic() + 20
    while True:
        reply = cp.enqueue(raw=data, headers={"Idempotency-Key": key})
        if reply.status != 503 or time.monotonic() > deadline:
            assert reply.status in (200, 201), reply.raw_body
            return reply.json["job_id"]
        time.sleep(0.2)


def queue_stats(cp) -> dict:
    return cp.call(
        "jobs", "GET", "/v1/namespaces/{ns}/queues/{queue}", {"ns": cp.ns, "queue": cp.queue}
    ).json


def test_sixteen_jobs_of_390_kib_arrive_in_answers_under_6_mb(cp, settings_env):
    # Given INLINE_THRESHOLD raised to 400 KiB and 16 queued inline jobs of ~390 KiB
    # (random bytes: nothing on the way compresses them)
    settings_env(INLINE_THRESHOLD=str(400 * KIB))
    sent = {}
    for _ in range(16):
        data = os.urandom(390 * KIB)
        sent[enqueue(cp, data)] = data
    # When a daemon polls with max_jobs=16 until it has them all
    started = time.monotonic()
    got: dict[str, bytes] = {}
    sizes = []
    while len(got) < 16 and time.monotonic() - started < 20:
        answer = poll_many(cp, 16)
        assert answer.status == 200, answer.raw_body
        sizes.append(answer.proxy_bytes)
        for job in answer.json["jobs"]:
            assert job["attempt"] == 1
            got[job["job_id"]] = base64.b64decode(job["payloadInline"])
        # Then no answer passes Lambda's 6 MB response limit (the whole proxy answer)
        assert answer.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, sizes
        # And what did not fit stayed queued, never leased: nothing in flight but what came
        stats = queue_stats(cp)
        assert (stats["queued"], stats["in_flight"]) == (16 - len(got), len(got)), stats
    elapsed = time.monotonic() - started
    # And every job arrived, intact, once, within seconds, over more than one answer
    assert got == sent
    assert len(sizes) >= 2, sizes
    print(
        f"poll budget: 16 jobs of 390 KiB in {len(sizes)} answers of {sizes} bytes, {elapsed:.2f} s"
    )
    assert elapsed < 10, elapsed
    assert poll_many(cp, 16).status == 204


def test_small_jobs_fill_a_poll_up_to_max_jobs(cp):
    # Given the default INLINE_THRESHOLD (256 KiB) and 16 queued inline jobs of 1 KiB
    jobs = [enqueue(cp, bytes([i]) * KIB) for i in range(16)]
    # When a daemon polls with max_jobs=16
    answer = poll_many(cp, 16)
    # Then the budget (room for one more job of the largest size) cuts nothing: all 16 at once
    assert answer.status == 200
    assert [j["job_id"] for j in answer.json["jobs"]] == jobs


def test_the_largest_accepted_threshold_still_delivers_one_job_per_answer(cp, settings_env):
    # Given the largest INLINE_THRESHOLD the settings accept, and two jobs of that size
    from payloadstore_controlplane.models.limits import largest_inline_threshold

    settings_env(INLINE_THRESHOLD=str(largest_inline_threshold()))
    size = largest_inline_threshold()
    jobs = [enqueue(cp, os.urandom(size)) for _ in range(2)]
    # When a daemon polls with max_jobs=16, twice
    answers = [poll_many(cp, 16), poll_many(cp, 16)]
    # Then each answer carries one job and stays under the limit; the other waited queued
    assert [[j["job_id"] for j in a.json["jobs"]] for a in answers] == [[jobs[0]], [jobs[1]]]
    assert all(a.proxy_bytes <= LAMBDA_RESPONSE_LIMIT for a in answers)
