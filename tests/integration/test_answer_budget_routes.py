"""Every answer whose size depends on stored data stays under Lambda's 6 MB (issue 43), at the
largest settings: failed jobs whose error text is the largest a result post takes (a 16 KiB
message and a 64 KiB traceback), in the characters that weigh most once escaped (outside the
BMP: 14 bytes each in the proxy answer). What does not fit one answer is left for the next
(`unanswered`, `next_cursor`), and nothing is lost. Real handlers, real Redis."""

from __future__ import annotations

import base64
import uuid

import pytest

from payloadstore_controlplane.models.limits import LAMBDA_RESPONSE_LIMIT, largest_inline_threshold
from tests.integration.test_batch import statuses
from tests.integration.test_operate import list_jobs
from tests.support.control_plane import ControlPlane

JOBS = 100
# A result post's largest error text: message 16,384 and traceback 65,536 characters.
MESSAGE = "😀" * 16_384
TRACEBACK = "🚀" * 65_536


def failed_jobs(cp: ControlPlane, n: int) -> dict[str, dict]:
    """n jobs that failed with the largest error text, each message told apart by its job."""
    items = [{"payloadInline": base64.b64encode(bytes([i % 256])).decode()} for i in range(n)]
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={"jobs": items},
    )
    assert r.status == 200, r.raw_body[:300]
    errors = {}
    for _ in range(n):
        got = cp.poll()
        assert got.status == 200
        job_id = got.json["job_id"]
        error = {"type": "ValueError", "message": job_id + MESSAGE[26:], "traceback": TRACEBACK}
        posted = cp.post_result(job_id, {"error": error})
        assert posted.status == 204, posted.raw_body[:300]
        errors[job_id] = error
    return errors


@pytest.fixture(scope="module")
def failed(cp_env):
    cp = ControlPlane("b" + uuid.uuid4().hex[:10])
    return cp, failed_jobs(cp, JOBS)


def test_jobs_status_of_100_jobs_with_the_largest_errors_answers_in_parts_under_6_mb(failed):
    cp, errors = failed
    # Given 100 failed jobs with the largest error text (~1.1 MB each once escaped)
    asked = list(errors)
    seen: dict[str, dict] = {}
    answers = []
    # When a client asks for their statuses, and again for the ids an answer leaves out
    while asked:
        r = statuses(cp, asked)
        # Then every answer is under Lambda's 6 MB and answers at least one job
        assert r.status == 200, r.raw_body[:300]
        assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
        answers.append(r.proxy_bytes)
        jobs = r.json["jobs"]
        assert jobs and [j["job_id"] for j in jobs] == asked[: len(jobs)]
        for j in jobs:
            seen[j["job_id"]] = j["error"]
        assert r.json.get("unanswered", []) == asked[len(jobs) :]
        asked = r.json.get("unanswered", [])
    # And every job came once, its error whole
    assert seen == errors
    assert len(answers) > 1
    print(f"jobs:status of {JOBS} jobs in {len(answers)} answers: {answers}")


def test_the_failed_jobs_listing_pages_under_6_mb_and_lists_each_job_once(failed):
    cp, errors = failed
    # Given the same 100 failed jobs; the listing leaves tracebacks out (16 KiB messages)
    listed: list[str] = []
    cursor = None
    sizes = []
    # When a client lists them 100 a page, following next_cursor
    for _ in range(JOBS):
        r = list_jobs(cp, state="failed", limit=100, cursor=cursor)
        # Then every page is under Lambda's 6 MB
        assert r.status == 200, r.raw_body[:300]
        assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
        sizes.append(r.proxy_bytes)
        for j in r.json["jobs"]:
            listed.append(j["job_id"])
            assert j["error"]["message"] == errors[j["job_id"]]["message"]
        cursor = r.json["next_cursor"]
        if not cursor:
            break
    # And every job is listed exactly once, newest first
    assert sorted(listed) == sorted(errors) and len(listed) == JOBS
    assert len(sizes) > 1
    print(f"failed listing of {JOBS} jobs in {len(sizes)} pages: {sizes}")


