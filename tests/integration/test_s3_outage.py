"""S3 unreachable: 503 with Retry-After, never a stack trace; nothing written."""

from __future__ import annotations

from payloadstore_controlplane.store import keys
from payloadstore_devstack.services import free_port
from tests.support.control_plane import upload


def test_s3_down_at_enqueue_is_503_and_creates_no_job(cp, settings_env, redis_view):
    # Given an uploaded payload, then S3 becomes unreachable
    ref = upload(cp, b"\x01" * 100)
    settings_env(S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    # When the client enqueues it
    r = cp.enqueue(ref=ref)
    # Then it is told to retry later, and no job exists
    assert r.status == 503, r.raw_body
    assert r.headers.get("Retry-After")
    assert "object storage" in r.error["message"] and "Traceback" not in r.raw_body

    job_id = ref["key"].split("/")[-2]
    job = redis_view.hgetall(keys.job(job_id))
    assert job[b"s"] == b"awaiting_upload"  # still only what presign issued
    assert cp.status(job_id).status == 404
    # And health names the bucket checks
    health = cp.call("public", "GET", "/v1/health", namespace=None)
    assert health.status == 503 and "bucket" in health.json["failing"]
