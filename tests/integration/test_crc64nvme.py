"""CRC64NVME as the transfer checksum (issue 34), against real Redis and the S3 emulator over
HTTP: a single PUT signs its CRC; a multipart upload is FULL_OBJECT, answered with its first
part URLs, and verified whole by S3 at completion (a part swapped for other bytes of the same
length is refused); references carry `crc64nvme` to every reader; sha256 clients still work."""

from __future__ import annotations

import base64
import hashlib

import pytest
import requests
from awscrt import checksums

MiB = 1024 * 1024
PART = 5 * MiB


def crc(data: bytes) -> str:
    return base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


def payload(size: int, seed: int = 1) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    return (block * (size // MiB + 1))[:size]


@pytest.fixture
def small_multipart(settings_env):
    """Multipart from 6 MiB on, in 5 MiB parts: a 12 MiB payload is parts of 5, 5 and 2 MiB."""
    settings_env(MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART))


def presign(cp, size: int, *, role="client", **body):
    body = {"kind": "result" if role == "daemon" else "args", **body}
    return cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/presign",
        {"ns": cp.ns},
        role=role,
        query={"op": "put", "size": str(size)},
        body=cp._with_lease(body.get("job_id"), body) if role == "daemon" else body,
    )


def ref_of(answer: dict, size: int, **extra) -> dict:
    return {"kind": "s3", "bucket": answer["bucket"], "key": answer["key"], "size": size, **extra}


def put_parts(answer: dict, data: bytes, part_bytes: int, replace: dict | None = None):
    for part in answer["multipart"]["parts"]:
        n = part["number"]
        body = (replace or {}).get(n) or data[(n - 1) * part_bytes : n * part_bytes]
        up = requests.put(part["url"], data=body, headers=part["headers"], timeout=30)
        assert up.status_code == 200, up.text


def test_single_put_signs_the_crc_and_every_reader_gets_it(cp):
    # Given a client that presigns 1 KiB with its CRC64NVME
    data = payload(1024)
    r = presign(cp, len(data), crc64nvme=crc(data))
    assert r.status == 200, r.raw_body
    # Then the URL signs that CRC (S3 refuses other bytes) and the answer names the algorithm
    assert r.json["headers"]["x-amz-checksum-crc64nvme"] == crc(data)
    assert r.json["checksum_algorithm"] == "CRC64NVME"
    assert (
        requests.put(r.json["url"], data=b"x" * 1024, headers=r.json["headers"]).status_code == 400
    )
    assert requests.put(r.json["url"], data=data, headers=r.json["headers"]).status_code == 200
    # When it enqueues the reference with its CRC
    out = cp.enqueue(ref=ref_of(r.json, len(data), crc64nvme=crc(data)))
    assert out.status == 201, out.raw_body
    # Then the daemon's poll and the job's status carry the CRC, not a sha256
    polled = cp.poll()
    assert polled.json["payloadRef"]["crc64nvme"] == crc(data)
    assert "sha256" not in polled.json["payloadRef"]
    assert cp.status(out.json["job_id"]).json["payloadRef"]["crc64nvme"] == crc(data)


def test_a_reference_with_another_crc_than_signed_is_409(cp):
    data = payload(1024)
    r = presign(cp, len(data), crc64nvme=crc(data))
    requests.put(r.json["url"], data=data, headers=r.json["headers"])
    out = cp.enqueue(ref=ref_of(r.json, len(data), crc64nvme=crc(b"other")))
    assert out.status == 409


def test_single_put_without_its_crc_is_422_and_both_checksums_are_422(cp):
    r = presign(cp, 1024, checksum_algorithm="CRC64NVME")
    assert r.status == 422 and "crc64nvme" in r.raw_body
    both = presign(cp, 1024, crc64nvme=crc(b"a"), sha256="0" * 64)
    assert both.status == 422


