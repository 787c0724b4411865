"""POST /v1/namespaces/{ns}/payloads/presign against real Redis and S3 over HTTP."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, urlparse

import requests

from payloadstore_controlplane.models.domain import new_job_id
from payloadstore_controlplane.store import keys
from tests.support.control_plane import put_presigned, sha256_hex, upload
from tests.support.redis_stats import key_count


def test_put_url_signs_length_type_and_checksum_and_round_trips_bytes(cp, s3_client):
    # Given a 300 KiB payload and its sha256
    data = bytes(range(256)) * 1200
    sha = sha256_hex(data)
    # When a client presigns a PUT for it
    r = cp.presign_put(len(data), sha256=sha)
    # Then the URL signs exactly the headers the uploader must send, for 900 s
    assert r.status == 200, r.raw_body
    body = r.json
    query = parse_qs(urlparse(body["url"]).query)
    signed = query["X-Amz-SignedHeaders"][0].split(";")
    assert {"content-length", "content-type", "x-amz-checksum-sha256"} <= set(signed)
    assert query["X-Amz-Expires"] == ["900"]
    assert body["method"] == "PUT"
    assert body["headers"]["Content-Length"] == str(len(data))
    assert body["headers"]["Content-Type"] == "application/msgpack"
    assert (
        body["key"] == f"payloads/{body['key'].split('/')[1]}/{body['key'].split('/')[2]}/"
        f"{body['key'].split('/')[3]}/{body['job_id']}/args"
    )
    assert body["bucket"] == "payloadstore-test-payloads"
    assert body["expires_at"].endswith("Z")
    # And a real HTTP PUT with those headers then a GET through a presigned GET URL round-trips
    assert put_presigned(body, data).status_code == 200
    got = cp.presign_get(body["key"], role="client")
    assert got.status == 200, got.raw_body
    fetched = requests.get(got.json["url"], timeout=30)
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == sha


def test_put_without_sha_is_refused_and_issues_nothing(cp, redis_view):
    # Given a client that does not say what it will upload
    r_ = redis_view
    before = key_count(r_)
    # When it asks for a presigned PUT
    r = cp.presign_put(10, sha256=None)
    # Then 422 says a sha256 is needed (without one signed in, same-size bytes could replace
    # the object after the CP checked it), and no job was born for it
    assert r.status == 422 and "needs sha256" in r.raw_body
    assert key_count(r_) == before


def test_size_over_cap_is_413_naming_the_cap(cp):
    r = cp.presign_put(104_857_601)
    assert r.status == 413
    assert "MAX_PAYLOAD_BYTES=104857600" in r.error["message"]


def test_size_zero_or_missing_or_bad_sha_is_422(cp):
    assert cp.presign_put(0).status == 422
    r = cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/presign",
        {"ns": cp.ns},
        query={"op": "put"},
    )
    assert r.status == 422 and "size" in r.error["message"]
    assert cp.presign_put(10, sha256="xyz").status == 422
    r = cp.call(
        "payloads",
        "POST",
        "/v1/namespaces/{ns}/payloads/presign",
        {"ns": cp.ns},
        query={"op": "delete", "size": "1"},
    )
    assert r.status == 422


def test_client_cannot_presign_result_and_daemon_cannot_presign_args(cp):
    assert cp.presign_put(10, kind="result").status == 403
    r = cp.presign_put(10, role="daemon", kind="args")
    assert r.status == 403


def test_re_presign_same_job_keeps_key_until_cap_then_429(cp, settings_env):
    # Given a cap of 3 presigns per job
    settings_env(MAX_PRESIGNS_PER_JOB="3")
    first = cp.presign_put(100, sha256="ab" * 32)
    job_id, key = first.json["job_id"], first.json["key"]
    # When the client re-presigns twice with the job id
    again = [cp.presign_put(100, sha256="ab" * 32, job_id=job_id) for _ in range(2)]
    # Then it gets the same key with fresh URLs
    assert [a.status for a in again] == [200, 200]
    assert {a.json["key"] for a in again} == {key}
    # And the fourth presign is refused with 429
    over = cp.presign_put(100, sha256="ab" * 32, job_id=job_id)
    assert over.status == 429
    assert "MAX_PRESIGNS_PER_JOB=3" in over.error["message"]


def test_re_presign_must_repeat_size(cp):
    first = cp.presign_put(100)
    r = cp.presign_put(101, job_id=first.json["job_id"])
    assert r.status == 409


def test_re_presign_of_unknown_or_foreign_job_is_404(cp, other_cp):
    assert cp.presign_put(10, job_id=new_job_id()).status == 404
    theirs = other_cp.presign_put(10)
    assert cp.presign_put(10, job_id=theirs.json["job_id"]).status == 404


def test_get_refuses_keys_never_issued_to_this_namespace(cp, other_cp):
    # Given a key issued to another namespace, and a well-formed key nobody was issued
    theirs = upload(other_cp, b"secret")
    made_up = f"payloads/2026/11/29/{new_job_id()}/args"
    # When this namespace asks to download them
    # Then both are 404, as is a key outside payloads/
    assert cp.presign_get(theirs["key"]).status == 404
    assert cp.presign_get(made_up).status == 404
    assert cp.presign_get("exec/logs/whatever").status == 404


def test_get_is_410_past_48h_even_if_s3_still_has_it(cp, monkeypatch):
    # Given an uploaded payload
    ref = upload(cp, b"old bytes")
    from payloadstore_controlplane.runtime import clock

    real_now = clock.now()
    # When the clock moves 48 h + 1 s on (the object still exists in S3)
    monkeypatch.setattr(clock, "now", lambda: real_now + 48 * 3600 + 1)
    r = cp.presign_get(ref["key"])
    # Then the download is refused as gone
    assert r.status == 410
    assert "48 h" in r.error["message"]
    # And just inside the window it is still served
    monkeypatch.setattr(clock, "now", lambda: real_now + 48 * 3600 - 60)
    assert cp.presign_get(ref["key"]).status == 200


def test_get_of_expired_record_is_410_not_404(cp, redis_view):
    # Given a key minted 3 days ago whose record Redis has already expired
    import time

    old_id = new_job_id(int((time.time() - 3 * 86400) * 1000))
    from payloadstore_controlplane.logic.payload_keys import key_for
    from payloadstore_controlplane.models.domain import PayloadKind

    # Then asking for it says it is past retention
    assert cp.presign_get(key_for(old_id, PayloadKind.ARGS)).status == 410


def test_presign_is_recorded_in_redis_with_its_facts(cp, redis_view):

    # When a client presigns an args key
    r = cp.presign_put(4096, sha256="cd" * 32)
    # Then the job is born awaiting its upload, holding only what cannot be rebuilt
    client = redis_view
    key = keys.job(r.json["job_id"])
    rec = client.hgetall(key)
    assert rec == {
        b"n": cp.ns.encode(),
        b"s": b"awaiting_upload",
        b"pz": b"4096",
        b"pn": b"1",
        b"ph": bytes.fromhex("cd" * 32),  # 32 raw bytes; no bucket, key or default type stored
    }
    assert client.object("encoding", key) == b"listpack"
    assert 172_700 < client.ttl(key) <= 172_800
    # And a client may not see it as a job until it is enqueued
    assert cp.status(r.json["job_id"]).status == 404
