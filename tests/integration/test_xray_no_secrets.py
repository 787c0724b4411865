"""No trace segment carries a token, a presigned URL or payload bytes (issue 21, defect 6).

The handlers run as a deployed function runs them: tracing on, in the X-Ray SDK's Lambda mode
(LAMBDA_TASK_ROOT set, so the SDK hangs subsegments under a facade segment built from
_X_AMZN_TRACE_ID and streams each one to the daemon as it closes). The "daemon" is a UDP socket
of this test on 127.0.0.1. The functions run in a fresh interpreter: the tracer is chosen when
`payloadstore_controlplane.observability` is imported, and the X-Ray SDK patches botocore, requests and
http.client for good, which no other test of this session should inherit.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"

# Runs in the fresh interpreter: the real lambda_handlers, called with API Gateway events (the
# ControlPlane helper), against this session's redis-server and moto. Writes what must never
# reach a trace to argv[1].
DRIVER = r"""
import base64, json, sys
from urllib.parse import parse_qs, urlsplit

from tests.support.control_plane import ControlPlane, put_presigned, sha256_hex
from tests.support.events import FakeLambdaContext
from payloadstore_controlplane.handlers import admin
from payloadstore_controlplane.observability import tracer

assert not getattr(tracer, "disabled", False), "tracing is off: the test would prove nothing"
calls = 0
secrets_out = {"token": [], "url": [], "payload": []}


def urls_of(reply):
    for url in _urls(reply.json):
        secrets_out["url"].append(url)


def _urls(value):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "url" and isinstance(v, str):
                yield v
            else:
                yield from _urls(v)
    elif isinstance(value, list):
        for v in value:
            yield from _urls(v)


def call(reply, status):
    global calls
    calls += 1
    assert reply.status == status, (reply.status, reply.raw_body)
    urls_of(reply)
    return reply.json


# The admin function: the plain token is in its answer.
calls += 1
minted = admin.lambda_handler(
    {"action": "mint", "namespace": "xray-ns", "role": "daemon"}, FakeLambdaContext()
)
assert minted["token"].startswith("pst_"), minted
secrets_out["token"].append(minted["token"])

# The authorizer: the token in the event, an Allow answer; an unknown token raises Unauthorized
# (the error path: no error body either).
from payloadstore_controlplane.handlers import authorizer
from tests.support.events import load_event

def authorize(token):
    global calls
    calls += 1
    event = load_event("authorizer_request")
    event["headers"] = {"Authorization": f"Bearer {token}"}
    return authorizer.lambda_handler(event, FakeLambdaContext())

assert authorize(minted["token"])["context"]["namespace"] == "xray-ns"
unknown = "pst_" + "x" * 8 + sys.argv[2] * 3
secrets_out["token"].append(unknown)
try:
    authorize(unknown)
    raise AssertionError("an unknown token was allowed")
except Exception as e:
    assert str(e) == "Unauthorized", e

cp = ControlPlane("xray" + sys.argv[2])
args_bytes = b"S3-ARGS-" + sys.argv[2].encode() * 8
inline_bytes = b"INLINE-ARGS-" + sys.argv[2].encode() * 4
inline_result = b"INLINE-RESULT-" + sys.argv[2].encode() * 4
s3_result = b"S3-RESULT-" + sys.argv[2].encode() * 8
secrets_out["payload"] += [inline_bytes.decode(), inline_result.decode()]

# presign put (args), upload, enqueue the S3 job
put = call(cp.presign_put(len(args_bytes), sha256=sha256_hex(args_bytes)), 200)
assert put_presigned(put, args_bytes).status_code == 200
ref = {"kind": "s3", "bucket": put["bucket"], "key": put["key"], "size": len(args_bytes),
       "sha256": sha256_hex(args_bytes), "contentType": "application/msgpack"}
s3_job = call(cp.enqueue(ref=ref), 201)["job_id"]
# enqueue inline (JSON, base64)
inline_job = call(cp.enqueue(inline=inline_bytes), 201)["job_id"]
# presign get of the args key
call(cp.presign_get(put["key"]), 200)
# poll: the S3 job (with its download URL), then the inline job (its bytes inline)
got = call(cp.poll(), 200)
assert got["job_id"] == s3_job and got.get("download"), got
got = call(cp.poll(), 200)
assert got["job_id"] == inline_job and got.get("payloadInline"), got
# result post: an S3 result (presign put kind=result, upload, post) and an inline result
rput = call(cp.presign_put(len(s3_result), role="daemon", job_id=s3_job,
                           sha256=sha256_hex(s3_result)), 200)
assert put_presigned(rput, s3_result).status_code == 200
rref = {"kind": "s3", "bucket": rput["bucket"], "key": rput["key"], "size": len(s3_result),
        "sha256": sha256_hex(s3_result), "contentType": "application/msgpack"}
