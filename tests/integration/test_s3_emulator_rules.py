"""The local S3 answers presigned requests as real S3 does: expiry, signed headers, checksum."""

from __future__ import annotations

import time

import requests

from tests.integration.conftest import put_presigned, sha256_hex


def test_expired_put_url_is_403_request_has_expired(cp, settings_env):
    settings_env(PRESIGN_TTL_S="1")
    data = b"late"
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    time.sleep(2.1)
    up = put_presigned(r.json, data)
    assert up.status_code == 403 and "Request has expired" in up.text


def test_body_not_matching_signed_checksum_is_400_bad_digest(cp):
    data = b"the real bytes"
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    up = put_presigned(r.json, b"other bytes!!!")
    assert up.status_code == 400 and "BadDigest" in up.text
    # and nothing was stored, so the enqueue says so
    ref = {
        "kind": "s3",
        "bucket": r.json["bucket"],
        "key": r.json["key"],
        "size": len(data),
        "sha256": sha256_hex(data),
    }
    out = cp.enqueue(ref=ref)
    assert out.status == 409 and out.error["reason"] == "not_uploaded"


def test_put_without_a_signed_header_is_refused(cp):
    data = b"abc"
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    headers = {k: v for k, v in r.json["headers"].items() if k != "x-amz-checksum-sha256"}
    up = requests.put(r.json["url"], data=data, headers=headers, timeout=10)
    assert up.status_code == 403
