"""The local S3 answers presigned requests as real S3 does: expiry, signed headers, checksum."""

from __future__ import annotations

import time

import requests

from tests.support.control_plane import put_presigned, sha256_hex


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


# --- signatures, verified as S3 does (botocore's signer recomputes them) -------------------------


def _put_url(cp, data: bytes) -> dict:
    r = cp.presign_put(len(data), sha256=sha256_hex(data))
    assert r.status == 200, r.raw_body
    return r.json


def _s3_error(resp) -> str:
    return resp.text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def test_untouched_presigned_put_is_accepted(cp):
    data = b"exactly as signed"
    presign = _put_url(cp, data)
    assert put_presigned(presign, data).status_code == 200


def test_put_with_another_content_type_than_signed_is_signature_does_not_match(cp):
    data = b"typed"
    presign = _put_url(cp, data)
    headers = {**presign["headers"], "Content-Type": "text/plain"}
    up = requests.put(presign["url"], data=data, headers=headers, timeout=10)
    assert up.status_code == 403 and _s3_error(up) == "SignatureDoesNotMatch"


def test_put_to_an_edited_key_is_signature_does_not_match(cp, s3_client):
    data = b"keyed"
    presign = _put_url(cp, data)
    edited = presign["url"].replace("/args?", "/result?")
    assert edited != presign["url"]
    up = requests.put(edited, data=data, headers=presign["headers"], timeout=10)
    assert up.status_code == 403 and _s3_error(up) == "SignatureDoesNotMatch"
    # and nothing was written at either key
    listed = s3_client.list_objects_v2(Bucket=presign["bucket"], Prefix=presign["key"][:-5])
    assert listed.get("KeyCount", 0) == 0


def test_put_with_an_edited_expiry_is_signature_does_not_match(cp):
    data = b"longer"
    presign = _put_url(cp, data)
    assert "X-Amz-Expires=900" in presign["url"]
    edited = presign["url"].replace("X-Amz-Expires=900", "X-Amz-Expires=3600")
    up = requests.put(edited, data=data, headers=presign["headers"], timeout=10)
    assert up.status_code == 403 and _s3_error(up) == "SignatureDoesNotMatch"


def test_put_with_no_signature_at_all_is_access_denied(cp):
    data = b"anonymous"
    presign = _put_url(cp, data)
    bare = presign["url"].split("?", 1)[0]
    up = requests.put(bare, data=data, headers=presign["headers"], timeout=10)
    assert up.status_code == 403 and _s3_error(up) == "AccessDenied"


def test_get_with_a_forged_signature_is_refused(cp):
    data = b"readable"
    presign = _put_url(cp, data)
    assert put_presigned(presign, data).status_code == 200
    r = cp.presign_get(presign["key"], role="client")
    assert r.status == 200, r.raw_body
    url = r.json["url"]
    assert requests.get(url, timeout=10).content == data
    sig = url.rsplit("X-Amz-Signature=", 1)[1][:64]
    forged = url.replace(sig, ("0" if sig[0] != "0" else "1") + sig[1:])
    got = requests.get(forged, timeout=10)
    assert got.status_code == 403 and _s3_error(got) == "SignatureDoesNotMatch"


def test_url_signed_with_an_unknown_access_key_is_invalid_access_key_id(cp):
    import boto3
    from botocore.config import Config

    data = b"stranger"
    presign = _put_url(cp, data)
    endpoint = presign["url"].split("/" + presign["bucket"], 1)[0]
    stranger = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIASTRANGER",
        aws_secret_access_key="not-known-here",
        config=Config(signature_version="s3v4"),
    )
    url = stranger.generate_presigned_url(
        "put_object", Params={"Bucket": presign["bucket"], "Key": presign["key"]}
    )
    up = requests.put(url, data=data, timeout=10)
    assert up.status_code == 403 and _s3_error(up) == "InvalidAccessKeyId"


def test_the_emulator_log_keeps_no_query_string(cp, moto_server):
    data = b"logged"
    presign = _put_url(cp, data)
    assert put_presigned(presign, data).status_code == 200
    log = moto_server.log_path.read_text(errors="replace")
    assert "PUT /" in log
    assert "X-Amz-Signature" not in log and "X-Amz-Credential" not in log
