"""The SDK's wire layer (payloadstore/_wire/): requests as data, typed answers, error classes
chosen by the server's `error.code` and the route, never by message text."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import httpx
import pytest

from payloadstore import (
    ApiError,
    AuthError,
    ConflictError,
    InlineUnavailable,
    InvalidRequest,
    JobNotFound,
    LeaseMismatch,
    PayloadConsumed,
    PayloadLost,
    PayloadTooLarge,
    RetryPolicy,
    ServiceUnavailable,
    _wire,
)
from payloadstore._wire import PayloadRef, Wire

REF = PayloadRef(
    bucket="b",
    key="payloads/2026/01/01/J1/args",
    size=10,
    content_type="application/msgpack",
    sha256="ab" * 32,
)


class Recorder:
    """A MockTransport handler answering each request with the next scripted response."""

    def __init__(self, *answers: httpx.Response | Exception):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def wire_with(recorder: Recorder, sleeps: list | None = None, **kw) -> Wire:
    return Wire(
        "http://cp.test/",
        "pst_x",
        "team",
        http=httpx.Client(transport=httpx.MockTransport(recorder)),
        sleep=(sleeps if sleeps is not None else []).append,
        **kw,
    )


def error(status: int, code: str | None, message: str = "m", **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message}} if code else {"message": message}
    return httpx.Response(status, json=body, headers=headers)


# -- requests as data ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "method", "path", "body"),
    [
        (_wire.config(), "GET", "/v1/config", None),
        (_wire.health(), "GET", "/v1/health", None),
        (_wire.health(details=True), "GET", "/v1/health/details", None),
        (
            _wire.presign_put("team", size=5, kind="args", sha256="ab" * 32),
            "POST",
            "/v1/namespaces/team/payloads/presign",
            # kind=args and content_type=application/msgpack are the server's defaults
            {"op": "put", "size": 5, "sha256": "ab" * 32},
        ),
        (
            _wire.presign_put("team", size=5, kind="result", sha256=None, job_id="J1"),
            "POST",
            "/v1/namespaces/team/payloads/presign",
            {"op": "put", "size": 5, "kind": "result", "job_id": "J1"},
        ),
        (
            _wire.presign_get("team", "k1"),
            "POST",
            "/v1/namespaces/team/payloads/presign",
            {"op": "get", "key": "k1"},
        ),
        (
            _wire.enqueue_ref("team", "q", REF),
            "POST",
            "/v1/namespaces/team/queues/q/jobs",
            # only what the server checks against what it issued
            {"payloadRef": {"bucket": "b", "key": "payloads/2026/01/01/J1/args", "size": 10}},
        ),
        (_wire.job_status("team", "J1"), "GET", "/v1/namespaces/team/jobs/J1", None),
        (
            _wire.poll("team", ["a", "b"], wait_s=3, daemon_id="d1"),
            "POST",
            "/v1/daemon/poll",
            {"namespace": "team", "queues": ["a", "b"], "wait_s": 3, "daemon_id": "d1"},
        ),
        (
            _wire.post_result("team", "J1", inline=b"\x01\x02"),
            "POST",
            "/v1/namespaces/team/jobs/J1/result",
            {"resultInline": "AQI="},
        ),
        (
            _wire.post_result("team", "J1", ref=REF),
            "POST",
            "/v1/namespaces/team/jobs/J1/result",
            {"resultRef": {"bucket": "b", "key": "payloads/2026/01/01/J1/args", "size": 10}},
        ),
        (
            _wire.post_result("team", "J1", error={"type": "E", "message": "x"}),
            "POST",
            "/v1/namespaces/team/jobs/J1/result",
            {"error": {"type": "E", "message": "x"}},
        ),
        (
            _wire.report_failure("team", "J1", state="payload_lost", detail="gone"),
            "POST",
            "/v1/namespaces/team/jobs/J1/failure",
            {"state": "payload_lost", "detail": "gone"},
        ),
    ],
)
def test_given_a_route_builder_when_called_then_the_request_is_described_without_io(
    call, method, path, body
):
    # Given/When: the builder ran above, at collection, with no transport at all
    # Then
    assert (call.method, call.path, call.json) == (method, path, body)


def test_given_an_inline_enqueue_when_sent_then_raw_msgpack_goes_with_the_key_and_bearer():
    # Given
    rec = Recorder(httpx.Response(201, json={"job_id": "J1", "tier": "inline"}))
    # When
    answer = wire_with(rec).enqueue_inline("q", b"\x93\x01\x02\x03", idempotency_key="k-1")
    # Then
    assert answer == _wire.Enqueued(job_id="J1", tier="inline", created=True)
    (request,) = rec.requests
    assert str(request.url) == "http://cp.test/v1/namespaces/team/queues/q/jobs"
    assert request.content == b"\x93\x01\x02\x03"
    assert request.headers["content-type"] == "application/msgpack"
    assert request.headers["idempotency-key"] == "k-1"
    assert request.headers["authorization"] == "Bearer pst_x"


def test_given_a_repeat_enqueue_when_the_server_answers_200_then_created_is_false():
    rec = Recorder(httpx.Response(200, json={"job_id": "J1", "tier": "s3"}))
    assert wire_with(rec).enqueue_ref("q", REF) == _wire.Enqueued("J1", "s3", created=False)


def test_given_an_enqueue_answer_without_a_job_id_when_parsed_then_api_error_not_a_job():
    rec = Recorder(httpx.Response(201, json={"tier": "inline"}))
    with pytest.raises(ApiError, match="without a job id"):
        wire_with(rec).enqueue_inline("q", b"\x01", idempotency_key="k")


def test_given_health_is_public_when_sent_then_no_bearer_and_503_is_an_answer():
    rec = Recorder(httpx.Response(503, json={"status": "failing", "checks": {}}))
    answer = wire_with(rec).health()
    assert answer.healthy is False and answer.body["status"] == "failing"
    assert "authorization" not in rec.requests[0].headers


def test_given_health_details_when_sent_then_the_bearer_goes_along_and_503_is_an_answer():
    body = {"status": "failing", "checks": {"bucket": {"ok": False, "detail": "not reachable"}}}
    rec = Recorder(httpx.Response(503, json=body))
    answer = wire_with(rec).health(details=True)
    assert answer.healthy is False and answer.body["checks"]["bucket"]["detail"]
    assert rec.requests[0].url.path == "/v1/health/details"
    assert rec.requests[0].headers["authorization"] == "Bearer pst_x"


def test_given_a_config_answer_when_parsed_then_a_typed_server_config():
    rec = Recorder(
        httpx.Response(
            200,
            json={
                "inline_threshold": 10,
                "max_payload_bytes": 20,
                "presign_ttl_s": 30,
                "result_ttl_s": 40,
                "max_presigns_per_job": 5,
            },
        )
    )
    assert wire_with(rec).config() == _wire.ServerConfig(10, 20, 30, 40, 5)


def test_given_an_empty_queue_when_polling_then_none_and_a_delivery_is_a_polled_job():
    rec = Recorder(
        httpx.Response(204),
        httpx.Response(
            200,
            json={
                "job_id": "J2",
                "namespace": "team",
                "queue": "q",
                "attempt": 2,
                "payloadInline": base64.b64encode(b"\x01\x02").decode(),
            },
        ),
        httpx.Response(
            200,
            json={
                "job_id": "J3",
                "namespace": "team",
                "queue": "q",
                "attempt": 1,
                "payloadRef": REF.to_wire(),
            },
        ),
    )
    wire = wire_with(rec)
    assert wire.poll(["q"], wait_s=0, daemon_id="d") is None
    inline = wire.poll(["q"], wait_s=0, daemon_id="d")
    assert (inline.job_id, inline.attempt, inline.payload_inline, inline.payload_ref) == (
        "J2",
        2,
        b"\x01\x02",
        None,
    )
    by_ref = wire.poll(["q"], wait_s=0, daemon_id="d")
    assert by_ref.payload_ref == REF and by_ref.payload_inline is None


def test_given_max_jobs_when_polling_then_the_body_carries_it_and_the_jobs_list_is_polled_jobs():
    call = _wire.poll("team", ["q"], wait_s=2, daemon_id="d", max_jobs=3)
    assert call.json == {
        "namespace": "team",
        "queues": ["q"],
        "wait_s": 2,
        "daemon_id": "d",
        "max_jobs": 3,
    }
    for bad in (0, 17):
        with pytest.raises(ValueError, match="max_jobs"):
            _wire.poll("team", ["q"], wait_s=2, daemon_id="d", max_jobs=bad)
    delivery = {"namespace": "team", "queue": "q", "attempt": 1, "lease_expires_in_s": 30}
    rec = Recorder(
        httpx.Response(204),
        httpx.Response(
            200,
            json={
                "jobs": [
                    {**delivery, "job_id": "J1", "lease": "l1", "payloadInline": "AQI="},
                    {**delivery, "job_id": "J2", "lease": "l2", "payloadRef": REF.to_wire()},
                ]
            },
        ),
    )
    wire = wire_with(rec)
    assert wire.poll(["q"], wait_s=0, daemon_id="d", max_jobs=4) == []
    jobs = wire.poll(["q"], wait_s=0, daemon_id="d", max_jobs=4)
    assert [(j.job_id, j.lease) for j in jobs] == [("J1", "l1"), ("J2", "l2")]
    assert jobs[0].payload_inline == b"\x01\x02" and jobs[1].payload_ref == REF
    assert jobs[0].lease_expires_in_s == 30


def test_given_a_result_long_poll_when_pending_then_not_done_and_when_done_then_typed_forms():
    rec = Recorder(
        httpx.Response(202, json={"job_id": "J1", "state": "running"}),
        httpx.Response(
            200, json={"job_id": "J1", "state": "succeeded", "resultRef": REF.to_wire()}
        ),
        httpx.Response(
            200,
            json={"job_id": "J1", "state": "failed", "error": {"type": "E", "message": "m"}},
        ),
    )
    wire = wire_with(rec)
    pending = wire.job_result("J1", wait_s=2.5)
    assert (pending.done, pending.state) == (False, "running")
    assert rec.requests[0].url.params["wait"] == "2.5"
    assert wire.job_result("J1", wait_s=0).result_ref == REF
    failed = wire.job_result("J1", wait_s=0)
    assert failed.done and failed.error == {"type": "E", "message": "m"}


def test_given_two_result_forms_when_building_a_post_then_value_error():
    with pytest.raises(ValueError, match="exactly one"):
        _wire.post_result("team", "J1", inline=b"x", ref=REF)
    with pytest.raises(ValueError, match="exactly one"):
        _wire.post_result("team", "J1")


# -- error classes from the code and the route ------------------------------------------------


def test_given_not_found_on_a_job_route_when_asking_then_job_not_found():
    rec = Recorder(error(404, "not_found", "job J9 not found"))
    with pytest.raises(JobNotFound) as info:
        wire_with(rec).job_status("J9")
    assert info.value.code == "not_found" and info.value.status == 404


def test_given_not_found_on_a_non_job_route_when_the_message_says_job_then_still_not_job_not_found():
    # The message names a job, but the route is config: the class comes from code + route.
    rec = Recorder(error(404, "not_found", "no job here"))
    with pytest.raises(ApiError) as info:
        wire_with(rec).config()
    assert type(info.value) is ApiError


def test_given_presign_get_of_an_unknown_or_expired_key_when_asking_then_payload_lost_with_the_key():
    rec = Recorder(error(404, "not_found", "never issued"), error(410, "gone", "past retention"))
    wire = wire_with(rec)
    with pytest.raises(PayloadLost, match="unknown to the control plane") as info:
        wire.presign_get("k1", job_id="J1")
    assert (info.value.key, info.value.job_id) == ("k1", "J1")
    with pytest.raises(PayloadLost, match="past retention"):
        wire.presign_get("k1")


def test_given_a_consumed_result_or_arguments_when_read_again_then_payload_consumed():
    # Given a control plane answering 410 result_consumed / arguments_consumed (retention consume)
    body = {
        "error": {
            "code": "result_consumed",
            "message": "the result of job J1 was consumed",
            "reason": "result_consumed",
            "deleted_at": "2026-12-03T15:00:00Z",
        }
    }
    rec = Recorder(
        httpx.Response(410, json=body),
        httpx.Response(410, json=body),
        error(410, "arguments_consumed", "the arguments of job J1 were consumed"),
    )
    wire = wire_with(rec)
    # When the result is read again, and its key presigned
    with pytest.raises(PayloadConsumed, match="was consumed") as read:
        wire.job_result("J1", wait_s=0)
    with pytest.raises(PayloadConsumed) as presign:
        wire.presign_get("k1", job_id="J1")
    with pytest.raises(PayloadConsumed) as args:
        wire.presign_get("k0", job_id="J1")
    # Then each is a PayloadConsumed (a PayloadLost) naming the job, the key and the reason,
    # answered once (a 410 is final, never retried)
    assert isinstance(read.value, PayloadLost) and read.value.job_id == "J1"
    assert read.value.reason == "result_consumed" and read.value.status == 410
    assert read.value.deleted_at == "2026-12-03T15:00:00Z"
    assert (presign.value.key, presign.value.reason) == ("k1", "result_consumed")
    assert (args.value.key, args.value.reason) == ("k0", "arguments_consumed")
    assert len(rec.requests) == 3


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (409, "conflict", ConflictError),
        (409, "lease_mismatch", LeaseMismatch),
        (422, "invalid_request", InvalidRequest),
        (400, "bad_request", InvalidRequest),
        (401, "unauthorized", AuthError),
        (403, "forbidden", AuthError),
        # API Gateway's own answers carry no code: the status decides.
        (403, None, AuthError),
        (418, None, ApiError),
    ],
)
def test_given_an_error_code_when_mapping_then_the_class_follows_the_code(status, code, expected):
    rec = Recorder(error(status, code))
    with pytest.raises(expected) as info:
        wire_with(rec).enqueue_ref("q", REF)
    assert type(info.value) is expected and info.value.code == code
    assert len(rec.requests) == 1


def test_given_inline_unavailable_when_enqueueing_inline_then_typed_at_once_without_retries():
    rec = Recorder(
        error(503, "inline_unavailable", "redis above its high-water mark", **{"Retry-After": "1"})
    )
    sleeps: list[float] = []
    with pytest.raises(InlineUnavailable) as info:
        wire_with(rec, sleeps).enqueue_inline("q", b"\x01", idempotency_key="k")
    assert isinstance(info.value, ServiceUnavailable) and info.value.status == 503
    assert len(rec.requests) == 1 and sleeps == []


def test_given_redis_memory_full_when_enqueueing_then_retried_with_the_same_key_then_service_unavailable():
    rec = Recorder(error(503, "redis_memory_full", "redis is full", **{"Retry-After": "0"}))
    with pytest.raises(ServiceUnavailable) as info:
        wire_with(rec, retry=RetryPolicy(max_attempts=3)).enqueue_inline(
            "q", b"\x01", idempotency_key="k-7"
        )
    assert type(info.value) is ServiceUnavailable and info.value.code == "redis_memory_full"
    assert [r.headers["idempotency-key"] for r in rec.requests] == ["k-7"] * 3


def test_given_a_dropped_connection_then_a_201_when_enqueueing_then_the_retry_gets_the_job():
    rec = Recorder(httpx.RemoteProtocolError("reset"), httpx.Response(201, json={"job_id": "J1"}))
    sleeps: list[float] = []
    answer = wire_with(rec, sleeps).enqueue_inline("q", b"\x01", idempotency_key="k")
    assert answer.job_id == "J1" and answer.tier == "inline" and len(sleeps) == 1


# -- one owner of the wire ---------------------------------------------------------------------


def test_given_the_sdk_modules_when_read_then_only_the_wire_layer_names_routes():
    package = Path(_wire.__file__).parent.parent  # payloadstore/, beside the _wire package
    offenders = {}
    # daemon.py and cli.py with the modules their parts live in
    daemon_parts = sorted(p.name for p in package.glob("_daemon_*.py"))
    cli_parts = sorted(p.name for p in package.glob("_cli_*.py"))
    for name in (
        "client.py",
        "daemon.py",
        *daemon_parts,
        "cli.py",
        *cli_parts,
        "_payloads.py",
        "_transfer.py",
        "_http.py",
    ):
        text = (package / name).read_text()
        hits = re.findall(r"[\"'f]/v1/|/namespaces/|/jobs/|/payloads/presign|\.api\.request", text)
        if hits:
            offenders[name] = hits
    assert offenders == {}


def test_given_a_request_description_when_turned_into_http_kwargs_then_it_is_transport_neutral():
    kwargs = _wire.http_kwargs(_wire.job_result("team", "J1", wait_s=5), "http://cp", "tok")
    assert (
        kwargs["method"] == "GET" and kwargs["url"] == "http://cp/v1/namespaces/team/jobs/J1/result"
    )
    assert kwargs["params"] == {"wait": "5"} and kwargs["headers"]["Authorization"] == "Bearer tok"
    assert kwargs["timeout"].read == 25.0
    assert json.dumps(_wire.poll("ns", ["q"], wait_s=1, daemon_id="d").json)


def test_given_queue_routes_when_asking_then_queue_info_and_not_found_is_queue_not_found():
    from payloadstore import QueueNotFound

    rec = Recorder(
        httpx.Response(
            200,
            json={
                "queues": [{"name": "q", "queued": 2, "in_flight": 1, "oldest_queued_age_s": 3.5}]
            },
        ),
        error(404, "not_found", "queue nope not found in namespace team"),
    )
    wire = wire_with(rec)
    assert wire.queue_list() == [_wire.QueueInfo("q", 2, 1, 3.5)]
    with pytest.raises(QueueNotFound):
        wire.queue_stats("nope")
    assert [r.url.path for r in rec.requests] == [
        "/v1/namespaces/team/queues",
        "/v1/namespaces/team/queues/nope",
    ]


def test_given_operator_routes_when_asking_then_failed_throughput_and_payloads_are_parsed():
    from payloadstore import JobNotFound

    args = b"\x92\x01\x02"
    rec = Recorder(
        httpx.Response(
            200,
            json={
                "name": "q",
                "queued": 0,
                "in_flight": 0,
                "oldest_queued_age_s": None,
                "failed": 4,
            },
        ),
        httpx.Response(
            200,
            json={
                "queue": "q",
                "start": 1_700_000_000,
                "bucket_s": 60,
                "succeeded": [1] * 60,
                "failed": [0] * 60,
            },
        ),
        httpx.Response(
            200,
            json={
                "job_id": "J1",
                "queue": "q",
                "state": "succeeded",
                "args": {"tier": "inline", "inline": base64.b64encode(args).decode(), "size": 3},
                "result": {
                    "tier": "s3",
                    "size": 9,
                    "ref": {"kind": "s3", "bucket": "b", "key": "k", "size": 9},
                    "download": {"url": "https://s3/k?sig", "expires_at": "2030-01-01T00:00:00Z"},
                },
            },
        ),
        error(404, "not_found", "job J2 not found"),
    )
    wire = wire_with(rec)
    assert wire.queue_stats("q").failed == 4
    chart = wire.throughput("q")
    assert (chart.queue, chart.start, sum(chart.succeeded), len(chart.failed)) == (
        "q",
        1_700_000_000,
        60,
        60,
    )
    stored = wire.job_payloads("J1")
    assert stored.args.inline == args and stored.args.tier == "inline"
    assert stored.result is not None and stored.result.ref == {
        "kind": "s3",
        "bucket": "b",
        "key": "k",
        "size": 9,
    }
    assert stored.result.download_url == "https://s3/k?sig" and stored.result.inline is None
    with pytest.raises(JobNotFound):
        wire.job_payloads("J2")
    assert [(r.url.path, dict(r.url.params)) for r in rec.requests] == [
        ("/v1/namespaces/team/queues/q", {}),
        ("/v1/namespaces/team/throughput", {"queue": "q"}),
        ("/v1/namespaces/team/jobs/J1/payloads", {}),
        ("/v1/namespaces/team/jobs/J2/payloads", {}),
    ]


# -- result-and-next, enqueue-and-wait (issue 34) ------------------------------------------------


def test_given_next_on_a_result_post_when_answered_then_the_next_jobs_or_none_for_a_204():
    nxt = _wire.NextJobs(("q",), max_jobs=2, wait_s=1.5, daemon_id="d")
    call = _wire.post_result("team", "J1", inline=b"\x01", lease="l", next=nxt)
    assert call.json["next"] == {"queues": ["q"], "max_jobs": 2, "wait_s": 1.5, "daemon_id": "d"}
    assert call.timeout_s == 21.5
    assert "next" not in _wire.post_result("team", "J1", inline=b"\x01").json
    delivery = {"namespace": "team", "queue": "q", "attempt": 1, "lease": "l2"}
    rec = Recorder(
        httpx.Response(200, json={"jobs": [{**delivery, "job_id": "J2", "payloadInline": "AQ=="}]}),
        httpx.Response(200, json={"jobs": []}),
        httpx.Response(204),
    )
    wire = wire_with(rec)
    (job,) = wire.post_result("J1", inline=b"\x01", lease="l", next=nxt) or []
    assert (job.job_id, job.lease, job.payload_inline) == ("J2", "l2", b"\x01")
    assert wire.report_failure("J1", state="payload_lost", detail="d", lease="l", next=nxt) == []
    # A control plane before `next` that took the post and answered 204: None, not "no jobs"
    assert wire.post_result("J1", inline=b"\x01", lease="l", next=nxt) is None
    for bad in (0, 17):
        with pytest.raises(ValueError, match="max_jobs"):
            _wire.post_result("team", "J1", inline=b"x", next=_wire.NextJobs(("q",), max_jobs=bad))


def test_given_wait_on_an_enqueue_when_the_job_ended_then_its_result_rides_along():
    ended = {"job_id": "J1", "tier": "inline", "state": "succeeded", "resultInline": "Bw=="}
    rec = Recorder(
        httpx.Response(201, json=ended),
        httpx.Response(201, json={"job_id": "J2", "tier": "s3"}),
        httpx.Response(
            200,
            json={
                "jobs": [
                    {"job_id": "J3", "tier": "inline", "state": "failed", "error": {"type": "E"}},
                    {"job_id": "J4", "tier": "inline"},
                    {"error": {"code": "invalid_request", "message": "m"}},
                ]
            },
        ),
    )
    wire = wire_with(rec)
    got = wire.enqueue_inline("q", b"\x01", idempotency_key="k", wait_s=5)
    assert got.job_id == "J1" and got.result is not None
    assert got.result.done and got.result.result_inline == b"\x07"
    assert rec.requests[0].url.params["wait"] == "5"
    pending = wire.enqueue_ref("q", REF, wait_s=2)
    assert pending.job_id == "J2" and pending.result is None
    failed, queued, refused = wire.enqueue_batch("q", [_wire.BatchItem(inline=b"\x01")], wait_s=3)
    assert rec.requests[2].url.params["wait"] == "3"
    assert failed.result.state == "failed" and failed.result.error == {"type": "E"}
    assert queued.result is None and isinstance(refused, _wire.ItemRefused)
    # Without a wait the request is as before
    assert _wire.enqueue_inline("team", "q", b"\x01", idempotency_key="k").params is None


def test_given_held_leases_when_renewing_then_one_call_names_them_all_and_the_answer_is_typed():
    rec = Recorder(
        httpx.Response(
            200,
            json={
                "lease_expires_at": 1.0,
                "lease_expires_in_s": 300.0,
                "cancel_requested": ["J2"],
                "lost": ["J3"],
                "woken": False,
            },
        )
    )
    wire = wire_with(rec)
    answer = wire.leases("d-1", {"J1": "L1", "J2": "L2", "J3": "L3"}, wait_s=20)
    sent = rec.requests[0]
    assert (sent.method, sent.url.path) == ("POST", "/v1/daemon/leases")
    assert json.loads(sent.content) == {
        "namespace": "team",
        "daemon_id": "d-1",
        "leases": [
            {"job_id": "J1", "lease": "L1"},
            {"job_id": "J2", "lease": "L2"},
            {"job_id": "J3", "lease": "L3"},
        ],
        "wait_s": 20,
    }
    assert (answer.cancel_requested, answer.lost, answer.woken) == (("J2",), ("J3",), False)
    assert answer.lease_expires_in_s == 300.0 and answer.received_at is not None
    with pytest.raises(ValueError):
        wire.leases("d-1", {}, wait_s=0)


def test_given_a_refusal_on_a_limit_then_the_wire_says_so_once_and_raises():
    said: list[str] = []
    rec = Recorder(error(413, "payload_too_large"), error(409, "conflict"))
    wire = wire_with(rec)
    wire.on_limit_refused = lambda: said.append("stale")
    with pytest.raises(PayloadTooLarge):
        wire.presign_put(size=10, kind="args", sha256=None)
    assert said == ["stale"]
    with pytest.raises(ConflictError):
        wire.cancel_job("J1")
    assert said == ["stale"]
