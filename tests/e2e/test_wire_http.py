"""The v1 wire over real HTTP: local gateway -> authorizer -> handlers -> redis-server and S3.

Uploads and downloads go to the presigned URLs with plain HTTP clients (curl and requests),
sending exactly the headers the presign response lists, as any client in any language would.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import uuid

import msgpack
import pytest
import requests

from payloadstore_controlplane.routes import ROUTES

pytestmark = pytest.mark.e2e

TIMEOUT = 30


def queue_name() -> str:
    return f"wire-{uuid.uuid4().hex[:8]}"


def curl_put(url: str, path, headers: dict[str, str]) -> int:
    """`curl -T` the file to a presigned URL with exactly `headers`; returns the HTTP status."""
    args = [
        "curl",
        "--silent",
        "--show-error",
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_code}",
        "--upload-file",
        str(path),
    ]
    for name, value in headers.items():
        args += ["--header", f"{name}: {value}"]
    done = subprocess.run(args + [url], capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout)


def presign_put(
    gw,
    role: str,
    size: int,
    sha256: str | None = None,
    kind: str = "args",
    job_id: str | None = None,
    lease: str | None = None,
) -> dict:
    params = {"op": "put", "size": size, "kind": kind}
    if sha256:
        params["sha256"] = sha256
    if job_id:
        params["job_id"] = job_id
    if lease:
        params["lease"] = lease
    resp = requests.post(
        f"{gw.url}/v1/namespaces/dev/payloads/presign",
        params=params,
        headers=gw.auth("dev", role),
        timeout=TIMEOUT,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def presign_get(gw, role: str, key: str) -> dict:
    resp = requests.post(
        f"{gw.url}/v1/namespaces/dev/payloads/presign",
        params={"op": "get", "key": key},
        headers=gw.auth("dev", role),
        timeout=TIMEOUT,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def poll(gw, queue: str, wait_s: float = 5) -> requests.Response:
    return requests.post(
        f"{gw.url}/v1/daemon/poll",
        headers=gw.auth("dev", "daemon"),
        timeout=TIMEOUT,
        json={"namespace": "dev", "queues": [queue], "wait_s": wait_s, "daemon_id": "e2e-daemon"},
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_enqueue_by_reference_uploaded_with_curl_through_to_the_result(local_gateway, tmp_path):
    gw = local_gateway
    queue = queue_name()
    # Given 600 KiB of args (over the 256 KiB inline threshold) in a file, and its sha256
    args = os.urandom(600 * 1024)
    digest = hashlib.sha256(args).hexdigest()
    path = tmp_path / "args.bin"
    path.write_bytes(args)
    # When the client presigns an upload and curl PUTs the file with exactly the listed headers
    put = presign_put(gw, "client", len(args), sha256=digest)
    assert put["method"] == "PUT"
    assert {h.lower() for h in put["headers"]} >= {
        "content-length",
        "content-type",
        "x-amz-checksum-sha256",
    }
    assert curl_put(put["url"], path, put["headers"]) == 200
    # And enqueues the reference
    ref = {
        "kind": "s3",
        "bucket": put["bucket"],
        "key": put["key"],
        "size": len(args),
        "sha256": digest,
        "contentType": "application/msgpack",
    }
    enq = requests.post(
        f"{gw.url}/v1/namespaces/dev/queues/{queue}/jobs",
        json={"payloadRef": ref},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    # Then the job is created on the S3 tier with the id the presign minted
    assert enq.status_code == 201, enq.text
    assert enq.json() == {"job_id": put["job_id"], "tier": "s3"}
    job_id = put["job_id"]

    # When a daemon polls, it gets the reference, fetches the bytes itself and they are intact
    polled = poll(gw, queue)
    assert polled.status_code == 200, polled.text
    job = polled.json()
    assert job["job_id"] == job_id and job["attempt"] == 1
    assert job["payloadRef"]["key"] == put["key"] and job["payloadRef"]["sha256"] == digest
    get = presign_get(gw, "daemon", job["payloadRef"]["key"])
    fetched = requests.get(get["url"], timeout=TIMEOUT).content
    assert hashlib.sha256(fetched).hexdigest() == digest

    # And posts a small result inline
    result = msgpack.packb({"len": len(fetched)})
    posted = requests.post(
        f"{gw.url}/v1/namespaces/dev/jobs/{job_id}/result",
        json={"resultInline": base64.b64encode(result).decode(), "lease": job["lease"]},
        headers=gw.auth("dev", "daemon"),
        timeout=TIMEOUT,
    )
    assert posted.status_code == 204, posted.text

    # Then the client reads the result and the job's status says it succeeded
    got = requests.get(
        f"{gw.url}/v1/namespaces/dev/jobs/{job_id}/result",
        params={"wait": 5},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert got.status_code == 200, got.text
    assert msgpack.unpackb(base64.b64decode(got.json()["resultInline"])) == {"len": len(args)}
    status = requests.get(
        f"{gw.url}/v1/namespaces/dev/jobs/{job_id}",
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert status.status_code == 200
    assert status.json()["state"] == "succeeded"
    assert status.json()["tier"] == "s3"


def test_presigned_url_answers_cross_the_wire_gzipped_for_a_client_that_accepts_it(local_gateway):
    gw = local_gateway
    # Given a presign answer (a URL with its signature, the headers, the key)
    params = {"op": "put", "size": 600 * 1024, "kind": "args", "sha256": "ab" * 32}

    def presign(accept_encoding: str) -> tuple[requests.Response, bytes]:
        resp = requests.post(
            f"{gw.url}/v1/namespaces/dev/payloads/presign",
            params=params,
            headers={**gw.auth("dev", "client"), "Accept-Encoding": accept_encoding},
            stream=True,
            timeout=TIMEOUT,
        )
        assert resp.status_code == 200
        return resp, resp.raw.read(decode_content=False)

    # When a client that accepts gzip (httpx and requests do by default) asks, and one that does not
    packed, packed_body = presign("gzip, deflate")
    plain, plain_body = presign("identity")
    # Then the first gets it gzipped, at most 70% of the plain size, and both decode to an answer
    assert packed.headers["Content-Encoding"] == "gzip"
    assert len(packed_body) <= 0.7 * len(plain_body), (len(packed_body), len(plain_body))
    assert "Content-Encoding" not in plain.headers
    for answer in (json.loads(gzip.decompress(packed_body)), json.loads(plain_body)):
        assert answer["method"] == "PUT" and answer["url"].startswith("http")


def test_inline_enqueue_as_raw_msgpack_and_a_result_by_reference(local_gateway):
    gw = local_gateway
    queue = queue_name()
    # Given small args sent as the raw request body (Content-Type: application/msgpack)
    args = msgpack.packb({"args": [1, 2, 3], "kwargs": {}})
    enq = requests.post(
        f"{gw.url}/v1/namespaces/dev/queues/{queue}/jobs",
        data=args,
        headers={**gw.auth("dev", "client"), "Content-Type": "application/msgpack"},
        timeout=TIMEOUT,
    )
    assert enq.status_code == 201, enq.text
    assert enq.json()["tier"] == "inline"
    job_id = enq.json()["job_id"]

    # When the daemon polls, the bytes arrive inline, unchanged
    polled = poll(gw, queue)
    assert polled.status_code == 200, polled.text
    assert base64.b64decode(polled.json()["payloadInline"]) == args

    # And it stores a 1 MiB result in S3 (presigned for this job, uploaded with requests)
    result = os.urandom(1024 * 1024)
    put = presign_put(
        gw,
        "daemon",
        len(result),
        kind="result",
        job_id=job_id,
        sha256=hashlib.sha256(result).hexdigest(),
        lease=polled.json()["lease"],
    )
    upload = requests.put(put["url"], data=result, headers=put["headers"], timeout=TIMEOUT)
    assert upload.status_code == 200, upload.text
    ref = {
        "kind": "s3",
        "bucket": put["bucket"],
        "key": put["key"],
        "size": len(result),
        "sha256": hashlib.sha256(result).hexdigest(),
    }
    posted = requests.post(
        f"{gw.url}/v1/namespaces/dev/jobs/{job_id}/result",
        json={"resultRef": ref, "lease": polled.json()["lease"]},
        headers=gw.auth("dev", "daemon"),
        timeout=TIMEOUT,
    )
    assert posted.status_code == 204, posted.text

    # Then the client gets the reference and downloads the very bytes
    got = requests.get(
        f"{gw.url}/v1/namespaces/dev/jobs/{job_id}/result",
        params={"wait": 5},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert got.status_code == 200, got.text
    result_ref = got.json()["resultRef"]
    assert result_ref["key"].endswith(f"/{job_id}/result")
    assert (
        requests.get(presign_get(gw, "client", result_ref["key"])["url"], timeout=TIMEOUT).content
        == result
    )


def test_idle_poll_is_204_and_pending_result_is_202(local_gateway):
    gw = local_gateway
    queue = queue_name()
    assert poll(gw, queue, wait_s=0).status_code == 204
    enq = requests.post(
        f"{gw.url}/v1/namespaces/dev/queues/{queue}/jobs",
        json={"payloadInline": base64.b64encode(msgpack.packb(1)).decode()},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert enq.status_code == 201, enq.text
    pending = requests.get(
        f"{gw.url}/v1/namespaces/dev/jobs/{enq.json()['job_id']}/result",
        params={"wait": 0},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert pending.status_code == 202, pending.text


# --- auth through the gateway ---------------------------------------------------------------------


def test_no_token_is_401(local_gateway):
    resp = requests.get(f"{local_gateway.url}/v1/namespaces/dev/jobs/anything", timeout=TIMEOUT)
    assert resp.status_code == 401
    assert resp.json() == {"message": "Unauthorized"}


@pytest.mark.parametrize(
    "header", ["Bearer pst_not-a-real-token", "Bearer ", "Basic dXNlcjpwYXNz", "pst_x"]
)
def test_bad_token_is_401(local_gateway, header):
    resp = requests.get(
        f"{local_gateway.url}/v1/config", headers={"Authorization": header}, timeout=TIMEOUT
    )
    assert resp.status_code == 401, resp.text


def test_token_of_another_namespace_is_403(local_gateway):
    gw = local_gateway
    # Given the dev client token used on the sandbox namespace
    resp = requests.post(
        f"{gw.url}/v1/namespaces/sandbox/queues/q/jobs",
        json={"payloadInline": base64.b64encode(b"x").decode()},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert resp.status_code == 403, resp.text
    # And the sandbox daemon polling the dev namespace
    resp = requests.post(
        f"{gw.url}/v1/daemon/poll",
        headers=gw.auth("sandbox", "daemon"),
        timeout=TIMEOUT,
        json={"namespace": "dev", "queues": ["q"], "wait_s": 0, "daemon_id": "d"},
    )
    assert resp.status_code == 403, resp.text


def test_client_token_on_daemon_routes_and_daemon_token_on_enqueue_are_403(local_gateway):
    gw = local_gateway
    resp = requests.post(
        f"{gw.url}/v1/daemon/poll",
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
        json={"namespace": "dev", "queues": ["q"], "wait_s": 0, "daemon_id": "d"},
    )
    assert resp.status_code == 403, resp.text
    resp = requests.post(
        f"{gw.url}/v1/namespaces/dev/jobs/someid/result",
        json={"resultInline": "", "lease": "x"},
        headers=gw.auth("dev", "client"),
        timeout=TIMEOUT,
    )
    assert resp.status_code == 403, resp.text
    resp = requests.post(
        f"{gw.url}/v1/namespaces/dev/queues/q/jobs",
        json={"payloadInline": base64.b64encode(b"x").decode()},
        headers=gw.auth("dev", "daemon"),
        timeout=TIMEOUT,
    )
    assert resp.status_code == 403, resp.text


def test_revoked_token_is_refused_at_once(local_gateway, ssm_client):
    from payloadstore_controlplane.store.tokens import TokenStore

    gw = local_gateway
    store = TokenStore(ssm_client, gw.token_path)
    # Given a freshly minted token that works
    token, _ = store.mint("dev", "client")
    auth = {"Authorization": f"Bearer {token}"}
    assert requests.get(f"{gw.url}/v1/config", headers=auth, timeout=TIMEOUT).status_code == 200
    # When it is revoked
    assert store.revoke(token) == 1
    # Then the next call is refused (token cache 0 and authorizer cache 0 in this gateway)
    assert requests.get(f"{gw.url}/v1/config", headers=auth, timeout=TIMEOUT).status_code == 401


@pytest.mark.parametrize(
    "route", [r for r in ROUTES if r.roles is not None], ids=lambda r: f"{r.method} {r.path}"
)
def test_every_protected_route_wants_a_token(local_gateway, route):
    path = route.path.replace("{ns}", "dev").replace("{queue}", "q").replace("{job_id}", "j")
    resp = requests.request(route.method, f"{local_gateway.url}{path}", timeout=TIMEOUT)
    assert resp.status_code == 401, resp.text


def test_a_cached_authorization_still_works_across_routes(start_local_gateway):
    # Given a gateway caching authorizer results like the deployed API (300 s there)
    gw = start_local_gateway(authorizer_cache_s=300)
    auth = gw.auth("dev", "client")
    # When one token calls several routes within the cache lifetime
    statuses = [
        requests.get(f"{gw.url}/v1/config", headers=auth, timeout=TIMEOUT).status_code,
        requests.get(
            f"{gw.url}/v1/namespaces/dev/jobs/nope", headers=auth, timeout=TIMEOUT
        ).status_code,
        requests.post(
            f"{gw.url}/v1/namespaces/dev/payloads/presign",
            params={"op": "put", "size": 10, "sha256": "ab" * 32},
            headers=auth,
            timeout=TIMEOUT,
        ).status_code,
    ]
    # Then none is refused by a policy cached for another route
    assert statuses == [200, 404, 200]