def test_multipart_answers_its_part_urls_and_s3_verifies_the_whole_object(cp, small_multipart):
    # Given a 12 MiB payload presigned with CRC64NVME (three parts)
    data = payload(12 * MiB)
    r = presign(cp, len(data), checksum_algorithm="CRC64NVME")
    assert r.status == 200, r.raw_body
    mp = r.json["multipart"]
    # Then the answer holds the upload and all three part URLs: no parts call is needed
    assert r.json["checksum_algorithm"] == "CRC64NVME"
    assert mp["checksum_type"] == "FULL_OBJECT"
    assert [p["number"] for p in mp["parts"]] == [1, 2, 3]
    assert mp["parts"][2]["headers"] == {"Content-Length": str(2 * MiB)}
    # When the parts are uploaded as given and the reference carries the whole CRC
    put_parts(r.json, data, PART)
    out = cp.enqueue(ref=ref_of(r.json, len(data), crc64nvme=crc(data)))
    # Then the job is queued, and readers get the CRC and the part layout
    assert out.status == 201, out.raw_body
    ref = cp.poll().json["payloadRef"]
    assert ref["crc64nvme"] == crc(data)
    assert ref["multipart"] == {"part_bytes": PART, "part_count": 3}
    # And an enqueue repeated after completion answers the same job
    again = cp.enqueue(ref=ref_of(r.json, len(data), crc64nvme=crc(data)))
    assert again.status in (200, 201) and again.json["job_id"] == out.json["job_id"]


def test_a_part_swapped_for_other_bytes_of_the_same_length_is_refused_at_completion(
    cp, small_multipart
):
    # Given a multipart upload whose second part holds other bytes of the same length
    data = payload(12 * MiB)
    r = presign(cp, len(data), checksum_algorithm="CRC64NVME")
    put_parts(r.json, data, PART, replace={2: payload(PART, seed=9)})
    # When the client enqueues with the CRC of the bytes it meant
    out = cp.enqueue(ref=ref_of(r.json, len(data), crc64nvme=crc(data)))
    # Then S3 refused the completion: 409 checksum_mismatch, and no job is queued
    assert out.status == 409 and out.error["reason"] == "checksum_mismatch", out.raw_body
    assert cp.poll().status == 204


def test_a_multipart_reference_without_its_crc_is_422(cp, small_multipart):
    data = payload(12 * MiB)
    r = presign(cp, len(data), checksum_algorithm="CRC64NVME")
    put_parts(r.json, data, PART)
    out = cp.enqueue(ref=ref_of(r.json, len(data)))
    assert out.status == 422 and "crc64nvme" in out.raw_body


def test_parts_call_of_a_crc_upload_takes_no_sha256(cp, small_multipart):
    data = payload(12 * MiB)
    r = presign(cp, len(data), checksum_algorithm="CRC64NVME")
    job_id = r.json["job_id"]

    def parts(spec):
        return cp.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/parts",
            {"ns": cp.ns},
            body={"job_id": job_id, "parts": [spec]},
        )

    refused = parts({"number": 1, "size": PART, "sha256": "0" * 64})
    assert refused.status == 422
    # A part asked for again (an expired URL) with its CRC: signed in, S3 checks it too
    again = parts({"number": 3, "size": 2 * MiB, "crc64nvme": crc(data[2 * PART :])})
    assert again.status == 200, again.raw_body
    url = again.json["parts"][0]
    assert url["headers"]["x-amz-checksum-crc64nvme"] == crc(data[2 * PART :])


