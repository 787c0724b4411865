"""The dashboard's server over real HTTP on a loopback port, its client talking to a control
plane stand-in (httpx.MockTransport): cross-site refusals, bad input, and the token kept in.

The browser test (tests/e2e/test_dashboard_browser.py) runs the page against the local stack.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgpack
import pytest

from payloadstore import Client
from payloadstore._top import format_age
from payloadstore.dashboard import CSRF_HEADER, ClientBackend, Dashboard
from payloadstore.dashboard.backend import without_urls
from tests.support.dashboard import post, request

TOKEN = "pst_dashboard-secret-token-0123456789"
JOB = "01JD0000000000000000000000"
OTHER_JOB = "01JD0000000000000000000001"
STATIC = Path(__file__).resolve().parents[2] / "payloadstore" / "dashboard" / "static"


CONFIG = {
    "inline_threshold": 262144,
    "max_payload_bytes": 104857600,
    "presign_ttl_s": 900,
    "policy": {"retention": "7d", "kms_key": "stack", "inline": "never"},
}
ARGS = msgpack.packb({"args": [21, "<script>x</script>"], "kwargs": {}})
# Not msgpack a preview can read: the preview says so, the download still gives the bytes.
S3_RESULT = b"\xc1 not msgpack"
S3_URL = "https://s3.example/payloads/r?X-Amz-Signature=secret-signature"
PAYLOADS = {
    "job_id": JOB,
    "queue": "q",
    "state": "succeeded",
    "args": {"tier": "inline", "inline": base64.b64encode(ARGS).decode(), "size": len(ARGS)},
    "result": {
        "tier": "s3",
        "size": len(S3_RESULT),
        "ref": {"kind": "s3", "bucket": "b", "key": "payloads/r", "size": len(S3_RESULT)},
        "download": {"url": S3_URL, "expires_at": "2030-01-01T00:00:00Z"},
    },
}


@dataclass
class ControlPlane:
    """Answers the routes the dashboard calls, and records what it was asked."""

    calls: list[tuple[str, str, dict]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "s3.example":
            # A presigned GET: the URL is the grant; the token must never travel to S3.
            assert "Authorization" not in request.headers
        else:
            assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        body = json.loads(request.content) if request.content else {}
        path = request.url.path
        self.calls.append((request.method, path, dict(request.url.params) or body))
        base = "/v1/namespaces/dev"
        if path == f"{base}/queues":
            return httpx.Response(
                200,
                json={
                    "queues": [
                        {
                            "name": "q",
                            "queued": 2,
                            "in_flight": 1,
                            "oldest_queued_age_s": 9.5,
                            "failed": 3,
                        }
                    ]
                },
            )
        if path == "/v1/config":
            return httpx.Response(200, json=CONFIG)
        if path == f"{base}/throughput":
            queue = request.url.params.get("queue")
            return httpx.Response(
                200,
                json={
                    "queue": queue,
                    "start": 1_700_000_000,
                    "bucket_s": 60,
                    "succeeded": [0] * 58 + [4, 2],
                    "failed": [0] * 59 + [1],
                },
            )
        if path == f"{base}/jobs/{JOB}/payloads":
            return httpx.Response(200, json=PAYLOADS)
        if request.url.host == "s3.example":
            return httpx.Response(200, content=S3_RESULT)
        if path == f"{base}/queues/q/jobs":
            more = "next-page" if request.url.params.get("cursor") else None
            return httpx.Response(200, json={"jobs": [self.status(JOB)], "next_cursor": more})
        if path == f"{base}/jobs/{JOB}" and request.method == "GET":
            return httpx.Response(200, json=self.status(JOB))
        if path == f"{base}/jobs/{JOB}/retry":
            return httpx.Response(
                200, json={"job_id": JOB, "state": "queued", "attempt": 2, "retries": 1}
            )
        if path == f"{base}/jobs/{OTHER_JOB}/retry":
            return httpx.Response(
                409,
                json={
                    "error": {
                        "code": "not_retryable",
                        "message": "job succeeded: nothing to retry",
                        "reason": "succeeded",
                    }
                },
            )
        if path == f"{base}/queues/q/purge":
            return httpx.Response(200, json={"cancelled": 2, "remaining": 0})
        if path == f"{base}/queues/q/redrive":
            return httpx.Response(200, json={"retried": 1, "skipped": 0})
        if path == f"{base}/jobs/{OTHER_JOB}":
            # An error whose text quotes the token: it must still never reach the browser.
            return httpx.Response(
                500, json={"error": {"code": "internal_error", "message": f"bad token {TOKEN}"}}
            )
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no such job"}})

    @staticmethod
    def status(job_id: str) -> dict:
        return {
            "job_id": job_id,
            "queue": "q",
            "state": "failed",
            "attempts": 1,
            "tier": "s3",
            "payloadRef": {"bucket": "b", "key": "k", "size": 10},
            "download": {"url": "https://s3.example/k?X-Amz-Signature=abc", "expires_at": 1},
            "error": {
                "type": "ValueError",
                "message": "<img src=x onerror=alert(1)>",
                "traceback": "Traceback (most recent call last):\n  ...\nValueError: <b>",
            },
            "created_at": 1700000000.0,
            "updated_at": 1700000001.0,
        }


@pytest.fixture
def control_plane() -> ControlPlane:
    return ControlPlane()


@pytest.fixture
def dashboard(control_plane):
    http = httpx.Client(transport=httpx.MockTransport(control_plane))
    client = Client("http://cp.invalid", TOKEN, "dev", http=http, sleep=lambda s: None)
    with Dashboard(
        ClientBackend(client), "127.0.0.1", 0, secrets_to_hide=ClientBackend.secrets(client)
    ) as server:
        server.start()
        yield server
    client.close()


def writes(control_plane: ControlPlane) -> list[tuple[str, str, dict]]:
    return [c for c in control_plane.calls if c[0] != "GET"]


# -- the page ----------------------------------------------------------------------------------


def test_given_the_page_when_loaded_then_it_carries_the_csrf_token_and_never_the_bearer_token(
    dashboard,
):
    # When the browser loads the page
    page = request(dashboard, "GET", "/")
    # Then it is HTML with the per-process CSRF token, a strict CSP, and no bearer token
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert f'<meta name="csrf-token" content="{dashboard.csrf_token}">' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert TOKEN not in page.text
    # And its script and style are served from the package with their types
    js = request(dashboard, "GET", "/static/app.js")
    css = request(dashboard, "GET", "/static/app.css")
    assert js.status == 200 and js.headers["content-type"].startswith("text/javascript")
    assert css.status == 200 and css.headers["content-type"].startswith("text/css")


def test_two_dashboards_have_different_csrf_tokens(control_plane):
    http = httpx.Client(transport=httpx.MockTransport(control_plane))
    client = Client("http://cp.invalid", TOKEN, "dev", http=http)
    with (
        Dashboard(ClientBackend(client), "127.0.0.1", 0) as one,
        Dashboard(ClientBackend(client), "127.0.0.1", 0) as two,
    ):
        assert one.csrf_token != two.csrf_token and len(one.csrf_token) >= 32


def test_the_page_has_no_inline_script_or_handler_and_never_writes_html():
    # Given the shipped page: the CSP allows only the origin's own files, so nothing inline
    html = (STATIC / "index.html").read_text()
    js = (STATIC / "app.js").read_text()
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert not re.search(r"https?://", html + js + (STATIC / "app.css").read_text())
    # And job data is set as text only
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js


# -- JSON routes -------------------------------------------------------------------------------


def test_given_queues_when_read_then_json_with_depth_in_flight_and_oldest_age(dashboard):
    answer = request(dashboard, "GET", "/api/queues")
    assert answer.status == 200
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    assert answer.json() == {
        "queues": [
            {"name": "q", "queued": 2, "in_flight": 1, "oldest_queued_age_s": 9.5, "failed": 3}
        ]
    }


def test_given_a_failed_job_when_read_then_its_error_and_traceback_without_presigned_urls(
    dashboard, control_plane
):
    jobs = request(dashboard, "GET", "/api/queues/q/jobs?state=failed&limit=10")
    assert jobs.status == 200
    assert control_plane.calls[-1] == (
        "GET",
        "/v1/namespaces/dev/queues/q/jobs",
        {"state": "failed", "limit": "10"},
    )
    detail = request(dashboard, "GET", f"/api/jobs/{JOB}")
    assert detail.status == 200
    body = detail.json()
    assert body["error"]["traceback"].startswith("Traceback")
    assert body["payloadRef"]["size"] == 10
    assert "download" not in body and "X-Amz-Signature" not in detail.text
    assert "X-Amz-Signature" not in jobs.text


def test_without_urls_drops_presigned_urls_at_any_depth():
    assert without_urls({"a": {"download": {"url": "u"}, "b": [{"url": "u", "c": 1}]}}) == {
        "a": {"b": [{"c": 1}]}
    }


def test_the_token_never_appears_in_an_answer_even_when_an_error_quotes_it(dashboard):
    # Given a control-plane error whose message holds the token
    answer = request(dashboard, "GET", f"/api/jobs/{OTHER_JOB}")
    # Then the browser gets the error without it
    assert answer.status >= 500
    assert TOKEN not in answer.text and "[redacted]" in answer.text
    # And no route's answer holds it
    for path in ("/", "/api/info", "/api/queues", "/api/queues/q/jobs", f"/api/jobs/{JOB}"):
        assert TOKEN not in request(dashboard, "GET", path).text
    for path in (f"/api/jobs/{JOB}/retry", "/api/queues/q/purge", "/api/queues/q/redrive"):
        assert TOKEN not in post(dashboard, path).text


# -- state changes: what is accepted ------------------------------------------------------------


def test_given_the_token_and_the_origin_when_retrying_then_the_control_plane_retries(
    dashboard, control_plane
):
    answer = post(dashboard, f"/api/jobs/{JOB}/retry")
    assert answer.status == 200, answer.text
    assert answer.json() == {"job_id": JOB, "state": "queued", "attempt": 2, "retries": 1}
    assert writes(control_plane) == [("POST", f"/v1/namespaces/dev/jobs/{JOB}/retry", {})]


def test_redrive_and_purge_answer_the_control_planes_counts(dashboard, control_plane):
    assert post(dashboard, "/api/queues/q/purge").json() == {"cancelled": 2, "remaining": 0}
    redrive = post(dashboard, "/api/queues/q/redrive", {"states": ["failed"], "limit": 5})
    assert redrive.json() == {"retried": 1, "skipped": 0}
    assert writes(control_plane)[-1] == (
        "POST",
        "/v1/namespaces/dev/queues/q/redrive",
        {"states": ["failed"], "limit": 5},
    )


def test_a_refused_retry_is_a_409_with_the_control_planes_reason(dashboard):
    answer = post(dashboard, f"/api/jobs/{OTHER_JOB}/retry")
    assert answer.status == 409
    assert answer.json()["error"]["code"] == "not_retryable"
    assert "succeeded" in answer.json()["error"]["message"]
    assert answer.json()["error"]["reason"] == "succeeded"


def test_a_page_of_jobs_passes_the_cursor_on_and_answers_the_next_one(dashboard, control_plane):
    answer = request(dashboard, "GET", "/api/queues/q/jobs?state=queued&cursor=abc-123&limit=2")
    assert answer.status == 200
    assert answer.json()["next_cursor"] == "next-page"
    assert control_plane.calls[-1][2] == {"state": "queued", "limit": "2", "cursor": "abc-123"}


# -- cross-site requests: refused, nothing sent on --------------------------------------------


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({CSRF_HEADER: ""}, "csrf_token"),
        ({CSRF_HEADER: "not-the-token"}, "csrf_token"),
        ({"Origin": "http://evil.example"}, "bad_origin"),
        ({"Origin": "null"}, "bad_origin"),
        ({"Origin": "http://127.0.0.1:1"}, "bad_origin"),
        ({"Sec-Fetch-Site": "cross-site"}, "bad_origin"),
    ],
)
def test_given_a_cross_site_post_when_retrying_then_403_and_nothing_reaches_the_control_plane(
    dashboard, control_plane, headers, code
):
    answer = post(dashboard, f"/api/jobs/{JOB}/retry", **headers)
    assert answer.status == 403
    assert answer.json()["error"]["code"] == code
    assert writes(control_plane) == []


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", ""])
def test_a_foreign_host_header_is_refused_for_reads_and_writes(dashboard, control_plane, host):
    # Given a DNS-rebinding page: its requests reach this port with its own name as Host
    host = host.format(port=dashboard.port) or " "
    read = request(dashboard, "GET", "/api/queues", host=host)
    page = request(dashboard, "GET", "/", host=host)
    write = request(
        dashboard,
        "POST",
        "/api/queues/q/purge",
        b"{}",
        host=host,
        headers={"Content-Type": "application/json", CSRF_HEADER: dashboard.csrf_token},
    )
    for answer in (read, page, write):
        assert answer.status == 403
        assert answer.json()["error"]["code"] == "bad_host"
    assert dashboard.csrf_token not in page.text
    assert control_plane.calls == []


def test_localhost_names_the_dashboard_too(dashboard):
    assert (
        request(dashboard, "GET", "/api/queues", host=f"localhost:{dashboard.port}").status == 200
    )


def test_a_form_post_without_json_content_type_is_refused(dashboard, control_plane):
    answer = post(dashboard, f"/api/jobs/{JOB}/cancel", Content_Type="text/plain")
    assert answer.status == 415
    assert writes(control_plane) == []


def test_state_changes_are_post_only(dashboard, control_plane):
    assert request(dashboard, "GET", f"/api/jobs/{JOB}/retry").status == 405
    assert request(dashboard, "GET", "/api/queues/q/purge").status == 405
    for method in ("PUT", "DELETE", "PATCH"):
        answer = request(dashboard, method, f"/api/jobs/{JOB}")
        assert answer.status == 405 and answer.json()["error"]["code"] == "method_not_allowed"
    assert writes(control_plane) == []


# -- bad input: 4xx with a reason, nothing sent on -------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/api/queues/q/jobs?state=bogus", "state must be one of queued, running, failed"),
        ("/api/queues/q/jobs?limit=0", "limit must be between 1 and 100"),
        ("/api/queues/q/jobs?limit=101", "limit must be between 1 and 100"),
        ("/api/queues/q/jobs?limit=ten", "limit must be a whole number"),
        ("/api/queues/q/jobs?state=failed&state=queued", "state is given more than once"),
        ("/api/queues/-bad/jobs", "a queue name is 1-63"),
        ("/api/jobs/not-a-job-id", "a job id is 26 characters"),
        ("/api/nothing", "no such page"),
    ],
)
def test_bad_reads_answer_4xx_with_a_reason(dashboard, control_plane, path, reason):
    answer = request(dashboard, "GET", path)
    assert 400 <= answer.status < 500
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    assert reason in answer.json()["error"]["message"]
    assert control_plane.calls == []


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("/api/queues/q/redrive", b'{"states": "failed"}', "states must be a non-empty list"),
        ("/api/queues/q/redrive", b'{"limit": "all"}', "limit must be a whole number"),
        ("/api/queues/q/redrive", b"[1]", "must be a JSON object"),
        ("/api/queues/q/purge", b"{not json", "not JSON"),
        ("/api/jobs/123/retry", b"{}", "a job id is 26 characters"),
    ],
)
def test_bad_writes_answer_400_with_a_reason_and_change_nothing(
    dashboard, control_plane, path, body, reason
):
    answer = request(
        dashboard,
        "POST",
        path,
        body,
        headers={
            "Origin": f"http://127.0.0.1:{dashboard.port}",
            "Content-Type": "application/json",
            CSRF_HEADER: dashboard.csrf_token,
        },
    )
    assert answer.status == 400
    assert reason in answer.json()["error"]["message"]
    assert writes(control_plane) == []


def test_an_unknown_job_is_a_404_from_the_control_plane(dashboard):
    answer = request(dashboard, "GET", "/api/jobs/01JD0000000000000000000002")
    assert answer.status == 404 and answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "localhost", "example.com"])
def test_the_dashboard_serves_on_one_address_only(control_plane, host):
    http = httpx.Client(transport=httpx.MockTransport(control_plane))
    client = Client("http://cp.invalid", TOKEN, "dev", http=http)
    with pytest.raises(ValueError, match="--host"):
        Dashboard(ClientBackend(client), host, 0)


def test_the_host_names_accepted_are_the_served_address_and_localhost_on_loopback():
    from payloadstore.dashboard.server import allowed_hosts

    assert allowed_hosts("127.0.0.1", 8765) == {"127.0.0.1:8765", "localhost:8765"}
    assert allowed_hosts("::1", 8765) == {"[::1]:8765", "localhost:8765"}
    assert allowed_hosts("10.1.2.3", 80) == {"10.1.2.3:80"}


def test_given_a_namespace_policy_when_the_page_starts_then_info_carries_it(dashboard):
    info = request(dashboard, "GET", "/api/info").json()
    assert info["policy"] == {"retention": "7d", "kms_key": "stack", "inline": "never"}


def test_given_throughput_when_read_then_the_minutes_come_for_a_queue_or_all(
    dashboard, control_plane
):
    every = request(dashboard, "GET", "/api/throughput")
    one = request(dashboard, "GET", "/api/throughput?queue=q")
    assert every.status == one.status == 200
    assert (sum(one.json()["succeeded"]), sum(one.json()["failed"])) == (6, 1)
    assert one.json()["queue"] == "q" and every.json()["queue"] is None
    assert control_plane.calls[-1] == ("GET", "/v1/namespaces/dev/throughput", {"queue": "q"})
    assert request(dashboard, "GET", "/api/throughput?queue=bad%20name").status == 400


def test_given_a_jobs_payloads_when_read_then_previews_and_no_url_reach_the_page(dashboard):
    # When the page reads a job's arguments (inline) and result (S3)
    answer = request(dashboard, "GET", f"/api/jobs/{JOB}/payloads")
    # Then the arguments are previewed as text, the result's reference is named, and neither
    # the presigned URL nor its signature is anywhere in the answer
    assert answer.status == 200
    body = answer.json()
    assert body["args"]["preview"] == "{'args': [21, '<script>x</script>'], 'kwargs': {}}"
    assert body["args"]["tier"] == "inline" and body["args"]["size"] == len(ARGS)
    assert body["result"]["key"] == "payloads/r" and body["result"]["tier"] == "s3"
    assert body["result"]["preview_error"].startswith("not a payloadstore msgpack value")
    assert "secret-signature" not in answer.text and "s3.example" not in answer.text


def test_given_an_s3_result_when_downloaded_then_the_server_streams_it_as_an_attachment(
    dashboard, control_plane
):
    # When the page's download link is followed
    answer = request(dashboard, "GET", f"/api/jobs/{JOB}/result/download")
    # Then the bytes are the object's, sent as a file (never rendered), and the browser never
    # saw the presigned URL: the dashboard fetched it
    assert answer.status == 200
    assert answer.content == S3_RESULT
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"].startswith("attachment;")
    assert "sandbox" in answer.headers["content-security-policy"]
    assert "Location" not in answer.headers
    assert any(call[1] == "/payloads/r" for call in control_plane.calls)


def test_given_inline_args_when_downloaded_then_the_bytes_are_the_stored_ones(dashboard):
    answer = request(dashboard, "GET", f"/api/jobs/{JOB}/args/download")
    assert answer.status == 200 and answer.content == ARGS


def test_a_download_of_something_else_is_refused(dashboard):
    assert request(dashboard, "GET", f"/api/jobs/{JOB}/other/download").status == 404
    assert request(dashboard, "GET", "/api/jobs/not-a-job/args/download").status == 400
    assert request(dashboard, "POST", f"/api/jobs/{JOB}/args/download").status in (403, 405)


def _node() -> str:
    """The Node.js `make test` puts in the venv (`make node`), else one on PATH."""
    venv_node = STATIC.parents[2] / ".venv" / "node-bin" / "node"
    found = str(venv_node) if venv_node.exists() else shutil.which("node")
    assert found, "no Node.js: `make node` installs the venv's (the page's own code runs in it)"
    return found


def test_the_page_floors_ages_as_the_cli_does():
    # Given the page's own age() (app.js) and the CLI's format_age (queues, top)
    source = (STATIC / "app.js").read_text()
    match = re.search(r"\n  function age\(seconds\) \{\n.*?\n  \}\n", source, re.DOTALL)
    assert match, "app.js has no age(seconds) function"
    samples = [0, 0.4, 59.6, 60, 99.9, 100, 3599.5, 3600, 5400, 7199, 7200, 86399]
    # When both render the same ages
    script = match.group(0) + f"\nconsole.log(JSON.stringify({json.dumps(samples)}.map(age)));"
    page = json.loads(
        subprocess.run(
            [_node(), "-e", script], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    )
    # Then the page reads each as the CLI does: floored (59.6 s is 59s, never 60s)
    assert page == [format_age(s) for s in samples]
    assert page[2] == "59s"
