"""The integration tests' view of the control plane: the real lambda_handlers called with API
Gateway events (`ControlPlane`), and uploads through the presigned URLs they hand out.

The fixtures that build these (`cp`, `other_cp`, `cp_env`, ...) are in
tests/integration/conftest.py; tests import the helpers from here.
"""

from __future__ import annotations

import base64
import importlib
import json
import uuid
from dataclasses import dataclass

from payloadstore_controlplane.store.sigv4 import invocation_running_as
from payloadstore_devstack.s3_credentials import function_credentials
from tests.support.events import FakeLambdaContext, api_event

TOKEN_PATH = "/payloadstore-test/tokens"


@dataclass
class Reply:
    status: int
    headers: dict
    raw_body: str
    # The whole proxy answer as the Lambda runtime serializes it (json.dumps): what Lambda's
    # 6 MB response limit counts.
    proxy_bytes: int = 0

    @property
    def json(self):
        return json.loads(self.raw_body) if self.raw_body else None

    @property
    def error(self) -> dict:
        return (self.json or {}).get("error", {})


ZEROS = object()


class ControlPlane:
    """One namespace's view of the control plane, speaking events to the handlers."""

    def __init__(self, namespace: str, policy=None):
        self.ns = namespace
        # The namespace's policy (models.policy.NamespacePolicy) as the authorizer would pass
        # it in the context; None: no policy fields (the defaults).
        self.policy = policy
        self.queue = "q" + uuid.uuid4().hex[:8]
        # The lease of each job's latest delivery seen by poll(): post_result() and report()
        # send it unless the body names one, as the holder of the delivery would.
        self.leases: dict[str, str] = {}

    def call(
        self,
        function: str,
        method: str,
        resource: str,
        path_params=None,
        *,
        role="client",
        namespace: str | None = "",
        context: FakeLambdaContext | None = None,
        request_time_ms: int | None = None,
        **kw,
    ) -> Reply:
        """namespace: "" = this namespace's token, None = no authorizer context at all.
        context: the Lambda context (its remaining time); request_time_ms: when API Gateway
        received the request (requestContext.requestTimeEpoch)."""
        module = importlib.import_module(f"payloadstore_controlplane.handlers.{function}")
        ns = self.ns if namespace == "" else namespace
        extra = self.policy.to_context() if self.policy is not None else None
        event = api_event(
            method, resource, path_params, namespace=ns, role=role, authorizer_extra=extra, **kw
        )
        if request_time_ms is not None:
            event["requestContext"]["requestTimeEpoch"] = request_time_ms
        # As the function would run: S3 calls signed with its own local keys, which the
        # emulator holds to that function's grants (payloadstore_controlplane/grants.py).
        with invocation_running_as(function_credentials(function)):
            out = module.lambda_handler(event, context or FakeLambdaContext())
        body = out.get("body") or ""
        if out.get("isBase64Encoded"):
            body = base64.b64decode(body).decode()
        headers = dict(out.get("headers") or {})
        headers.update({k: v[-1] for k, v in (out.get("multiValueHeaders") or {}).items() if v})
        return Reply(out["statusCode"], headers, body, len(json.dumps(out)))

    # -- routes -------------------------------------------------------------------------
    def presign_put(
        self,
        size,
        *,
        role="client",
        kind=None,
        job_id=None,
        sha256=ZEROS,
        content_type=None,
        namespace=None,
        lease=None,
    ) -> Reply:
        """sha256: ZEROS (the default) = the sha256 of `size` zero bytes (for tests that never
        upload, or upload other bytes on purpose); None = send none."""
        if sha256 is ZEROS:
            sha256 = sha256_hex(b"\0" * size) if 0 < size <= 2**20 else "0" * 64
        body = {
            k: v
            for k, v in {
                "kind": kind,
                "job_id": job_id,
                "sha256": sha256,
                "content_type": content_type,
                "lease": lease,
            }.items()
            if v is not None
        }
        if kind is None:
            body["kind"] = "result" if role == "daemon" else "args"
        if body["kind"] == "result" and lease is None:
            # A result is presigned by the holder of the job's latest delivery, with its lease.
            body = self._with_lease(job_id, body)
        return self.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/presign",
            {"ns": namespace or self.ns},
            role=role,
            query={"op": "put", "size": str(size)},
            body=body,
        )

    def presign_get(self, key, *, role="daemon") -> Reply:
        return self.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/presign",
            {"ns": self.ns},
            role=role,
            query={"op": "get", "key": key},
        )

    def enqueue(
        self,
        *,
        ref=None,
        inline: bytes | None = None,
        raw: bytes | None = None,
        queue=None,
        headers=None,
        body=None,
    ) -> Reply:
        params = {"ns": self.ns, "queue": queue or self.queue}
        resource = "/v1/namespaces/{ns}/queues/{queue}/jobs"
        if raw is not None:
            return self.call(
                "jobs",
                "POST",
                resource,
                params,
                body=raw,
                headers={"Content-Type": "application/msgpack", **(headers or {})},
            )
        if body is None:
            body = {}
            if ref is not None:
                body["payloadRef"] = ref
            if inline is not None:
                body["payloadInline"] = base64.b64encode(inline).decode()
        return self.call("jobs", "POST", resource, params, body=body, headers=headers)

    def status(self, job_id, role="client") -> Reply:
        return self.call(
            "jobs",
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}",
            {"ns": self.ns, "job_id": job_id},
            role=role,
        )

    def result(self, job_id, wait=None) -> Reply:
        return self.call(
            "jobs",
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": self.ns, "job_id": job_id},
            query={"wait": str(wait)} if wait is not None else None,
        )

    def poll(self, queues=None, wait_s=0, daemon_id="d1") -> Reply:
        reply = self._poll(queues, wait_s, daemon_id)
        if reply.status == 200 and reply.json.get("lease"):
            self.leases[reply.json["job_id"]] = reply.json["lease"]
        return reply

    def _with_lease(self, job_id, body):
        if isinstance(body, dict) and "lease" not in body and job_id in self.leases:
            return {**body, "lease": self.leases[job_id]}
        return body

    def _poll(self, queues, wait_s, daemon_id) -> Reply:
        return self.call(
            "daemon",
            "POST",
            "/v1/daemon/poll",
            role="daemon",
            body={
                "namespace": self.ns,
                "queues": queues or [self.queue],
                "wait_s": wait_s,
                "daemon_id": daemon_id,
            },
        )

    def post_result(self, job_id, body) -> Reply:
        body = self._with_lease(job_id, body)
        return self.call(
            "daemon",
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": self.ns, "job_id": job_id},
            role="daemon",
            body=body,
        )

    def blob(self, sha256: str, size: int, *, role="client", namespace=None) -> Reply:
        return self.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/blobs",
            {"ns": namespace or self.ns},
            role=role,
            body={"sha256": sha256, "size": size},
        )

    def report(self, job_id, body) -> Reply:
        body = self._with_lease(job_id, body)
        return self.call(
            "daemon",
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/failure",
            {"ns": self.ns, "job_id": job_id},
            role="daemon",
            body=body,
        )


