"""Multipart uploads (issue 24): presign above MULTIPART_THRESHOLD, part URLs with their
checksums signed in, and S3's multipart checksum rules in the local emulator, against real Redis
and the emulator over HTTP."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from botocore.exceptions import ClientError

from payloadstore_controlplane.store import keys
from tests.support.control_plane import sha256_hex

MiB = 1024 * 1024
PART = 5 * MiB  # S3's smallest part


@pytest.fixture
def small_multipart(settings_env):
    """Multipart from 6 MiB on, in 5 MiB parts: a 12 MiB payload is parts of 5, 5 and 2 MiB."""
    settings_env(MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART))


def payload(size: int, seed: int = 1) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    return (block * (size // MiB + 1))[:size]


def split(data: bytes, part_bytes: int) -> list[bytes]:
    return [data[i : i + part_bytes] for i in range(0, len(data), part_bytes)]


def part_specs(data: bytes, part_bytes: int, numbers=None) -> list[dict]:
    chunks = split(data, part_bytes)
    numbers = numbers or range(1, len(chunks) + 1)
    return [
        {"number": n, "size": len(chunks[n - 1]), "sha256": sha256_hex(chunks[n - 1])}
        for n in numbers
    ]


def ask_parts(cp, job_id: str, parts: list[dict], *, role="client", kind=None, lease=None):
    body: dict = {"job_id": job_id, "parts": parts}
    if kind:
        body["kind"] = kind
    if lease:
        body["lease"] = lease
    return cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/parts",
        {"ns": cp.ns},
        role=role,
        body=body,
    )


def put_part(part_url: dict, data: bytes):
    return requests.put(part_url["url"], data=data, headers=part_url["headers"], timeout=60)


def composite_of(chunks: list[bytes]) -> str:
    raw = b"".join(hashlib.sha256(c).digest() for c in chunks)
    return f"{base64.b64encode(hashlib.sha256(raw).digest()).decode()}-{len(chunks)}"


def upload_all(cp, data: bytes, *, role="client", kind=None, lease=None, job_id=None):
    """Presign (unless job_id is given with a presign answer), ask every part, PUT each."""
    r = cp.presign_put(len(data), sha256=None, role=role, kind=kind, job_id=job_id, lease=lease)
    assert r.status == 200, r.raw_body
    mp = r.json["multipart"]
    urls = ask_parts(
        cp, r.json["job_id"], part_specs(data, mp["part_bytes"]), role=role, kind=kind, lease=lease
    )
    assert urls.status == 200, urls.raw_body
    for url, chunk in zip(urls.json["parts"], split(data, mp["part_bytes"]), strict=True):
        assert put_part(url, chunk).status_code == 200
    return r.json


# -- presign -----------------------------------------------------------------------------------


def test_presign_above_threshold_creates_a_multipart_upload_instead_of_a_url(
    cp, small_multipart, s3_client
):
    # Given a payload of 12 MiB, above a 6 MiB MULTIPART_THRESHOLD
    size = 12 * MiB
    # When the client presigns it (no whole-payload sha256 needed)
    r = cp.presign_put(size, sha256=None)
    # Then the answer names a multipart upload of 3 parts of 5 MiB, and no single URL
    assert r.status == 200, r.raw_body
    body = r.json
    assert "url" not in body
    assert body["multipart"]["part_bytes"] == PART
    assert body["multipart"]["part_count"] == 3
    assert body["key"].endswith(f"/{body['job_id']}/args")
    # And the upload exists in S3 with SHA-256 checksums
    uploads = s3_client.list_multipart_uploads(Bucket=body["bucket"]).get("Uploads", [])
    mine = [u for u in uploads if u["UploadId"] == body["multipart"]["upload_id"]]
    assert mine and mine[0]["Key"] == body["key"]


def test_presign_at_threshold_is_a_single_put_as_before(cp, small_multipart):
    r = cp.presign_put(6 * MiB)
    assert r.status == 200 and r.json["url"] and "multipart" not in r.json
    assert cp.presign_put(6 * MiB, sha256=None).status == 422


def test_part_size_grows_so_no_upload_needs_more_than_10000_parts(cp, settings_env):
    # Given MAX_PAYLOAD_BYTES at S3's largest object (10,000 parts of 5 GiB, ~48.8 TiB) and the
    # default part size of 16 MiB
    settings_env(MAX_PAYLOAD_BYTES=str(10_000 * 5 * 1024**3))
    for size in (1024**4, 40 * 1024**4):
        # When a client presigns 1 TiB (65,536 parts of 16 MiB) or 40 TiB (no bytes move)
        r = cp.presign_put(size, sha256=None)
        # Then the part size grows to whole MiB, at most 5 GiB, so the upload needs at most
        # 10,000 parts
        assert r.status == 200, r.raw_body
        mp = r.json["multipart"]
        assert mp["part_count"] <= 10_000 and mp["part_bytes"] % MiB == 0
        assert mp["part_bytes"] <= 5 * 1024**3
        assert (
            mp["part_bytes"] * (mp["part_count"] - 1) < size <= mp["part_bytes"] * mp["part_count"]
        )


def test_config_names_the_multipart_settings(cp, small_multipart):
    r = cp.call("public", "GET", "/v1/config", None)
    assert r.status == 200
    assert r.json["multipart_threshold"] == 6 * MiB
    assert r.json["multipart_part_bytes"] == PART


# -- part URLs ---------------------------------------------------------------------------------


def test_part_urls_sign_length_and_checksum_and_upload_the_bytes(cp, small_multipart, s3_client):
    # Given a multipart upload of 12 MiB
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    mp = r.json["multipart"]
    # When the client asks for the URLs of its 3 parts
    urls = ask_parts(cp, r.json["job_id"], part_specs(data, mp["part_bytes"]))
    # Then each URL is an UploadPart of that upload with content-length and sha256 signed in
    assert urls.status == 200, urls.raw_body
    body = urls.json
    assert body["upload_id"] == mp["upload_id"] and body["key"] == r.json["key"]
    assert [p["number"] for p in body["parts"]] == [1, 2, 3]
    chunks = split(data, PART)
    for part, chunk in zip(body["parts"], chunks, strict=True):
        query = parse_qs(urlparse(part["url"]).query)
        assert query["partNumber"] == [str(part["number"])]
        assert query["uploadId"] == [mp["upload_id"]]
        assert {"content-length", "x-amz-checksum-sha256"} <= set(
            query["X-Amz-SignedHeaders"][0].split(";")
        )
        assert part["headers"]["Content-Length"] == str(len(chunk))
        # And S3 takes the part's bytes through it
        assert put_part(part, chunk).status_code == 200
    listed = s3_client.list_parts(
        Bucket=r.json["bucket"], Key=r.json["key"], UploadId=mp["upload_id"]
    )
    assert [(p["PartNumber"], p["Size"]) for p in listed["Parts"]] == [
        (1, PART),
        (2, PART),
        (3, 2 * MiB),
    ]
    assert [p["ChecksumSHA256"] for p in listed["Parts"]] == [
        base64.b64encode(hashlib.sha256(c).digest()).decode() for c in chunks
    ]


def test_a_part_with_other_bytes_is_refused_by_s3(cp, small_multipart):
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    urls = ask_parts(cp, r.json["job_id"], part_specs(data, PART, [1]))
    other = payload(PART, seed=2)
    up = put_part(urls.json["parts"][0], other)
    assert up.status_code == 400 and "BadDigest" in up.text


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"number": 4, "size": MiB, "sha256": "0" * 64}, "does not exist"),
        ({"number": 1, "size": PART - 1, "sha256": "0" * 64}, "must be"),
        ({"number": 3, "size": 3 * MiB, "sha256": "0" * 64}, "must be"),
        ({"number": 0, "size": PART, "sha256": "0" * 64}, "number"),
        ({"number": 1, "size": PART, "sha256": "xyz"}, "sha256"),
    ],
)
def test_bad_parts_are_422_and_nothing_is_recorded(cp, small_multipart, redis_view, spec, says):
    r = cp.presign_put(12 * MiB, sha256=None)
    out = ask_parts(cp, r.json["job_id"], [spec])
    assert out.status == 422 and says in out.raw_body
    parts_key = keys.parts(r.json["job_id"], "args")
    assert redis_view.hkeys(parts_key) == [b"u"]


def test_more_than_100_parts_a_call_is_422(cp, settings_env):
    settings_env(
        MULTIPART_THRESHOLD=str(6 * MiB),
        MULTIPART_PART_BYTES=str(PART),
        MAX_PAYLOAD_BYTES=str(1024**3),
    )
    size = 101 * PART
    r = cp.presign_put(size, sha256=None)
    specs = [{"number": n, "size": PART, "sha256": "0" * 64} for n in range(1, 102)]
    assert ask_parts(cp, r.json["job_id"], specs).status == 422
    assert ask_parts(cp, r.json["job_id"], specs[:100]).status == 200


def test_duplicate_part_numbers_are_422(cp, small_multipart):
    r = cp.presign_put(12 * MiB, sha256=None)
    spec = {"number": 1, "size": PART, "sha256": "0" * 64}
    assert ask_parts(cp, r.json["job_id"], [spec, spec]).status == 422


def test_expired_part_url_is_re_presigned_and_the_cap_counts_calls_not_parts(cp, settings_env):
    # Given MAX_PRESIGNS_PER_JOB=3 and an upload of 3 parts (the presign counts one)
    settings_env(
        MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART), MAX_PRESIGNS_PER_JOB="3"
    )
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    job_id = r.json["job_id"]
    # When the client asks for each part in its own call, first issues are not counted
    for spec in part_specs(data, PART):
        assert ask_parts(cp, job_id, [spec]).status == 200
    # And asking for all three again (expired URLs) counts one presign per call
    again = part_specs(data, PART)
    first = ask_parts(cp, job_id, again)
    assert first.status == 200
    # And the re-presigned URL uploads the part
    assert put_part(first.json["parts"][0], split(data, PART)[0]).status_code == 200
    assert ask_parts(cp, job_id, again).status == 200
    # Then the cap (3 presigns: the presign and two re-presign calls) answers 429
    assert ask_parts(cp, job_id, again).status == 429


def test_a_part_asked_again_with_another_sha256_is_409(cp, small_multipart):
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    assert ask_parts(cp, r.json["job_id"], part_specs(data, PART, [1])).status == 200
    other = [{"number": 1, "size": PART, "sha256": sha256_hex(payload(PART, seed=9))}]
    out = ask_parts(cp, r.json["job_id"], other)
    assert out.status == 409 and "another sha256" in out.raw_body


def test_parts_of_a_single_put_key_are_409(cp, small_multipart):
    r = cp.presign_put(MiB)
    out = ask_parts(cp, r.json["job_id"], [{"number": 1, "size": MiB, "sha256": "0" * 64}])
    assert out.status == 409 and "single PUT" in out.raw_body


def test_parts_of_another_namespace_or_unknown_job_are_404(cp, other_cp, small_multipart):
    r = cp.presign_put(12 * MiB, sha256=None)
    spec = [{"number": 1, "size": PART, "sha256": "0" * 64}]
    assert ask_parts(other_cp, r.json["job_id"], spec).status == 404
    assert ask_parts(cp, "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C", spec).status == 404


def test_a_daemon_token_asks_result_parts_only(cp, small_multipart):
    r = cp.presign_put(12 * MiB, sha256=None)
    spec = [{"number": 1, "size": PART, "sha256": "0" * 64}]
    assert ask_parts(cp, r.json["job_id"], spec, role="daemon").status == 403


# -- the emulator keeps S3's multipart checksum rules (botocore's own client) --------------------


@pytest.fixture
def sha_upload(s3_client, payload_bucket):
    key = "payloads/2026/01/01/MPTEST/args"
    up = s3_client.create_multipart_upload(
        Bucket=payload_bucket, Key=key, ChecksumAlgorithm="SHA256"
    )
    yield key, up["UploadId"]


def _b64sha(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_emulator_refuses_a_part_whose_checksum_differs(
    s3_client, payload_bucket, sha_upload, moto_server
):
    import boto3
    from botocore.config import Config

    key, upload_id = sha_upload
    # botocore retries a BadDigest (the body may have been damaged in transit): once is enough
    once = boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        region_name=s3_client.meta.region_name,
        config=Config(signature_version="s3v4", retries={"max_attempts": 1, "mode": "standard"}),
    )
    with pytest.raises(ClientError) as e:
        once.upload_part(
            Bucket=payload_bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=1,
            Body=b"a" * PART,
            ChecksumSHA256=_b64sha(b"b" * PART),
        )
    assert e.value.response["Error"]["Code"] == "BadDigest"


def test_emulator_completes_with_part_checksums_and_answers_the_composite(
    s3_client, payload_bucket, sha_upload
):
    # Given two parts uploaded with their SHA-256 checksums
    key, upload_id = sha_upload
    chunks = [payload(PART, seed=3), payload(MiB, seed=4)]
    etags = []
    for n, chunk in enumerate(chunks, 1):
        out = s3_client.upload_part(
            Bucket=payload_bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=n,
            Body=chunk,
            ChecksumSHA256=_b64sha(chunk),
        )
        etags.append(out["ETag"])
    # When ListParts is read, each part carries its checksum
    listed = s3_client.list_parts(Bucket=payload_bucket, Key=key, UploadId=upload_id)
    assert [p["ChecksumSHA256"] for p in listed["Parts"]] == [_b64sha(c) for c in chunks]
    parts = [
        {"PartNumber": n, "ETag": etag, "ChecksumSHA256": _b64sha(c)}
        for n, (etag, c) in enumerate(zip(etags, chunks, strict=True), 1)
    ]
    # And a completion naming another checksum for a part is InvalidPart
    wrong = [dict(parts[0], ChecksumSHA256=_b64sha(b"x")), parts[1]]
    with pytest.raises(ClientError) as e:
        s3_client.complete_multipart_upload(
            Bucket=payload_bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": wrong}
        )
    assert e.value.response["Error"]["Code"] == "InvalidPart"
    # Then the right completion answers the composite checksum, and HEAD says the same
    done = s3_client.complete_multipart_upload(
        Bucket=payload_bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    assert done["ChecksumSHA256"] == composite_of(chunks)
    head = s3_client.head_object(Bucket=payload_bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == composite_of(chunks)
    assert head["ContentLength"] == PART + MiB
    # And a ranged GET answers exactly those bytes
    got = s3_client.get_object(Bucket=payload_bucket, Key=key, Range=f"bytes={PART - 3}-{PART + 4}")
    assert got["Body"].read() == (chunks[0] + chunks[1])[PART - 3 : PART + 5]
    assert got["ContentRange"] == f"bytes {PART - 3}-{PART + 4}/{PART + MiB}"


def test_emulator_refuses_a_part_without_checksum_to_a_sha256_upload(
    s3_client, payload_bucket, sha_upload
):
    key, upload_id = sha_upload
    url = s3_client.generate_presigned_url(
        "upload_part",
        Params={"Bucket": payload_bucket, "Key": key, "UploadId": upload_id, "PartNumber": 1},
        HttpMethod="PUT",
    )
    up = requests.put(url, data=b"z" * 100, timeout=10)
    assert up.status_code == 400 and "Checksum Type mismatch" in up.text


# -- completion at enqueue and result post -----------------------------------------------------


def ref_of(presigned: dict) -> dict:
    return {"bucket": presigned["bucket"], "key": presigned["key"], "size": presigned["size"]}


def test_enqueue_completes_the_upload_and_the_job_keeps_the_composite(
    cp, small_multipart, s3_client, redis_view
):
    # Given a 12 MiB payload uploaded in its 3 parts
    data = payload(12 * MiB)
    presigned = upload_all(cp, data)
    job_id = presigned["job_id"]
    # When the client enqueues the reference
    out = cp.enqueue(ref={**ref_of({**presigned, "size": len(data)})})
    # Then the job exists, and S3 holds the object with the parts' composite checksum
    assert out.status == 201, out.raw_body
    chunks = split(data, PART)
    head = s3_client.head_object(
        Bucket=presigned["bucket"], Key=presigned["key"], ChecksumMode="ENABLED"
    )
    assert head["ContentLength"] == len(data)
    assert head["ChecksumSHA256"] == composite_of(chunks)
    # And the job's reference says how it was uploaded, with the composite (hex)
    ref = cp.status(job_id).json["payloadRef"]
    composite_hex = base64.b64decode(composite_of(chunks).split("-")[0]).hex()
    assert ref["multipart"] == {
        "part_bytes": PART,
        "part_count": 3,
        "composite_sha256": composite_hex,
    }
    assert "sha256" not in ref
    # And Redis keeps no upload state: the parts hash is gone
    r_ = redis_view
    assert not r_.exists(keys.parts(job_id, "args"))
    # And a repeat of the enqueue finds the same job (200)
    again = cp.enqueue(ref=ref_of({**presigned, "size": len(data)}))
    assert again.status == 200 and again.json["job_id"] == job_id
    # And the daemon's poll hands out the reference and a GET whose ranges read the parts
    polled = cp.poll()
    assert (
        polled.status == 200
        and polled.json["payloadRef"]["multipart"]["composite_sha256"] == composite_hex
    )
    got = requests.get(
        polled.json["download"]["url"],
        headers={"Range": f"bytes={PART}-{2 * PART - 1}"},
        timeout=30,
    )
    assert got.status_code == 206 and got.content == chunks[1]


def test_a_missing_part_is_409_parts_mismatch_and_the_upload_stays_open(cp, small_multipart):
    # Given a multipart upload whose part 2 was presigned but never uploaded
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    urls = ask_parts(cp, r.json["job_id"], part_specs(data, PART))
    chunks = split(data, PART)
    for n in (0, 2):
        assert put_part(urls.json["parts"][n], chunks[n]).status_code == 200
    ref = {"bucket": r.json["bucket"], "key": r.json["key"], "size": len(data)}
    # When the client enqueues the reference
    out = cp.enqueue(ref=ref)
    # Then 409 parts_mismatch names the missing part, and no job exists
    assert out.status == 409 and out.error["reason"] == "parts_mismatch"
    assert "part 2 is missing" in out.error["message"]
    assert cp.status(r.json["job_id"]).status == 404
    # And once the part is uploaded, the enqueue succeeds
    assert put_part(urls.json["parts"][1], chunks[1]).status_code == 200
    assert cp.enqueue(ref=ref).status == 201


def test_a_part_never_presigned_is_parts_mismatch(cp, small_multipart):
    data = payload(12 * MiB)
    r = cp.presign_put(len(data), sha256=None)
    urls = ask_parts(cp, r.json["job_id"], part_specs(data, PART, [1, 2]))
    for url, chunk in zip(urls.json["parts"], split(data, PART), strict=False):
        assert put_part(url, chunk).status_code == 200
    out = cp.enqueue(ref={"bucket": r.json["bucket"], "key": r.json["key"], "size": len(data)})
    assert out.status == 409 and out.error["reason"] == "parts_mismatch"
    assert "part 3 was never presigned" in out.error["message"]


def test_a_claimed_composite_that_is_not_the_objects_is_checksum_mismatch(cp, small_multipart):
    data = payload(12 * MiB)
    presigned = upload_all(cp, data)
    ref = {
        "bucket": presigned["bucket"],
        "key": presigned["key"],
        "size": len(data),
        "multipart": {"part_bytes": PART, "part_count": 3, "composite_sha256": "ab" * 32},
    }
    out = cp.enqueue(ref=ref)
    assert out.status == 409 and out.error["reason"] == "checksum_mismatch"


def test_a_multipart_result_is_completed_at_result_post(cp, small_multipart, s3_client):
    # Given a running job
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    # When its daemon uploads a 12 MiB result in parts, with the delivery's lease
    data = payload(12 * MiB, seed=7)
    lease = cp.leases[job_id]
    presigned = upload_all(cp, data, role="daemon", kind="result", lease=lease, job_id=job_id)
    assert presigned["key"].endswith(f"/{job_id}/result")
    posted = cp.post_result(
        job_id,
        {"resultRef": {"bucket": presigned["bucket"], "key": presigned["key"], "size": len(data)}},
    )
    # Then the result is accepted, complete in S3, and its reference carries the composite
    assert posted.status == 204, posted.raw_body
    res = cp.result(job_id).json
    assert res["state"] == "succeeded"
    chunks = split(data, PART)
    composite_hex = base64.b64decode(composite_of(chunks).split("-")[0]).hex()
    assert res["resultRef"]["multipart"]["composite_sha256"] == composite_hex
    got = requests.get(res["download"]["url"], timeout=30)
    assert got.content == data


def test_result_parts_with_another_deliverys_lease_are_409(cp, small_multipart):
    assert cp.enqueue(inline=b"\x01").status == 201
    job_id = cp.poll().json["job_id"]
    data = payload(12 * MiB, seed=7)
    r = cp.presign_put(len(data), sha256=None, role="daemon", job_id=job_id)
    assert r.status == 200, r.raw_body
    out = ask_parts(
        cp, job_id, part_specs(data, PART, [1]), role="daemon", kind="result", lease="not-mine"
    )
    assert out.status == 409 and out.error["code"] == "lease_mismatch"


def test_a_queued_multipart_job_costs_redis_at_most_512_bytes(cp, small_multipart, redis_view):
    data = payload(12 * MiB)
    presigned = upload_all(cp, data)
    assert cp.enqueue(ref=ref_of({**presigned, "size": len(data)})).status == 201
    r_ = redis_view
    job_id = presigned["job_id"]
    used = r_.memory_usage(keys.job(job_id)) or 0
    assert 0 < used <= 512
    assert r_.object("encoding", keys.job(job_id)) == b"listpack"


def test_a_re_presign_answers_the_same_upload_and_counts(cp, settings_env):
    # Given MAX_PRESIGNS_PER_JOB=2 and a multipart upload presigned once
    settings_env(
        MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART), MAX_PRESIGNS_PER_JOB="2"
    )
    first = cp.presign_put(12 * MiB, sha256=None)
    job_id = first.json["job_id"]
    # When the client presigns the same job again (its answer was lost)
    again = cp.presign_put(12 * MiB, sha256=None, job_id=job_id)
    # Then it gets the same upload, and the next re-presign is past the cap
    assert again.status == 200, again.raw_body
    assert again.json["multipart"] == first.json["multipart"]
    assert cp.presign_put(12 * MiB, sha256=None, job_id=job_id).status == 429
    # And another size for the same job is refused
    assert cp.presign_put(13 * MiB, sha256=None, job_id=job_id).status == 409


def test_parts_of_an_enqueued_job_are_409(cp, small_multipart):
    data = payload(12 * MiB)
    presigned = upload_all(cp, data)
    assert cp.enqueue(ref=ref_of({**presigned, "size": len(data)})).status == 201
    out = ask_parts(cp, presigned["job_id"], part_specs(data, PART, [1]))
    assert out.status == 409


def test_a_completion_s3_refuses_aborts_the_upload(cp, small_multipart, monkeypatch, s3_client):
    # Given an upload whose parts match what was issued, but S3 refuses to complete them
    from payloadstore_controlplane.store import s3_objects
    from payloadstore_controlplane.store.s3.multipart import CompletionRefused

    data = payload(12 * MiB)
    presigned = upload_all(cp, data)
    upload_id = presigned["multipart"]["upload_id"]

    def refuse(self, key, upload, parts):
        raise CompletionRefused("InvalidPart")

    monkeypatch.setattr(s3_objects.S3Objects, "complete_multipart", refuse)
    # When the client enqueues it
    out = cp.enqueue(ref=ref_of({**presigned, "size": len(data)}))
    # Then 409 parts_mismatch, the upload is aborted in S3, and its parts are no longer presigned
    assert out.status == 409 and out.error["reason"] == "parts_mismatch"
    assert "aborted" in out.error["message"]
    uploads = s3_client.list_multipart_uploads(Bucket=presigned["bucket"]).get("Uploads", [])
    assert upload_id not in [u["UploadId"] for u in uploads]
    again = ask_parts(cp, presigned["job_id"], part_specs(data, PART, [1]))
    assert again.status == 409
