"""An in-memory stand-in for the control plane and S3, served through `httpx.MockTransport`.

Narrow on purpose: it speaks the v1 wire as the SDK sees it so unit tests can inject failures
(5xx, 429, dropped connections, expired URLs, corrupt objects) one request at a time. The real
handlers, Redis and S3 over HTTP are exercised by tests/e2e.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

CP = "http://cp.test"
S3 = "http://s3.test"
BUCKET = "fake-bucket"


@dataclass
class FakeWorld:
    inline_threshold: int = 1024
    max_payload_bytes: int = 1 << 20
    healthy: bool = True
    health_checks: dict = field(
        default_factory=lambda: {
            "redis": {"ok": True, "detail": "PONG"},
            "bucket": {"ok": True, "detail": "reachable"},
        }
    )
    objects: dict[str, bytes] = field(default_factory=dict)
    issued: dict[str, dict] = field(default_factory=dict)  # key -> issue record
    jobs: dict[str, dict] = field(default_factory=dict)
    queue: deque = field(default_factory=deque)
    idempotency: dict[str, str] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    # (method, path-suffix or host) -> list of injected responses/exceptions, consumed in order
    inject: dict[tuple[str, str], list] = field(default_factory=lambda: defaultdict(list))
    expired_urls: set[str] = field(default_factory=set)
    counter: int = 0
    # Poll and result answers carry `download: {url, expires_at}` beside an S3 reference.
    hand_out_downloads: bool = False
    download_expires_at: str = "2099-01-01T00:00:00Z"
    # Polls take `max_jobs` (a control plane before it answers 422 to the unknown field).
    takes_max_jobs: bool = True
    # Result posts and failure reports take `next` (issue 34): "yes"; "refuse": 422 to the
    # unknown field, nothing stored; "ignore": stored, 204 (a control plane that drops it).
    takes_next: str = "yes"

    def new_job_id(self) -> str:
        self.counter += 1
        return f"JOB{self.counter:04d}"

    # -- helpers for tests ---------------------------------------------------------------

    def calls(self, method: str, fragment: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and fragment in str(r.url)]

    def fail(self, method: str, fragment: str, *responses) -> None:
        self.inject[(method, fragment)].extend(responses)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        self.requests.append(request)
        self.bodies.append(body)
        for (method, fragment), queue in self.inject.items():
            if queue and request.method == method and fragment in str(request.url):
                injected = queue.pop(0)
                if isinstance(injected, Exception):
                    raise injected
                if callable(injected):
                    injected = injected(request)
                if injected is not None:
                    return injected
        if request.url.host == "s3.test":
            return self._s3(request, body)
        return self._cp(request, body)

    def _s3(self, request: httpx.Request, body: bytes) -> httpx.Response:
        key = request.url.path.split(f"/{BUCKET}/", 1)[1]
        if str(request.url) in self.expired_urls:
            return httpx.Response(
                403,
                text="<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
            )
        if request.method == "PUT":
            issue = self.issued[key]
            assert int(request.headers["content-length"]) == issue["size"] == len(body)
            assert request.headers["content-type"] == "application/msgpack"
            assert "authorization" not in request.headers
            digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
            if request.headers.get("x-amz-checksum-sha256") != digest:
                return httpx.Response(
                    400, text="<Error><Code>BadDigest</Code><Message>checksum</Message></Error>"
                )
            self.objects[key] = body
            return httpx.Response(200)
        if key not in self.objects:
            return httpx.Response(
                404, text="<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>"
            )
        return httpx.Response(200, content=self.objects[key])

    def _deliver(self) -> dict:
        job_id = self.queue.popleft()
        job = self.jobs[job_id]
        job["state"] = "running"
        message = {"job_id": job_id, "namespace": "ns", "queue": job["queue"], "attempt": 1}
        message.update(job["payload"])
        self._add_download(message, message.get("payloadRef"))
        return message

    def _cp(self, request: httpx.Request, body: bytes) -> httpx.Response:
        path = request.url.path
        if path in ("/v1/health", "/v1/health/details"):
            status = 200 if self.healthy else 503
            return httpx.Response(
                status,
                json={"status": "ok" if self.healthy else "failing", "checks": self.health_checks},
            )
        if request.headers.get("authorization") != "Bearer pst_good":
            return httpx.Response(
                401, json={"error": {"code": "unauthorized", "message": "unknown token"}}
            )
        if path == "/v1/config":
            return httpx.Response(
                200,
                json={
                    "inline_threshold": self.inline_threshold,
                    "max_payload_bytes": self.max_payload_bytes,
                    "presign_ttl_s": 900,
                    "result_ttl_s": 172800,
                    "max_presigns_per_job": 5,
                },
            )
        if path.endswith("/payloads/presign"):
            return self._presign(json.loads(body))
        if path.endswith("/jobs") and request.method == "POST":
            return self._enqueue(request, body)
        if path == "/v1/daemon/poll":
            max_jobs = json.loads(body).get("max_jobs")
            if max_jobs is not None and not self.takes_max_jobs:
                return httpx.Response(
                    422,
                    json={
                        "error": {
                            "code": "invalid_request",
                            "message": "max_jobs: Extra inputs are not permitted",
                        }
                    },
                )
            if not self.queue:
                return httpx.Response(204)
            messages = [self._deliver() for _ in range(min(max_jobs or 1, len(self.queue)))]
            if max_jobs is None:
                return httpx.Response(200, json=messages[0])
            return httpx.Response(200, json={"jobs": messages})
        parts = path.split("/")
        if len(parts) >= 6 and parts[4] == "jobs":
            job_id = parts[5]
            job = self.jobs.get(job_id)
            if job is None:
                return httpx.Response(
                    404, json={"error": {"code": "not_found", "message": f"no job {job_id}"}}
                )
            if request.method == "POST" and path.endswith(("/result", "/failure")):
                post = json.loads(body)
                nxt = post.pop("next", None)
                if nxt is not None and self.takes_next == "refuse":
                    message = "next: Extra inputs are not permitted"
                    error = {"error": {"code": "invalid_request", "message": message}}
                    return httpx.Response(422, json=error)
                if path.endswith("/result"):
                    job["result"] = post
                    if "resultRef" in post:
                        post["resultRef"] = self._issued_ref(post["resultRef"]["key"])
                    job["state"] = "failed" if "error" in post else "succeeded"
                else:
                    job["failure"] = post
                    job["state"] = post["state"]
                if nxt is None or self.takes_next == "ignore":
                    return httpx.Response(204)
                taken = min(nxt.get("max_jobs", 1), len(self.queue))
                return httpx.Response(200, json={"jobs": [self._deliver() for _ in range(taken)]})
            if path.endswith("/result"):
                if "result" not in job and job["state"] not in ("payload_corrupt", "payload_lost"):
                    return httpx.Response(202, json={"job_id": job_id, "state": job["state"]})
                out = {"job_id": job_id, "state": job["state"]}
                out.update(job.get("result") or {})
                self._add_download(out, out.get("resultRef"))
                if "failure" in job:
                    out["error"] = {"type": job["state"], "message": job["failure"]["detail"]}
                return httpx.Response(200, json=out)
            return httpx.Response(
                200,
                json={
                    "job_id": job_id,
                    "queue": job["queue"],
                    "state": job["state"],
                    "attempts": 1,
                    "tier": job["tier"],
                },
            )
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})

    def _add_download(self, answer: dict, ref: dict | None) -> None:
        if self.hand_out_downloads and ref:
            answer["download"] = {
                "url": f"{S3}/{BUCKET}/{ref['key']}?sig=handed{time.monotonic_ns()}",
                "expires_at": self.download_expires_at,
            }

    def _issued_ref(self, key: str) -> dict:
        """A reference as the server answers it: rebuilt from what it issued for the key (an
        enqueue or a result post sends only bucket, key and size)."""
        issue = self.issued[key]
        return {
            "kind": "s3",
            "bucket": BUCKET,
            "key": key,
            "size": issue["size"],
            "contentType": "application/msgpack",
            "sha256": issue["sha256"],
        }

    def _presign(self, req: dict) -> httpx.Response:
        # The server's defaults, for what a request leaves out.
        req = {"kind": "args", "content_type": "application/msgpack", **req}
        if req["op"] == "get":
            if req["key"] not in self.issued:
                return httpx.Response(
                    404, json={"error": {"code": "not_found", "message": "key not issued"}}
                )
            return httpx.Response(
                200,
                json={
                    "url": f"{S3}/{BUCKET}/{req['key']}?sig=get{time.monotonic_ns()}",
                    "method": "GET",
                    "expires_at": "2099-01-01T00:00:00Z",
                },
            )
        if req["size"] > self.max_payload_bytes:
            return httpx.Response(
                413, json={"error": {"code": "payload_too_large", "message": "over the cap"}}
            )
        job_id = req.get("job_id") or self.new_job_id()
        key = f"payloads/2026/01/01/{job_id}/{req['kind']}"
        issue = self.issued.setdefault(
            key, {"size": req["size"], "sha256": req["sha256"], "presigns": 0, "job_id": job_id}
        )
        issue["presigns"] += 1
        if issue["presigns"] > 5:
            return httpx.Response(
                429, json={"error": {"code": "too_many_presigns", "message": "cap"}}
            )
        checksum = base64.b64encode(bytes.fromhex(req["sha256"])).decode()
        return httpx.Response(
            200,
            json={
                "url": f"{S3}/{BUCKET}/{key}?sig={issue['presigns']}",
                "method": "PUT",
                "headers": {
                    "content-length": str(req["size"]),
                    "content-type": req["content_type"],
                    "x-amz-checksum-sha256": checksum,
                    "x-amz-sdk-checksum-algorithm": "SHA256",
                },
                "bucket": BUCKET,
                "key": key,
                "job_id": job_id,
                "expires_at": "2099-01-01T00:00:00Z",
            },
        )

    def _enqueue(self, request: httpx.Request, body: bytes) -> httpx.Response:
        queue = request.url.path.split("/")[5]
        if request.headers.get("content-type") == "application/msgpack":
            if len(body) > self.inline_threshold:
                return httpx.Response(
                    413, json={"error": {"code": "payload_too_large", "message": "inline cap"}}
                )
            idem = request.headers.get("idempotency-key")
            if idem in self.idempotency:
                return httpx.Response(
                    200, json={"job_id": self.idempotency[idem], "tier": "inline"}
                )
            job_id = self.new_job_id()
            if idem:
                self.idempotency[idem] = job_id
            payload = {"payloadInline": base64.b64encode(body).decode()}
            tier = "inline"
        else:
            ref = json.loads(body)["payloadRef"]
            issue = self.issued.get(ref["key"])
            if issue is None or ref["key"] not in self.objects:
                return httpx.Response(
                    409, json={"error": {"code": "conflict", "message": "not uploaded"}}
                )
            job_id = issue["job_id"]
            if job_id in self.jobs:
                return httpx.Response(200, json={"job_id": job_id, "tier": "s3"})
            payload = {"payloadRef": self._issued_ref(ref["key"])}
            tier = "s3"
        self.jobs[job_id] = {"queue": queue, "state": "queued", "tier": tier, "payload": payload}
        self.queue.append(job_id)
        return httpx.Response(201, json={"job_id": job_id, "tier": tier})


def make_client(world: FakeWorld, sleeps: list | None = None, **kwargs):
    from payloadstore import Client

    transport = world.transport()
    recorded = sleeps if sleeps is not None else []
    return Client(
        CP,
        "pst_good",
        "ns",
        http=httpx.Client(transport=transport),
        s3_http=httpx.Client(transport=transport),
        sleep=recorded.append,
        **kwargs,
    )


def response(status: int, **kw) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, **kw)