def test_a_daemon_result_in_parts_is_verified_whole_too(cp, small_multipart):
    # Given a running job
    args = payload(1024)
    r = presign(cp, len(args), crc64nvme=crc(args))
    requests.put(r.json["url"], data=args, headers=r.json["headers"])
    job_id = cp.enqueue(ref=ref_of(r.json, len(args), crc64nvme=crc(args))).json["job_id"]
    assert cp.poll().status == 200
    # When the daemon presigns a 12 MiB result with CRC64NVME and uploads it with the part URLs
    result = payload(12 * MiB, seed=3)
    up = presign(cp, len(result), role="daemon", job_id=job_id, checksum_algorithm="CRC64NVME")
    assert up.status == 200 and len(up.json["multipart"]["parts"]) == 3, up.raw_body
    put_parts(up.json, result, PART)
    posted = cp.post_result(
        job_id, {"resultRef": ref_of(up.json, len(result), crc64nvme=crc(result))}
    )
    # Then the result is accepted and the client's answer carries its CRC
    assert posted.status == 204, posted.raw_body
    answer = cp.result(job_id).json
    assert answer["resultRef"]["crc64nvme"] == crc(result)


def test_a_sha256_client_keeps_working(cp, small_multipart):
    # Given a client from before CRC64NVME: sha256 for a single PUT, no algorithm named
    data = payload(1024)
    r = presign(cp, len(data), sha256=hashlib.sha256(data).hexdigest())
    assert r.status == 200 and "x-amz-checksum-sha256" in r.json["headers"]
    requests.put(r.json["url"], data=data, headers=r.json["headers"])
    out = cp.enqueue(ref=ref_of(r.json, len(data), sha256=hashlib.sha256(data).hexdigest()))
    assert out.status == 201
    # And above the threshold it gets the SHA256 upload it knows: no part URLs in the answer
    big = presign(cp, 12 * MiB, sha256=None)
    assert big.status == 200 and "parts" not in big.json["multipart"]
    assert big.json["checksum_algorithm"] == "SHA256"


def blob_post(cp, body: dict):
    return cp.call("payloads", "POST", "/v1/namespaces/{ns}/blobs", {"ns": cp.ns}, body=body)


def test_a_blob_in_parts_gets_its_part_urls_and_is_verified_whole(cp, small_multipart):
    # Given a 12 MiB blob, asked for with CRC64NVME
    data = payload(12 * MiB, seed=5)
    sha = hashlib.sha256(data).hexdigest()
    first = blob_post(cp, {"sha256": sha, "size": len(data), "checksum_algorithm": "CRC64NVME"})
    assert first.status == 200 and first.json["exists"] is False, first.raw_body
    mp = first.json["multipart"]
    # Then the answer holds all three part URLs: no parts call
    assert mp["checksum_type"] == "FULL_OBJECT" and len(mp["parts"]) == 3
    # When a POST without the CRC comes before the upload: the instructions again
    again = blob_post(cp, {"sha256": sha, "size": len(data)})
    assert again.json["exists"] is False and again.json["multipart"]["upload_id"] == mp["upload_id"]
    # And the parts are uploaded and the blob POSTed with its whole CRC
    put_parts(first.json, data, PART)
    done = blob_post(cp, {"sha256": sha, "size": len(data), "crc64nvme": crc(data)})
    # Then the blob exists, and a job may reference it
    assert done.status == 200 and done.json["exists"] is True, done.raw_body
    assert blob_post(cp, {"sha256": sha, "size": len(data)}).json["exists"] is True
    out = cp.enqueue(body={"payloadInline": base64.b64encode(b"\x90").decode(), "blobs": [sha]})
    assert out.status in (200, 201), out.raw_body


def test_a_blob_part_swapped_for_other_bytes_is_refused_at_completion(cp, small_multipart):
    data = payload(12 * MiB, seed=6)
    sha = hashlib.sha256(data).hexdigest()
    first = blob_post(cp, {"sha256": sha, "size": len(data), "checksum_algorithm": "CRC64NVME"})
    put_parts(first.json, data, PART, replace={1: payload(PART, seed=8)})
    done = blob_post(cp, {"sha256": sha, "size": len(data), "crc64nvme": crc(data)})
    assert done.status == 409 and done.error["reason"] == "checksum_mismatch", done.raw_body
    # nothing was recorded: the next POST starts a new upload
    again = blob_post(cp, {"sha256": sha, "size": len(data)})
    assert again.json["exists"] is False
