"""The SDK's side of operating the queues, without a server: the list/retry/redrive/purge
requests, pages followed by cursor, NotRetryable's reason from the error body, purge called
again while jobs remain, and the CLI's jobs table."""

from __future__ import annotations

import httpx
import pytest

from payloadstore import Client, NotRetryable
from payloadstore._jobs_table import age, jobs_table
from payloadstore._wire import JobInfo, Wire
from tests.unit.test_sdk_wire import Recorder


def client_with(rec: Recorder) -> Client:
    transport = httpx.MockTransport(rec)
    return Client("http://cp.test", "pst_x", "team", http=httpx.Client(transport=transport))


def test_pages_are_followed_by_cursor_and_empty_pages_between_are_skipped():
    # Given three pages: jobs, nothing (skipped entries), jobs and the end
    rec = Recorder(
        httpx.Response(
            200, json={"jobs": [{"job_id": "A", "state": "failed"}], "next_cursor": "9-0"}
        ),
        httpx.Response(200, json={"jobs": [], "next_cursor": "5-0"}),
        httpx.Response(
            200, json={"jobs": [{"job_id": "B", "state": "failed"}], "next_cursor": None}
        ),
    )
    # When the queue's failed jobs are read
    pages = list(client_with(rec).queue("q").jobs(state="failed", limit=2))
    # Then two pages come back, in order, and each request carried state, limit and cursor
    assert [[j.job_id for j in page] for page in pages] == [["A"], ["B"]]
    assert pages[-1].next_cursor is None
    assert [dict(r.url.params) for r in rec.requests] == [
        {"state": "failed", "limit": "2"},
        {"state": "failed", "limit": "2", "cursor": "9-0"},
        {"state": "failed", "limit": "2", "cursor": "5-0"},
    ]
    assert rec.requests[0].url.path == "/v1/namespaces/team/queues/q/jobs"


def test_a_limit_over_100_is_refused_before_any_request():
    rec = Recorder(httpx.Response(200, json={"jobs": [], "next_cursor": None}))
    with pytest.raises(ValueError):
        list(client_with(rec).queue("q").jobs(limit=101))
    assert rec.requests == []


def test_a_refused_retry_says_why():
    body = {
        "error": {
            "code": "not_retryable",
            "message": "m",
            "reason": "succeeded",
            "state": "succeeded",
        }
    }
    rec = Recorder(httpx.Response(409, json=body))
    with pytest.raises(NotRetryable) as refused:
        client_with(rec).job("J1").retry()
    assert (refused.value.reason, refused.value.state, refused.value.status) == (
        "succeeded",
        "succeeded",
        409,
    )
    assert rec.requests[0].method == "POST"
    assert rec.requests[0].url.path == "/v1/namespaces/team/jobs/J1/retry"


def test_a_retry_answer_is_typed():
    rec = Recorder(
        httpx.Response(200, json={"job_id": "J1", "state": "queued", "attempt": 3, "retries": 2})
    )
    answer = client_with(rec).job("J1").retry()
    assert (answer.job_id, answer.state, answer.attempt, answer.retries) == ("J1", "queued", 3, 2)


def test_redrive_sends_only_what_was_given():
    rec = Recorder(httpx.Response(200, json={"retried": 2, "skipped": 1}))
    queue = client_with(rec).queue("q")
    assert queue.redrive().retried == 2
    assert queue.redrive(states=["cancelled"], limit=5).skipped == 1
    assert [r.content for r in rec.requests] == [b"{}", b'{"states":["cancelled"],"limit":5}']


def test_purge_is_called_again_while_jobs_remain_and_some_were_cancelled():
    rec = Recorder(
        httpx.Response(200, json={"cancelled": 100, "remaining": 20}),
        httpx.Response(200, json={"cancelled": 20, "remaining": 0}),
    )
    answer = client_with(rec).queue("q").purge()
    assert (answer.cancelled, answer.remaining) == (120, 0)
    assert len(rec.requests) == 2


def test_the_jobs_table_has_the_columns_an_operator_reads():
    jobs = [
        JobInfo.from_wire(
            {
                "job_id": "J1",
                "state": "failed",
                "attempts": 5,
                "tier": "inline",
                "created_at": 1000.0,
                "error": {"type": "DeliveryLimitExceeded", "message": "m"},
                "retries": 1,
            }
        ),
        JobInfo.from_wire({"job_id": "J2", "state": "queued", "attempts": 0, "tier": "s3"}),
    ]
    lines = jobs_table(jobs, now=1000.0 + 7_300).splitlines()
    assert lines[0].split() == ["JOB", "ID", "STATE", "ATTEMPTS", "TIER", "AGE", "ERROR"]
    assert lines[1].split() == [
        "J1",
        "failed",
        "5",
        "(1",
        "retried)",
        "inline",
        "2h",
        "DeliveryLimitExceeded",
    ]
    assert lines[2].split() == ["J2", "queued", "0", "s3", "-", "-"]
    assert [age(s) for s in (5, 125, 7_300, 200_000, None)] == ["5s", "2m", "2h", "2d", "-"]


def test_the_async_wire_has_the_same_operate_routes():
    from payloadstore._async_wire import AsyncWire

    for name in ("list_jobs", "retry_job", "redrive", "purge"):
        assert callable(getattr(Wire, name)) and callable(getattr(AsyncWire, name))
