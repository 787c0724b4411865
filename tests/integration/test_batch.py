"""Many jobs per call: jobs:batch and jobs:status, from the handlers on real Redis and S3."""

from __future__ import annotations

import base64
import threading
import time

import msgpack

from tests.support.control_plane import upload
from tests.support.redis_stats import command_stats


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def batch(cp, jobs, queue=None, body=None):
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": queue or cp.queue},
        body=body if body is not None else {"jobs": jobs},
    )


def statuses(cp, job_ids, wait_s=None, role="client"):
    body = {"job_ids": job_ids}
    if wait_s is not None:
        body["wait_s"] = wait_s
    return cp.call(
        "jobs", "POST", "/v1/namespaces/{ns}/jobs:status", {"ns": cp.ns}, role=role, body=body
    )


def test_a_batch_mixes_inline_and_s3_jobs_and_answers_in_order(cp):
    # Given two inline payloads and one uploaded S3 payload
    ref = upload(cp, b"x" * 300_000)
    jobs = [
        {"payloadInline": b64(msgpack.packb(1))},
        {"payloadRef": ref},
        {"payloadInline": b64(msgpack.packb(2))},
    ]
    # When they are enqueued in one call
    r = batch(cp, jobs)
    # Then each got a job, in order, in its tier, and daemons receive them in that order
    assert r.status == 200, r.raw_body
    answers = r.json["jobs"]
    assert [a["tier"] for a in answers] == ["inline", "s3", "inline"]
    polled = [cp.poll().json["job_id"] for _ in range(3)]
    assert polled == [a["job_id"] for a in answers]


def test_one_bad_item_fails_only_itself(cp):
    # Given a batch with a good job, a job with both forms, an unissued key and bad base64
    foreign = {
        "kind": "s3",
        "bucket": "b",
        "key": "payloads/2026/01/01/01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args",
        "size": 10,
    }
    jobs = [
        {"payloadInline": b64(b"\x01")},
        {"payloadInline": b64(b"\x02"), "payloadRef": foreign},
        {"payloadRef": foreign},
        {"payloadInline": "not base64!"},
        {"payloadInline": b64(b"\x03")},
    ]
    r = batch(cp, jobs)
    # Then the good ones are queued and each bad one says why
    assert r.status == 200, r.raw_body
    answers = r.json["jobs"]
    assert "job_id" in answers[0] and "job_id" in answers[4]
    assert answers[1]["error"]["code"] == "invalid_request"
    assert answers[2]["error"]["code"] == "conflict"
    assert answers[3]["error"]["code"] == "invalid_request"
    assert "base64" in answers[3]["error"]["message"]
    # And only the two good jobs are in the queue
    assert cp.poll().status == 200 and cp.poll().status == 200 and cp.poll().status == 204


def test_item_idempotency_keys_make_a_retried_batch_return_the_same_jobs(cp):
    jobs = [
        {"payloadInline": b64(bytes([i])), "idempotency_key": f"k-{cp.ns}-{i}"} for i in range(3)
    ]
    first = batch(cp, jobs).json["jobs"]
    again = batch(cp, jobs).json["jobs"]
    assert [a["job_id"] for a in again] == [a["job_id"] for a in first]
    assert cp.poll().status == 200
    assert [cp.poll().status for _ in range(3)] == [200, 200, 204]


def test_a_malformed_or_oversized_batch_is_refused_whole(cp, settings_env):
    assert batch(cp, None, body={"jobs": []}).status == 422
    assert batch(cp, None, body={"jobs": "x"}).status == 422
    assert batch(cp, None, body={"items": [{}]}).status == 422
    assert batch(cp, [{"payloadInline": b64(b"1")}], queue="bad name!").status == 422
    settings_env(BATCH_MAX_JOBS="2", BATCH_MAX_BYTES="1000")
    three = [{"payloadInline": b64(b"1")}] * 3
    r = batch(cp, three)
    assert r.status == 422 and "BATCH_MAX_JOBS=2" in r.error["message"]
    big = [{"payloadInline": b64(b"x" * 600)}] * 2
    r = batch(cp, big)
    assert r.status == 413 and "BATCH_MAX_BYTES=1000" in r.error["message"]
    # And nothing was queued by any refused batch
    assert cp.poll().status == 204


def test_status_of_many_jobs_in_one_call_with_unknown_ones_named(cp):
    ids = [a["job_id"] for a in batch(cp, [{"payloadInline": b64(b"1")}] * 3).json["jobs"]]
    r = statuses(cp, ids + ["01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"])
    assert r.status == 200, r.raw_body
    answers = r.json["jobs"]
    assert [a["state"] for a in answers[:3]] == ["queued"] * 3
    assert answers[3] == {
        "job_id": "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C",
        "error": {"code": "not_found", "message": "job 01KB7Z6Q3N4V8W2X5Y9Z0A1B2C not found"},
    }