def test_one_job_with_the_largest_error_answers_status_and_result_under_6_mb(failed):
    cp, errors = failed
    job_id, error = next(iter(errors.items()))
    for r in (cp.status(job_id), cp.result(job_id)):
        assert r.status == 200, r.raw_body[:300]
        assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
        assert r.json["error"]["traceback"] == error["traceback"]


def test_a_jobs_payloads_with_both_inline_at_the_largest_threshold_answer_under_6_mb(
    cp, settings_env, monkeypatch
):
    import os

    from payloadstore_controlplane.logic import daemon as daemon_logic
    from tests.integration.test_operator_views import payloads
    from tests.integration.test_poll_budget import enqueue

    # Given the largest INLINE_THRESHOLD, and a job with arguments and result inline at it,
    # whose post stopped between storing the result and dropping the queue entry (the function
    # killed in between): both are stored
    size = largest_inline_threshold()
    settings_env(INLINE_THRESHOLD=str(size))
    args, result = os.urandom(size), os.urandom(size)
    job_id = enqueue(cp, args)
    assert cp.poll().status == 200

    def killed(*a, **kw):
        raise RuntimeError("function stopped")

    monkeypatch.setattr(daemon_logic, "_settle", killed)
    assert cp.post_result(job_id, {"resultInline": base64.b64encode(result).decode()}).status == 500
    monkeypatch.undo()
    # When an operator reads what the job carried
    r = payloads(cp, job_id)
    # Then the answer is under 6 MB: the result whole, the arguments left out, saying why
    assert r.status == 200, r.raw_body[:300]
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    assert base64.b64decode(r.json["result"]["inline"]) == result
    assert r.json["args"]["gone"] == "answer_limit" and "inline" not in r.json["args"]


def test_the_queue_listing_of_a_namespace_with_45000_queues_pages_under_6_mb(cp, redis_view):
    from payloadstore_controlplane.store import keys

    # Given a namespace that used 45,000 queues of 63-character names (~6.3 MB listed at once)
    names = [f"{i:05d}".ljust(63, "q") for i in range(45_000)]
    for start in range(0, len(names), 5_000):
        redis_view.sadd(keys.queue_names(cp.ns), *names[start : start + 5_000])
    # When a client lists them, page after page
    listed: list[str] = []
    sizes = []
    after = None
    while True:
        r = cp.call(
            "jobs",
            "GET",
            "/v1/namespaces/{ns}/queues",
            {"ns": cp.ns},
            query={"after": after} if after else None,
        )
        # Then every page is under Lambda's 6 MB
        assert r.status == 200, r.raw_body[:300]
        assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
        sizes.append(r.proxy_bytes)
        listed += [q["name"] for q in r.json["queues"]]
        after = r.json.get("next_after")
        if not after:
            break
    # And every queue is listed once, in name order
    assert listed == names
    print(f"queue listing of {len(names)} queues in {len(sizes)} pages: {sizes}")


def test_an_inline_result_at_the_largest_threshold_answers_under_6_mb_on_every_route(
    cp, settings_env
):
    import os

    from tests.integration.test_enqueue_wait import daemon, enqueue_wait

    # Given the largest INLINE_THRESHOLD and a daemon answering a result of that size
    size = largest_inline_threshold()
    settings_env(INLINE_THRESHOLD=str(size))
    result = os.urandom(size)
    worker = daemon(cp, 1, lambda mine, job: {"resultInline": base64.b64encode(result).decode()})
    # When a client enqueues with ?wait, then reads the result and the status
    waited = enqueue_wait(cp, 10, raw=b"\x01")
    worker.join(10)
    job_id = waited.json["job_id"]
    answers = [waited, cp.result(job_id), cp.status(job_id)]
    # Then each answer is under Lambda's 6 MB, the result whole where it is carried
    for r in answers:
        assert r.status in (200, 201), r.raw_body[:300]
        assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT
    assert base64.b64decode(waited.json["resultInline"]) == result
    assert base64.b64decode(answers[1].json["resultInline"]) == result
