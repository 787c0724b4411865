"""Every answer stays under Lambda's 6 MB whatever the request holds (issue 43): what an answer
echoes from its request is bounded where it is read, so a request with oversized values gets a
clear 422, never a 502 from an answer Lambda refuses; and what a request adds beside stored
data (ids listed back, refused items beside results) is charged to the answer's budget. Real
handlers, real Redis."""

from __future__ import annotations

from payloadstore_controlplane.models.limits import LAMBDA_RESPONSE_LIMIT
from tests.integration.test_batch import statuses


def test_jobs_status_with_oversized_job_ids_is_refused_not_answered_past_6_mb(cp):
    # Given a request for 100 (BATCH_MAX_JOBS) job ids of 40,000 characters each: a 4 MB body,
    # inside what Lambda takes; answered as unknown ids, each echoed twice (its id and its
    # message), plus the `unanswered` ids, the answer would weigh ~6.6 MB
    ids = [f"{i:03d}".ljust(40_000, "X") for i in range(100)]
    # When a client asks for their statuses
    r = statuses(cp, ids)
    # Then the answer is a clear 422 naming the ids, under Lambda's 6 MB
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, (r.status, r.proxy_bytes)
    assert r.status == 422, r.raw_body[:300]
    assert r.error["code"] == "invalid_request"
    assert "job_ids" in r.raw_body


def test_jobs_status_with_one_oversized_job_id_is_refused_not_answered_past_6_mb(cp):
    # Given one job id of 3.5 million characters (the first status is always answered)
    ids = ["X" * 3_500_000]
    # When a client asks for its status
    r = statuses(cp, ids)
    # Then the answer is a 422 under Lambda's 6 MB, not the id echoed twice (7 MB)
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, (r.status, r.proxy_bytes)
    assert r.status == 422, r.raw_body[:300]


def test_jobs_status_of_unknown_ids_of_ordinary_length_still_answers_each(cp):
    # Given an id of a job that does not exist, of an ordinary length
    r = statuses(cp, ["0" * 26, "Y" * 64])
    # Then each is answered on its own, as before
    assert r.status == 200, r.raw_body[:300]
    assert [j["error"]["code"] for j in r.json["jobs"]] == ["not_found", "not_found"]


def test_a_body_with_many_unknown_fields_is_refused_under_6_mb(cp):
    # Given a 1.3 MB jobs:status body with 100,000 fields the route does not take, each a
    # validation error of its own
    body = {"job_ids": ["0" * 26], **{f"k{i}": 0 for i in range(100_000)}}
    # When it is sent
    r = cp.call("jobs", "POST", "/v1/namespaces/{ns}/jobs:status", {"ns": cp.ns}, body=body)
    # Then the answer is a 422 that says what is wrong, under Lambda's 6 MB
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, (r.status, r.proxy_bytes)
    assert r.status == 422, r.raw_body[:300]
    assert r.error["code"] == "invalid_request"
    assert "k0" in r.error["message"]


def test_a_body_with_an_oversized_unknown_field_name_is_refused_under_6_mb(cp):
    # Given a body whose one unknown field has a 3.5 million character name
    body = {"job_ids": ["0" * 26], "k" * 3_500_000: 0}
    # When it is sent
    r = cp.call("jobs", "POST", "/v1/namespaces/{ns}/jobs:status", {"ns": cp.ns}, body=body)
    # Then the answer is a 422 under Lambda's 6 MB, the name not echoed whole
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, (r.status, r.proxy_bytes)
    assert r.status == 422, r.raw_body[:300]


def test_a_batch_with_an_oversized_unknown_field_name_is_refused_under_6_mb(cp):
    # Given a batch body beside whose `jobs` is one unknown field named with 1.2 million
    # backslashes (2.4 MB of body; a name quoted back with repr() doubles each, and JSON twice
    # more: ~9.6 MB)
    body = {"jobs": [{"payloadInline": "AQ=="}], "\\" * 1_200_000: 0}
    # When it is sent
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body=body,
    )
    # Then the answer is a 422 naming an unknown field, under Lambda's 6 MB
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, (r.status, r.proxy_bytes)
    assert r.status == 422, r.raw_body[:300]
    assert r.error["message"].startswith("unknown fields")


def test_jobs_status_of_del_heavy_errors_beside_1000_ids_answers_under_6_mb(cp, settings_env):
    import base64

    # Given BATCH_MAX_JOBS at its largest (1000), 11 jobs failed with the largest error text all
    # of DEL (0x7f: 7 bytes each in the proxy answer), and 989 ids of 64 emoji each (~900 B
    # each in `unanswered`)
    settings_env(BATCH_MAX_JOBS="1000")
    items = [{"payloadInline": base64.b64encode(bytes([i])).decode()} for i in range(11)]
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={"jobs": items},
    )
    assert r.status == 200, r.raw_body[:300]
    failed = []
    for _ in range(11):
        job_id = cp.poll().json["job_id"]
        error = {"type": "E", "message": "\x7f" * 16_384, "traceback": "\x7f" * 65_536}
        assert cp.post_result(job_id, {"error": error}).status == 204
        failed.append(job_id)
    ids = failed + [f"{i:03d}" + "😀" * 61 for i in range(989)]
    # When a client asks for all their statuses
    r = statuses(cp, ids)
    # Then the answer is under Lambda's 6 MB, a prefix of the ids answered, the rest unanswered
    assert r.status == 200, r.raw_body[:300]
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, r.proxy_bytes
    answered = [j["job_id"] for j in r.json["jobs"]]
    assert answered and answered == ids[: len(answered)]
    assert r.json["unanswered"] == ids[len(answered) :]


def test_a_batch_wait_with_refused_items_beside_the_largest_result_answers_under_6_mb(
    cp, settings_env
):
    import base64
    import os

    from payloadstore_controlplane.models.limits import largest_inline_threshold
    from tests.integration.test_enqueue_wait import batch_wait, daemon

    # Given the largest INLINE_THRESHOLD, a daemon answering a result of that size (~5.2 MB in
    # the answer), and a batch of that job beside 20 items refused for an unknown field with a
    # 100,000-character name each (2 MB of body)
    size = largest_inline_threshold()
    settings_env(INLINE_THRESHOLD=str(size))
    result = os.urandom(size)
    worker = daemon(cp, 1, lambda mine, job: {"resultInline": base64.b64encode(result).decode()})
    refused = [{"payloadInline": "AQ==", f"{i:02d}".ljust(100_000, "x"): 0} for i in range(20)]
    # When the batch is enqueued with ?wait
    r = batch_wait(cp, 10, [{"payloadInline": "AQ=="}, *refused])
    worker.join(10)
    # Then the answer is under Lambda's 6 MB: the job answers its id, each refused item why
    assert r.status == 200, r.raw_body[:300]
    assert r.proxy_bytes <= LAMBDA_RESPONSE_LIMIT, r.proxy_bytes
    jobs = r.json["jobs"]
    assert jobs[0]["job_id"] and len(jobs) == 21
    assert all(j["error"]["code"] == "invalid_request" for j in jobs[1:])
