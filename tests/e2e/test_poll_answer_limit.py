"""Issue 32, black-box through the local gateway (which, as Lambda, refuses a proxy answer over
6 MB with a 502): with INLINE_THRESHOLD raised to 400 KiB, 16 queued jobs of ~390 KiB are all
delivered by max_jobs=16 polls within seconds, and no answer passes the limit."""

from __future__ import annotations

import os
import time

import httpx

from payloadstore import Client
from tests.e2e.sdk_helpers import unique_queue

KIB = 1024
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024


def test_sixteen_jobs_of_390_kib_come_through_the_gateway_in_answers_under_6_mb(
    start_local_gateway,
):
    # Given a control plane with INLINE_THRESHOLD=400 KiB and 16 inline jobs of 390 KiB queued
    gateway = start_local_gateway(INLINE_THRESHOLD=str(400 * KIB))
    client = Client(gateway.url, gateway.token("dev", "client"), "dev")
    queue = unique_queue("budget")
    jobs = {client.queue(queue).add(os.urandom(390 * KIB)).job_id for _ in range(16)}
    client.close()
    # When a daemon polls with max_jobs=16 until it has them all
    delivered: list[str] = []
    sizes: list[int] = []
    started = time.monotonic()
    with httpx.Client(timeout=30) as http:
        while len(delivered) < 16 and time.monotonic() - started < 20:
            answer = http.post(
                f"{gateway.url}/v1/daemon/poll",
                headers=gateway.auth("dev", "daemon"),
                json={
                    "namespace": "dev",
                    "queues": [queue],
                    "wait_s": 0,
                    "daemon_id": "budget-d1",
                    "max_jobs": 16,
                },
            )
            # Then every answer is a 200 (over 6 MB the gateway, as Lambda, would answer 502)
            assert answer.status_code == 200, (answer.status_code, answer.text[:200])
            sizes.append(len(answer.content))
            delivered += [j["job_id"] for j in answer.json()["jobs"]]
    # And all 16 arrived, once each, within seconds, in more than one answer
    assert sorted(delivered) == sorted(jobs)
    assert len(sizes) >= 2 and max(sizes) < LAMBDA_RESPONSE_LIMIT, sizes
    assert time.monotonic() - started < 10


def test_jobs_queued_under_a_higher_threshold_come_through_after_it_is_lowered(
    start_local_gateway,
):
    # Given two 2.9 MB inline jobs queued under INLINE_THRESHOLD=3,000,000, and the control
    # plane deployed again with the default threshold (a new gateway on the same Redis)
    before = start_local_gateway(INLINE_THRESHOLD="3000000")
    client = Client(before.url, before.token("dev", "client"), "dev")
    queue = unique_queue("lowered")
    jobs = {client.queue(queue).add(os.urandom(2_900_000)).job_id for _ in range(2)}
    assert {client.job(j).status().tier for j in jobs} == {"inline"}
    client.close()
    after = start_local_gateway()
    # When a daemon polls the new one with max_jobs=16
    answers = []
    with httpx.Client(timeout=30) as http:
        for _ in range(3):
            answer = http.post(
                f"{after.url}/v1/daemon/poll",
                headers=after.auth("dev", "daemon"),
                json={
                    "namespace": "dev",
                    "queues": [queue],
                    "wait_s": 0,
                    "daemon_id": "lowered-d1",
                    "max_jobs": 16,
                },
            )
            answers.append(answer)
            if answer.status_code == 204:
                break
    # Then each job comes in an answer of its own, on its first attempt (over 6 MB the
    # gateway, as Lambda, would answer 502 and the jobs would wait out their leases)
    assert [a.status_code for a in answers] == [200, 200, 204], [
        (a.status_code, a.text[:200]) for a in answers
    ]
    got = [j for a in answers[:2] for j in a.json()["jobs"]]
    assert sorted(j["job_id"] for j in got) == sorted(jobs)
    assert all(j["attempt"] == 1 for j in got)
    assert max(len(a.content) for a in answers) < LAMBDA_RESPONSE_LIMIT