def sha256_hex(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def put_presigned(presign: dict, data: bytes):
    """Upload as a client would: exactly the headers the CP returned, over real HTTP."""
    import requests

    return requests.put(presign["url"], data=data, headers=presign["headers"], timeout=30)


def create_blob(cp: ControlPlane, data: bytes, *, role="client") -> str:
    """POST .../blobs, PUT the bytes if asked to, POST again: the blob's sha256 (verified)."""
    sha = sha256_hex(data)
    first = cp.blob(sha, len(data), role=role)
    assert first.status == 200, first.raw_body
    if not first.json["exists"]:
        up = put_presigned(first.json["upload"], data)
        assert up.status_code == 200, up.text
        again = cp.blob(sha, len(data), role=role)
        assert again.status == 200 and again.json["exists"] is True, again.raw_body
    return sha


def upload(
    cp: ControlPlane, data: bytes, *, with_sha: bool = True, role="client", job_id=None
) -> dict:
    """Presign, PUT, and return the payloadRef to enqueue (or resultRef to post)."""
    sha = sha256_hex(data) if with_sha else None
    r = cp.presign_put(len(data), sha256=sha, role=role, job_id=job_id)
    assert r.status == 200, r.raw_body
    up = put_presigned(r.json, data)
    assert up.status_code == 200, up.text
    ref = {
        "kind": "s3",
        "bucket": r.json["bucket"],
        "key": r.json["key"],
        "size": len(data),
        "contentType": "application/msgpack",
    }
    if sha:
        ref["sha256"] = sha
    return ref


def heartbeat(cp: ControlPlane, job_id: str, body: dict) -> Reply:
    """POST …/jobs/{job_id}/heartbeat exactly as given (a daemon keeping its lease alive)."""
    return cp.call(
        "daemon",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/heartbeat",
        {"ns": cp.ns, "job_id": job_id},
        role="daemon",
        body=body,
    )


def leases(
    cp: ControlPlane, daemon_id: str, held: dict[str, str], wait_s: float = 0.0, **kw
) -> Reply:
    """POST /v1/daemon/leases: renew `held` (job id -> lease), then wait up to `wait_s` for a
    cancel of one of the daemon's jobs."""
    body = {
        "namespace": cp.ns,
        "daemon_id": daemon_id,
        "leases": [{"job_id": j, "lease": lease} for j, lease in held.items()],
        "wait_s": wait_s,
    }
    return cp.call("daemon", "POST", "/v1/daemon/leases", None, role="daemon", body=body, **kw)


def cancel(cp: ControlPlane, job_id: str, role: str = "client") -> Reply:
    """DELETE …/jobs/{job_id} (a client cancelling its job)."""
    return cp.call(
        "jobs",
        "DELETE",
        "/v1/namespaces/{ns}/jobs/{job_id}",
        {"ns": cp.ns, "job_id": job_id},
        role=role,
    )
