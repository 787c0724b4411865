"""Enqueue-and-wait (issue 34): `POST .../queues/{queue}/jobs?wait=S` (and jobs:batch) answers
201 with the result when the job ends within S, as `GET .../result` gives it, else the job id as
without the wait."""

from __future__ import annotations

import base64
import threading
import time

import msgpack

from tests.support.control_plane import ControlPlane, upload
from tests.support.events import FakeLambdaContext

JOBS = "/v1/namespaces/{ns}/queues/{queue}/jobs"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def enqueue_wait(cp: ControlPlane, wait: float, *, raw: bytes | None = None, body=None, **kw):
    params = {"ns": cp.ns, "queue": cp.queue}
    query = {"wait": str(wait)}
    if raw is not None:
        headers = {"Content-Type": "application/msgpack", **kw.pop("headers", {})}
        return cp.call("jobs", "POST", JOBS, params, body=raw, query=query, headers=headers, **kw)
    return cp.call("jobs", "POST", JOBS, params, body=body, query=query, **kw)


def batch_wait(cp: ControlPlane, wait: float, items: list[dict]):
    return cp.call(
        "jobs",
        "POST",
        JOBS + ":batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={"jobs": items},
        query={"wait": str(wait)},
    )


def daemon(cp: ControlPlane, jobs: int, answer) -> threading.Thread:
    """A daemon on its own thread: polls `jobs` jobs and posts answer(job) for each."""
    # Its own view of the namespace (leases), calling the daemon function's handlers.
    mine = ControlPlane(cp.ns)
    mine.queue = cp.queue

    def run() -> None:
        for _ in range(jobs):
            got = mine.poll(wait_s=2)
            if got.status != 200:
                return
            mine.post_result(got.json["job_id"], answer(mine, got.json))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def echo(cp, job) -> dict:
    return {"resultInline": job["payloadInline"]}


def test_a_fast_inline_job_answers_its_result_in_the_enqueue(cp):
    # Given a daemon that answers at once
    worker = daemon(cp, 1, echo)
    # When a client enqueues and waits up to 5 s
    r = enqueue_wait(cp, 5, raw=msgpack.packb([1, 2]))
    worker.join(5)
    # Then the answer is 201 with the job and its result, as GET .../result gives it
    assert r.status == 201, r.raw_body
    body = r.json
    assert body["tier"] == "inline" and body["state"] == "succeeded"
    assert base64.b64decode(body["resultInline"]) == msgpack.packb([1, 2])
    result = cp.result(body["job_id"]).json
    assert {k: body[k] for k in result} == result


def test_a_slow_job_answers_its_id_after_the_wait(cp):
    started = time.monotonic()
    r = enqueue_wait(cp, 0.5, raw=b"\x01")
    waited = time.monotonic() - started
    assert r.status == 201 and set(r.json) == {"job_id", "tier"}
    assert 0.4 <= waited < 2
    assert cp.status(r.json["job_id"]).json["state"] == "queued"


def test_without_wait_the_answer_is_unchanged(cp):
    r = cp.enqueue(raw=b"\x01")
    assert r.status == 201 and set(r.json) == {"job_id", "tier"}


def test_the_wait_is_capped_by_the_invocations_remaining_time(cp):
    started = time.monotonic()
    r = enqueue_wait(cp, 30, raw=b"\x01", context=FakeLambdaContext(remaining_ms=2_000))
    assert r.status == 201 and "state" not in r.json
    assert time.monotonic() - started < 1.5


def test_a_failed_job_answers_its_error(cp):
    worker = daemon(cp, 1, lambda cp, job: {"error": {"type": "ValueError", "message": "no"}})
    r = enqueue_wait(cp, 5, body={"payloadInline": b64(b"\x01")})
    worker.join(5)
    assert r.status == 201
    assert r.json["state"] == "failed" and r.json["error"]["type"] == "ValueError"


def test_s3_tier_job_and_s3_result(cp):
    def s3_result(mine, job) -> dict:
        return {"resultRef": upload(mine, b"r" * 300_000, role="daemon", job_id=job["job_id"])}

    ref = upload(cp, b"a" * 300_000)
    worker = daemon(cp, 1, s3_result)
    r = enqueue_wait(cp, 5, body={"payloadRef": ref})
    worker.join(5)
    assert r.status == 201, r.raw_body
    assert r.json["tier"] == "s3" and r.json["state"] == "succeeded"
    assert r.json["resultRef"]["size"] == 300_000 and r.json["download"]["url"]


