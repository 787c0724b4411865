"""Fewer hops: poll and result answers carry a presigned GET beside an S3 reference."""

from __future__ import annotations

import time
from datetime import datetime

import msgpack
import requests

from tests.support.control_plane import upload


def fetch(download: dict) -> bytes:
    r = requests.get(download["url"], timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def seconds_left(expires_at: str) -> float:
    return datetime.fromisoformat(expires_at).timestamp() - time.time()


def test_poll_of_an_s3_tier_job_carries_a_working_download_url(cp):
    # Given an S3-tier job
    data = msgpack.packb({"args": [b"x" * 300_000], "kwargs": {}})
    ref = upload(cp, data)
    job_id = cp.enqueue(ref=ref).json["job_id"]
    # When a daemon polls it
    got = cp.poll()
    # Then the answer keeps the clean reference and adds a GET URL for exactly those bytes,
    # valid for PRESIGN_TTL_S
    assert got.status == 200 and got.json["job_id"] == job_id
    assert got.json["payloadRef"]["key"] == ref["key"]
    assert set(got.json["download"]) == {"url", "expires_at"}
    assert fetch(got.json["download"]) == data
    assert 800 < seconds_left(got.json["download"]["expires_at"]) <= 901


def test_poll_of_an_inline_job_carries_no_download(cp):
    cp.enqueue(raw=msgpack.packb([1]))
    got = cp.poll()
    assert got.status == 200 and got.json.get("download") is None


def test_result_answer_of_an_s3_result_carries_a_working_download_url(cp):
    # Given a job whose daemon stored its result in S3
    job_id = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    assert cp.poll().status == 200
    result = msgpack.packb(b"r" * 300_000)
    ref = upload(cp, result, role="daemon", job_id=job_id)
    assert cp.post_result(job_id, {"resultRef": ref}).status == 204
    # When the client reads the result
    got = cp.result(job_id)
    # Then the answer carries the reference and a GET URL for exactly those bytes
    assert got.status == 200 and got.json["resultRef"]["key"] == ref["key"]
    assert fetch(got.json["download"]) == result


def test_inline_results_and_pending_answers_carry_no_download(cp):
    job_id = cp.enqueue(raw=msgpack.packb([1])).json["job_id"]
    assert cp.result(job_id).json.get("download") is None  # still queued
    assert cp.poll().status == 200
    assert cp.post_result(job_id, {"resultInline": "AQ=="}).status == 204
    got = cp.result(job_id)
    assert got.json["state"] == "succeeded" and got.json.get("download") is None
