"""Every answer's byte budget holds under change (issue 43): an answer that carries deliveries
weighs each by what it really carries, not by today's INLINE_THRESHOLD, and leases nothing it
does not deliver. Settings change as a deploy changes them: handlers built anew with the new
value, on the same Redis, under jobs queued before. Real handlers, real Redis, the S3 emulator."""

from __future__ import annotations

import base64
import os
import time

from payloadstore_controlplane.models.limits import LAMBDA_RESPONSE_LIMIT
from tests.integration.test_poll_budget import enqueue, poll_many, queue_stats
from tests.integration.test_result_next import b64, nxt, post

# Raised to this for the enqueue, then back to the default: two such jobs weigh ~7.8 MB base64.
HIGH_THRESHOLD = 3_000_000
BIG = 2_900_000


def status(cp, job_id: str) -> dict:
    return cp.call(
        "jobs", "GET", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": cp.ns, "job_id": job_id}
    ).json


def big_jobs_then_threshold_lowered(cp, settings_env, n: int = 2) -> dict[str, bytes]:
    settings_env(INLINE_THRESHOLD=str(HIGH_THRESHOLD))
    sent = {}
    for _ in range(n):
        data = os.urandom(BIG)
        sent[enqueue(cp, data)] = data
    settings_env(INLINE_THRESHOLD=str(256 * 1024))
    return sent


def test_a_lowered_threshold_never_makes_a_multi_job_poll_pass_6_mb(cp, settings_env):
    # Given two inline jobs of 2.9 MB queued under INLINE_THRESHOLD=3,000,000, and the
    # threshold then lowered back to the default (a deploy: handlers built anew, same Redis)
    sent = big_jobs_then_threshold_lowered(cp, settings_env)
    # When a daemon polls with max_jobs=16 until it has them all
    got: dict[str, bytes] = {}
    sizes = []
    for _ in range(4):
        answer = poll_many(cp, 16)
        if answer.status == 204:
            break
        assert answer.status == 200, answer.raw_body[:300]
        sizes.append(answer.proxy_bytes)
        # Then every answer stays under Lambda's 6 MB
        assert answer.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, sizes
        for job in answer.json["jobs"]:
            assert job["attempt"] == 1
            got[job["job_id"]] = base64.b64decode(job["payloadInline"])
        # And what was not answered stayed queued, not leased
        stats = queue_stats(cp)
        assert (stats["queued"], stats["in_flight"]) == (2 - len(got), len(got)), stats
    # And both jobs arrived intact, one per answer, each on its first attempt
    assert got == sent
    assert len(sizes) == 2, sizes


def test_a_timed_out_delivery_that_does_not_fit_is_given_back_untouched(cp, settings_env):
    # Given two 2.9 MB jobs queued under the higher threshold, each delivered once (max_jobs=1)
    # and left to time out, and the threshold lowered since
    settings_env(INLINE_THRESHOLD=str(HIGH_THRESHOLD), VISIBILITY_TIMEOUT_S="1")
    sent = {}
    for _ in range(2):
        data = os.urandom(BIG)
        sent[enqueue(cp, data)] = data
    first = [poll_many(cp, 1).json["jobs"][0]["job_id"] for _ in range(2)]
    assert sorted(first) == sorted(sent)
    settings_env(INLINE_THRESHOLD=str(256 * 1024), VISIBILITY_TIMEOUT_S="1")
    time.sleep(1.3)
    # When a daemon polls with max_jobs=16
    answer = poll_many(cp, 16)
    # Then it answers one of them (its second attempt) under 6 MB
    assert answer.status == 200, answer.raw_body[:300]
    assert answer.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    jobs = answer.json["jobs"]
    assert [j["attempt"] for j in jobs] == [2]
    other = next(j for j in sent if j != jobs[0]["job_id"])
    # And the other was not taken: its attempts are not counted again
    assert status(cp, other)["attempts"] == 1
    # And the next poll takes it at once, on its second attempt, intact
    again = poll_many(cp, 16)
    assert again.status == 200 and again.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    assert [(j["job_id"], j["attempt"]) for j in again.json["jobs"]] == [(other, 2)]
    assert base64.b64decode(again.json["jobs"][0]["payloadInline"]) == sent[other]


def test_result_and_next_never_takes_more_than_its_answer_carries(cp, settings_env):
    # Given a running job, and behind it two 2.9 MB jobs queued under the higher threshold,
    # the threshold lowered since
    running = enqueue(cp, b"\x01")
    delivery = poll_many(cp, 1).json["jobs"][0]
    assert delivery["job_id"] == running
    cp.leases[running] = delivery["lease"]
    sent = big_jobs_then_threshold_lowered(cp, settings_env)
    # When its daemon posts the result asking for up to 16 next jobs
    r = post(cp, "result", running, {"resultInline": b64(b"\x05"), "next": nxt(cp, max_jobs=16)})
    # Then the post stands and the answer carries one next job, under 6 MB
    assert r.status == 200, r.raw_body[:300]
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    taken = [j["job_id"] for j in r.json["jobs"]]
    assert len(taken) == 1 and taken[0] in sent
    # And the other stayed queued, unleased
    stats = queue_stats(cp)
    assert (stats["queued"], stats["in_flight"]) == (1, 1), stats
