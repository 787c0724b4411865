"""Waits that always answer (issue 23): a daemon poll or result?wait ends in time to answer
before the function's timeout and API Gateway's 29 s, whatever the cold start took."""

from __future__ import annotations

import math
import time

import pytest

from payloadstore_controlplane import routes
from payloadstore_controlplane.handlers._budget import ANSWER_MARGIN_S, wait_budget_s
from tests.support.events import FakeLambdaContext


class Remaining:
    def __init__(self, ms: int):
        self.ms = ms

    def get_remaining_time_in_millis(self) -> int:
        return self.ms


def event_at(epoch_ms) -> dict:
    return {"requestContext": {"requestTimeEpoch": epoch_ms}}


def test_the_budget_is_the_nearer_deadline_less_the_answer_margin():
    now = 1_800_000_000.0
    # The function's remaining time decides when it is the nearer deadline
    assert wait_budget_s(event_at(now * 1000), Remaining(10_000), now) == 10 - ANSWER_MARGIN_S
    # A cold start of 4 s: API Gateway's clock started before the invocation's
    assert wait_budget_s(event_at((now - 4) * 1000), Remaining(28_000), now) == pytest.approx(
        routes.API_GATEWAY_TIMEOUT_S - 4 - ANSWER_MARGIN_S
    )
    # Past both: no wait at all, never a negative one
    assert wait_budget_s(event_at((now - 28.9) * 1000), Remaining(500), now) == 0.0
    # An implausible epoch (a sample event's, a skewed clock) is ignored, not trusted
    assert wait_budget_s(event_at(1764400000000), Remaining(20_000), now) == 20 - ANSWER_MARGIN_S
    assert wait_budget_s(event_at((now + 60) * 1000), None, now) == math.inf
    assert wait_budget_s({}, object(), now) == math.inf


def test_a_poll_ends_before_the_invocations_remaining_time(cp, settings_env):
    # Given a 20 s poll cap and an invocation with 3 s left (a long cold start, say)
    settings_env(POLL_MAX_WAIT_S="20")
    started = time.monotonic()
    # When a daemon asks to wait 15 s on an empty queue
    got = cp.call(
        "daemon",
        "POST",
        "/v1/daemon/poll",
        role="daemon",
        body={"namespace": cp.ns, "queues": [cp.queue], "wait_s": 15, "daemon_id": "d"},
        context=FakeLambdaContext(remaining_ms=3_000),
    )
    took = time.monotonic() - started
    # Then it answers 204 with the margin to spare, not at the timeout
    assert got.status == 204
    assert 3.0 - ANSWER_MARGIN_S - 0.3 <= took <= 3.0 - ANSWER_MARGIN_S + 0.7, took


def test_a_result_wait_ends_before_api_gateways_29_s(cp, settings_env):
    # Given a 20 s result cap and a request API Gateway received 26 s ago (a slow cold start)
    settings_env(RESULT_MAX_WAIT_S="20")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    received_ms = int((time.time() - 26) * 1000)
    started = time.monotonic()
    # When the client waits 20 s for the result
    got = cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/jobs/{job_id}/result",
        {"ns": cp.ns, "job_id": job},
        query={"wait": "20"},
        request_time_ms=received_ms,
    )
    took = time.monotonic() - started
    # Then it answers 202 (still pending) within the 1.5 s API Gateway has left, less the margin
    assert got.status == 202
    assert took <= 29 - 26 - ANSWER_MARGIN_S + 0.7, took


def test_synth_refuses_a_wait_cap_with_no_room_to_answer():
    from infra.functions import check_wait_caps

    check_wait_caps({"POLL_MAX_WAIT_S": "20", "RESULT_MAX_WAIT_S": "20"})  # the defaults
    most = routes.API_GATEWAY_TIMEOUT_S - routes.COLD_START_ALLOWANCE_S - ANSWER_MARGIN_S
    check_wait_caps({"POLL_MAX_WAIT_S": str(most), "RESULT_MAX_WAIT_S": "0"})
    for name in ("POLL_MAX_WAIT_S", "RESULT_MAX_WAIT_S"):
        caps = {"POLL_MAX_WAIT_S": "20", "RESULT_MAX_WAIT_S": "20", name: "25"}
        with pytest.raises(ValueError, match=f"{name}=25 leaves no room to answer"):
            check_wait_caps(caps)