call(cp.post_result(s3_job, {"resultRef": rref}), 204)
call(cp.post_result(inline_job, {"resultInline": base64.b64encode(inline_result).decode()}), 204)
# result get: the S3 result's download URL, the inline result's bytes
assert call(cp.result(s3_job), 200).get("download")
assert call(cp.result(inline_job), 200).get("resultInline")

assert len(secrets_out["url"]) >= 5, secrets_out["url"]
json.dump({"calls": calls, "jobs": [s3_job, inline_job], **secrets_out}, open(sys.argv[1], "w"))
"""


class UdpDaemon:
    """A stand-in X-Ray daemon: every datagram sent to 127.0.0.1:<port>, kept as bytes."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.datagrams: list[bytes] = []
        self.last_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.datagrams.append(data)
            self.last_at = time.monotonic()

    def drain(self, quiet_s: float = 0.5, max_s: float = 5.0) -> list[bytes]:
        """Stop once nothing has arrived for quiet_s (or after max_s)."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline and time.monotonic() - self.last_at < quiet_s:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return list(self.datagrams)


def documents(datagrams: list[bytes]) -> list[dict]:
    """The segment documents: each datagram is a JSON header line, a newline, the document."""
    out = []
    for data in datagrams:
        header, _, body = data.partition(b"\n")
        assert json.loads(header) == {"format": "json", "version": 1}, header
        out.append(json.loads(body))
    return out


def walk(doc: dict):
    yield doc
    for sub in doc.get("subsegments") or []:
        yield from walk(sub)


def forbidden_strings(found: dict) -> dict[str, str]:
    """label -> text that must not appear in any datagram."""
    import base64

    out: dict[str, str] = {}
    for i, token in enumerate(found["token"]):
        out[f"token[{i}]"] = token
    for i, url in enumerate(found["url"]):
        out[f"url[{i}]"] = url
        (signature,) = parse_qs(urlsplit(url).query)["X-Amz-Signature"]
        out[f"url[{i}] X-Amz-Signature"] = signature
    for i, text in enumerate(found["payload"]):
        out[f"payload[{i}] raw"] = text
        out[f"payload[{i}] base64"] = base64.b64encode(text.encode()).decode()
    return out


def test_no_trace_segment_carries_a_token_url_or_payload(cp_env, tmp_path):
    # Given a stand-in X-Ray daemon and the functions' environment with tracing on, in Lambda mode
    daemon = UdpDaemon()
    marker = secrets.token_hex(6)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE",  # the code alone must keep responses out
            "POWERTOOLS_TRACER_CAPTURE_ERROR",
            "AWS_XRAY_SDK_ENABLED",
            "AWS_SAM_LOCAL",
            "CHALICE_LOCAL",
        )
    }
    env.update(
        POWERTOOLS_TRACE_DISABLED="false",
        POWERTOOLS_METRICS_DISABLED="true",
        AWS_LAMBDA_FUNCTION_NAME="payloadstore-xray-test",
        LAMBDA_TASK_ROOT=str(FUNCTIONS),
        _X_AMZN_TRACE_ID=(
            f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};"
            f"Parent={secrets.token_hex(8)};Sampled=1"
        ),
        AWS_XRAY_DAEMON_ADDRESS=daemon.address,
        PYTHONPATH=os.pathsep.join([str(FUNCTIONS), str(ROOT)]),
    )
    found_path = tmp_path / "found.json"

    # When the admin mint, the authorizer (allow and deny), presign put/get, enqueue (S3 and
    # inline), poll, result post and result get handlers run there
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(found_path), marker],
        check=False,
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(found_path.read_text())
    datagrams = daemon.drain()

    # Then the daemon received a subsegment for every invocation, with the job annotations the
    # handlers put (so the listener really hears what the functions send)
    docs = documents(datagrams)
    entities = [e for d in docs for e in walk(d)]
    handler_subsegments = [e for e in entities if e.get("name") == "## lambda_handler"]
    assert len(handler_subsegments) >= found["calls"], (len(handler_subsegments), found["calls"])
    annotated = {e.get("annotations", {}).get("job_id") for e in handler_subsegments}
    assert set(found["jobs"]) <= annotated, annotated
    # And no datagram holds the token, any presigned URL or its signature, or the inline bytes
    leaks = sorted(
        label
        for label, text in forbidden_strings(found).items()
        if any(text.encode() in data for data in datagrams)
    )
    assert leaks == [], f"secrets in X-Ray datagrams: {leaks}"
    # And no subsegment carries a handler's response or error as metadata
    captured = sorted(
        key
        for e in entities
        for ns in (e.get("metadata") or {}).values()
        for key in ns
        if key.endswith((" response", " error"))
    )
    assert captured == [], captured
