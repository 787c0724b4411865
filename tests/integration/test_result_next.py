"""Result-and-next (issue 34): a result post or failure report with `next` answers the daemon's
next deliveries, each with its own lease, exactly as a poll with max_jobs would; a post that
fails leases nothing."""

from __future__ import annotations

import base64
import time

import msgpack

from tests.support.control_plane import upload
from tests.support.events import FakeLambdaContext


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def post(cp, route: str, job_id: str, body: dict, **kw):
    return cp.call(
        "daemon",
        "POST",
        f"/v1/namespaces/{{ns}}/jobs/{{job_id}}/{route}",
        {"ns": cp.ns, "job_id": job_id},
        role="daemon",
        body=cp._with_lease(job_id, body),
        **kw,
    )


def running_job(cp, payload=b"\x01") -> str:
    job = cp.enqueue(raw=payload).json["job_id"]
    got = cp.poll()
    assert got.status == 200 and got.json["job_id"] == job
    return job


def nxt(cp, **kw) -> dict:
    return {"queues": [cp.queue], "daemon_id": "d1", **kw}


def test_inline_result_with_next_answers_the_next_job_with_its_own_lease(cp):
    # Given a running job and two more queued
    first = running_job(cp)
    queued = [cp.enqueue(raw=msgpack.packb([i])).json["job_id"] for i in range(2)]
    # When its daemon posts the result asking for up to 2 next jobs
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": nxt(cp, max_jobs=2)})
    # Then the result is stored and both jobs come back as a poll with max_jobs gives them
    assert r.status == 200, r.raw_body
    jobs = r.json["jobs"]
    assert [j["job_id"] for j in jobs] == queued
    assert len({j["lease"] for j in jobs}) == 2
    for j in jobs:
        assert j["attempt"] == 1 and j["queue"] == cp.queue and j["payloadInline"]
        assert j["lease_expires_in_s"] > 0
        assert cp.status(j["job_id"]).json["state"] == "running"
    assert cp.result(first).json["resultInline"] == b64(b"\x05")
    # And each delivered job's lease finishes it
    for j in jobs:
        done = post(cp, "result", j["job_id"], {"lease": j["lease"], "resultInline": b64(b"\x06")})
        assert done.status == 204
    assert cp.poll().status == 204


def test_next_that_finds_nothing_answers_no_jobs_and_without_next_204_stays(cp):
    first = running_job(cp)
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": nxt(cp)})
    assert r.status == 200 and r.json == {"jobs": []}
    second = running_job(cp)
    r = post(cp, "result", second, {"resultInline": b64(b"\x05")})
    assert r.status == 204 and r.raw_body == ""


def test_next_waits_up_to_wait_s_when_nothing_is_queued(cp):
    first = running_job(cp)
    started = time.monotonic()
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": nxt(cp, wait_s=1)})
    assert r.status == 200 and r.json == {"jobs": []}
    assert 0.9 <= time.monotonic() - started < 3


def test_next_wait_is_capped_by_the_invocations_remaining_time(cp):
    first = running_job(cp)
    started = time.monotonic()
    r = post(
        cp,
        "result",
        first,
        {"resultInline": b64(b"\x05"), "next": nxt(cp, wait_s=30)},
        context=FakeLambdaContext(remaining_ms=2_000),
    )
    assert r.status == 200 and r.json == {"jobs": []}
    assert time.monotonic() - started < 1.5


def test_a_post_that_fails_leases_no_jobs(cp):
    # Given a running job, and another one queued
    first = running_job(cp)
    waiting = cp.enqueue(raw=b"\x02").json["job_id"]
    # When a post with the wrong lease asks for the next job
    r = post(
        cp,
        "result",
        first,
        {"lease": "not-the-lease", "resultInline": b64(b"\x05"), "next": nxt(cp)},
    )
    # Then it is refused and the queued job was not taken: still queued, the next poll gets it
    assert r.status == 409 and r.error["code"] == "lease_mismatch"
    assert cp.status(waiting).json["state"] == "queued"
    # A result over INLINE_THRESHOLD (413) and a post for another namespace's job (404) too
    too_big = {"resultInline": b64(b"\0" * (256 * 1024 + 1)), "next": nxt(cp)}
    assert post(cp, "result", first, too_big).status == 413
    assert cp.status(waiting).json["state"] == "queued"
    got = cp.poll()
    assert got.status == 200 and got.json["job_id"] == waiting