def test_a_repeat_with_the_same_key_answers_the_finished_jobs_result(cp):
    worker = daemon(cp, 1, echo)
    key = {"Idempotency-Key": "same-call-1"}
    first = enqueue_wait(cp, 5, raw=b"\x07", headers=key)
    worker.join(5)
    again = enqueue_wait(cp, 5, raw=b"\x07", headers=key)
    assert first.status == 201 and again.status == 200
    assert again.json["job_id"] == first.json["job_id"]
    assert again.json["state"] == "succeeded" and again.json["resultInline"] == b64(b"\x07")


def test_bad_wait_is_422_and_enqueues_nothing(cp):
    for bad in ("-1", "61", "soon"):
        r = cp.call(
            "jobs",
            "POST",
            JOBS,
            {"ns": cp.ns, "queue": cp.queue},
            body=b"\x01",
            headers={"Content-Type": "application/msgpack"},
            query={"wait": bad},
        )
        assert r.status == 422, (bad, r.raw_body)
    assert cp.poll().status == 204


def test_batch_with_wait_answers_each_finished_jobs_result(cp):
    # Given a daemon that answers 3 jobs
    worker = daemon(cp, 3, echo)
    items = [{"payloadInline": b64(msgpack.packb(i))} for i in range(3)]
    # When they are enqueued in one batch that waits up to 5 s
    r = batch_wait(cp, 5, items)
    worker.join(5)
    # Then each answer carries its job's result
    assert r.status == 200, r.raw_body
    jobs = r.json["jobs"]
    assert [j["state"] for j in jobs] == ["succeeded"] * 3
    assert [msgpack.unpackb(base64.b64decode(j["resultInline"])) for j in jobs] == [0, 1, 2]


def test_batch_with_wait_answers_ids_for_jobs_not_done_and_errors_as_before(cp):
    worker = daemon(cp, 1, echo)
    items = [{"payloadInline": b64(b"\x01")}, {"payloadInline": "not base64!"}]
    items.append({"payloadInline": b64(b"\x02")})
    started = time.monotonic()
    r = batch_wait(cp, 1, items)
    worker.join(5)
    assert r.status == 200 and time.monotonic() - started < 3
    first, refused, last = r.json["jobs"]
    assert first["state"] == "succeeded"
    assert refused["error"]["code"] == "invalid_request"
    assert set(last) == {"job_id", "tier"}


def test_batch_with_wait_keeps_its_answer_under_lambdas_limit(cp):
    # Given 30 jobs whose results are 256 KiB each (7.5 MiB in all, ~10 MB as base64)
    big = b"r" * (256 * 1024)
    worker = daemon(cp, 30, lambda cp, job: {"resultInline": b64(big)})
    # When they are enqueued in one batch that waits for them
    r = batch_wait(cp, 10, [{"payloadInline": b64(msgpack.packb(i))} for i in range(30)])
    worker.join(10)
    # Then the answer stays under Lambda's 6 MB: the results that fit ride along, the others
    # answer their job id, and every result is still there to read
    assert r.status == 200
    assert len(r.raw_body) < 6 * 1024 * 1024 - 1024 * 1024
    jobs = r.json["jobs"]
    carried = [j for j in jobs if "resultInline" in j]
    assert 10 <= len(carried) < 30
    assert all(set(j) == {"job_id", "tier"} for j in jobs if "resultInline" not in j)
    for j in jobs:
        assert cp.result(j["job_id"]).json["resultInline"] == b64(big)


def test_requests_served_while_an_enqueue_waits_each_see_only_their_own_event(cp):
    # The local gateway runs invocations on threads of one process: an enqueue that waits, and
    # the requests served meanwhile, must not take (or lend) another request's event, route
    # arguments or parsed body (JSON polls and msgpack enqueues at the same time).
    answers: dict[str, object] = {}
    polled: list = []

    def waiting() -> None:
        answers["wait"] = enqueue_wait(cp, 1.5, body={"payloadInline": b64(b"\x09")})

    def polling(until: float) -> None:
        other = ControlPlane(cp.ns)  # another queue: the enqueues below stay queued
        while time.monotonic() < until:
            polled.append(other.poll())

    until = time.monotonic() + 1.2
    threads = [threading.Thread(target=waiting), threading.Thread(target=polling, args=(until,))]
    for t in threads:
        t.start()
    enqueued = []
    while time.monotonic() < until:
        enqueued.append(cp.enqueue(raw=msgpack.packb(len(enqueued))))
    for t in threads:
        t.join(5)
    waited = answers["wait"]
    assert waited.status == 201 and set(waited.json) == {"job_id", "tier"}, waited.raw_body
    assert all(r.status == 201 for r in enqueued), [
        r.raw_body for r in enqueued if r.status != 201
    ][:2]
    assert all(r.status == 204 for r in polled), [r.raw_body for r in polled if r.status != 204][:2]
    assert len({r.json["job_id"] for r in enqueued} | {waited.json["job_id"]}) == len(enqueued) + 1