def test_status_waits_until_one_of_the_jobs_finishes(cp):
    # Given three queued jobs
    ids = [a["job_id"] for a in batch(cp, [{"payloadInline": b64(b"1")}] * 3).json["jobs"]]
    # When nothing finishes, the call waits wait_s and answers with the pending states
    started = time.monotonic()
    r = statuses(cp, ids, wait_s=1)
    assert 0.9 <= time.monotonic() - started < 3
    assert {a["state"] for a in r.json["jobs"]} == {"queued"}

    # When a daemon finishes the second job while the call waits
    def finish():
        time.sleep(0.5)
        got = cp.poll().json
        body = {"resultInline": b64(msgpack.packb("done"))}
        if got.get("lease"):
            body["lease"] = got["lease"]
        cp.post_result(got["job_id"], body)

    worker = threading.Thread(target=finish)
    worker.start()
    started = time.monotonic()
    r = statuses(cp, ids, wait_s=2)
    worker.join()
    # Then it answers as soon as that job is done, well before the wait ends
    assert time.monotonic() - started < 1.9
    states = [a["state"] for a in r.json["jobs"]]
    assert states[0] == "succeeded" and states[1:] == ["queued", "queued"]


def test_status_of_another_namespace_is_403_and_limits_hold(cp, other_cp, settings_env):
    ids = [a["job_id"] for a in batch(cp, [{"payloadInline": b64(b"1")}]).json["jobs"]]
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/jobs:status",
        {"ns": cp.ns},
        namespace=other_cp.ns,
        body={"job_ids": ids},
    )
    assert r.status == 403
    # Another namespace's job id reads as unknown, never as its state
    assert statuses(other_cp, ids).json["jobs"][0]["error"]["code"] == "not_found"
    assert statuses(cp, []).status == 422
    settings_env(BATCH_MAX_JOBS="2")
    assert statuses(cp, ids * 3).status == 422


def test_inline_items_over_the_threshold_or_with_a_bad_key_fail_alone(cp, settings_env):
    settings_env(INLINE_THRESHOLD="100")
    jobs = [
        {"payloadInline": b64(b"a" * 10)},
        {"payloadInline": b64(b"b" * 101)},
        {"payloadInline": b64(b"c"), "idempotency_key": "bad key!"},
        {"payloadInline": b64(b"d"), "idempotency_key": f"same-{cp.ns}"},
        {"payloadInline": b64(b"d"), "idempotency_key": f"same-{cp.ns}"},
    ]
    answers = batch(cp, jobs).json["jobs"]
    assert answers[1]["error"]["code"] == "payload_too_large"
    assert answers[2]["error"]["code"] == "invalid_request"
    # The same key twice in one batch is one job
    assert answers[3]["job_id"] == answers[4]["job_id"]
    assert [cp.poll().status for _ in range(3)] == [200, 200, 204]


def test_a_batch_repeats_keys_of_single_enqueues_from_the_previous_index_hour(cp, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given two jobs enqueued singly with keys ten minutes before an hour began (the inline
    # index has one hash per hour), one of them on another queue
    t0 = (time.time() // 3600) * 3600 - 600
    monkeypatch.setattr(clock, "now", lambda: t0)
    key_a, key_b, key_c = (f"{name}-{cp.ns}" for name in "abc")
    first = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": key_a}).json["job_id"]
    assert (
        cp.enqueue(raw=b"\x03", headers={"Idempotency-Key": key_c}, queue="elsewhere").status == 201
    )
    # When a batch twenty minutes later (the next hour) repeats both, next to a new key twice
    monkeypatch.setattr(clock, "now", lambda: t0 + 1200)
    jobs = [
        {"payloadInline": b64(b"\x01"), "idempotency_key": key_a},
        {"payloadInline": b64(b"\x02"), "idempotency_key": key_b},
        {"payloadInline": b64(b"\x02"), "idempotency_key": key_b},
        {"payloadInline": b64(b"\x03"), "idempotency_key": key_c},
        {"payloadInline": b64(b"\x04")},
    ]
    answers = batch(cp, jobs).json["jobs"]
    # Then the repeat is the earlier job, the new key is one new job, the other queue's key is
    # a conflict, and only the new jobs were queued after the first one, in request order
    assert answers[0]["job_id"] == first
    assert answers[1]["job_id"] == answers[2]["job_id"] != first
    assert answers[3]["error"]["code"] == "conflict"
    assert "elsewhere" in answers[3]["error"]["message"]
    polled = [cp.poll().json["job_id"] for _ in range(3)]
    assert polled == [first, answers[1]["job_id"], answers[4]["job_id"]]
    assert cp.poll().status == 204


def test_a_run_of_inline_items_is_one_redis_call(cp, redis_view):
    # Given a batch of 100 inline jobs with keys (after one batch that loads the script)
    r = redis_view
    jobs = [
        {"payloadInline": b64(bytes([i])), "idempotency_key": f"one-{cp.ns}-{i}"}
        for i in range(100)
    ]
    assert batch(cp, jobs[:1]).status == 200

    def script_calls() -> int:
        return sum(
            stats.get(f"cmdstat_{c}", {}).get("calls", 0)
            for stats in command_stats(r)
            for c in ("evalsha", "eval")
        )

    # When it is enqueued
    before = script_calls()
    answers = batch(cp, jobs).json["jobs"]
    # Then every job is answered, from one script call
    assert len({a["job_id"] for a in answers}) == 100
    assert script_calls() - before == 1