def test_a_repeated_post_answers_the_next_jobs_again(cp):
    # The answer to a post with next may be lost: the daemon's retry is the same post, which
    # stands (idempotent) and takes the next jobs again.
    first = running_job(cp)
    body = {"resultInline": b64(b"\x05"), "next": nxt(cp)}
    assert post(cp, "result", first, body).json == {"jobs": []}
    queued = cp.enqueue(raw=b"\x02").json["job_id"]
    again = post(cp, "result", first, body)
    assert again.status == 200 and [j["job_id"] for j in again.json["jobs"]] == [queued]


def test_s3_result_and_error_posts_take_next(cp):
    first = running_job(cp)
    queued = [cp.enqueue(raw=msgpack.packb([i])).json["job_id"] for i in range(2)]
    ref = upload(cp, b"r" * 300_000, role="daemon", job_id=first)
    r = post(cp, "result", first, {"resultRef": ref, "next": nxt(cp)})
    assert r.status == 200 and [j["job_id"] for j in r.json["jobs"]] == queued[:1]
    second = r.json["jobs"][0]
    error = {"type": "ValueError", "message": "bad"}
    r = post(
        cp, "result", second["job_id"], {"lease": second["lease"], "error": error, "next": nxt(cp)}
    )
    assert r.status == 200 and [j["job_id"] for j in r.json["jobs"]] == queued[1:]
    assert cp.status(second["job_id"]).json["state"] == "failed"


def test_s3_tier_next_job_carries_its_download(cp):
    first = running_job(cp)
    ref = upload(cp, b"a" * 300_000)
    queued = cp.enqueue(ref=ref).json["job_id"]
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": nxt(cp)})
    (job,) = r.json["jobs"]
    assert job["job_id"] == queued and job["payloadRef"]["key"] == ref["key"]
    assert job["download"]["url"]


def test_failure_report_with_next(cp):
    first = running_job(cp)
    queued = cp.enqueue(raw=b"\x02").json["job_id"]
    report = {"state": "payload_corrupt", "detail": "sha256 mismatch", "next": nxt(cp)}
    r = post(cp, "failure", first, report)
    assert r.status == 200 and [j["job_id"] for j in r.json["jobs"]] == [queued]
    assert cp.status(first).json["state"] == "payload_corrupt"
    # Refused (wrong lease): nothing taken
    other = cp.enqueue(raw=b"\x03").json["job_id"]
    bad = {"lease": "nope", "state": "payload_lost", "detail": "404", "next": nxt(cp)}
    assert post(cp, "failure", queued, bad).status == 409
    assert cp.status(other).json["state"] == "queued"


def test_next_without_daemon_id_and_bad_next_bodies(cp):
    first = running_job(cp)
    queued = cp.enqueue(raw=b"\x02").json["job_id"]
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": {"queues": [cp.queue]}})
    assert r.status == 200 and [j["job_id"] for j in r.json["jobs"]] == [queued]
    # Refused before anything is written: the job is still running, nothing else taken
    for bad in ({"queues": []}, {"queues": [cp.queue], "max_jobs": 17}, {"max_jobs": 1}):
        r = post(cp, "result", queued, {"resultInline": b64(b"\x05"), "next": bad})
        assert r.status == 422, (bad, r.raw_body)
    assert cp.status(queued).json["state"] == "running"


def test_next_takes_only_the_jobs_its_answer_can_carry(cp, settings_env):
    # Given INLINE_THRESHOLD raised to 400 KiB, a running job and 16 queued jobs of ~390 KiB
    import os

    from payloadstore_controlplane.models.limits import LAMBDA_RESPONSE_LIMIT

    settings_env(INLINE_THRESHOLD=str(400 * 1024))
    first = running_job(cp)
    for _ in range(16):
        assert cp.enqueue(raw=os.urandom(390 * 1024)).status == 201
    # When the result post asks for 16 next jobs
    r = post(cp, "result", first, {"resultInline": b64(b"\x05"), "next": nxt(cp, max_jobs=16)})
    # Then its answer stays under Lambda's 6 MB, and the jobs it could not carry stay queued,
    # never leased
    assert r.status == 200 and r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    taken = len(r.json["jobs"])
    assert 1 <= taken < 16
    stats = cp.call(
        "jobs", "GET", "/v1/namespaces/{ns}/queues/{queue}", {"ns": cp.ns, "queue": cp.queue}
    ).json
    assert (stats["queued"], stats["in_flight"]) == (16 - taken, taken), stats
