"""Parameter Store failing under live tokens (issue 43, defect 12): the authorizer, the policy
reads and the admin answer within 1 s when SSM stalls or throttles; a known token is served
from the last good listing for a bounded time (TOKEN_STALE_MAX_S), counted by the
TokenListingStale metric. SSM is the emulator's, over HTTP, behind a proxy that stalls it."""

from __future__ import annotations

import copy
import json
import time
import uuid

import pytest
import requests

from payloadstore_controlplane.handlers import admin, authorizer
from payloadstore_controlplane.store.tokens import RETRY_AFTER_FAILURE_S, TokenStore
from payloadstore_devstack.gateway import LocalGateway, serve_in_thread
from tests.support.events import FakeLambdaContext, load_event
from tests.support.ssm_stall import SsmStall

ONE_SECOND = 1.0


@pytest.fixture
def stall(moto_server):
    proxy = SsmStall(moto_server.endpoint)
    yield proxy
    proxy.stop()


@pytest.fixture
def ssm_env(settings_env, stall):
    """The handlers' SSM behind the stalling proxy, tokens under a path of this test's own."""
    path = f"/payloadstore-test/stall-{uuid.uuid4().hex[:8]}"

    def apply(**env: str) -> str:
        settings_env(AWS_ENDPOINT_URL_SSM=stall.endpoint, TOKEN_PARAMETER_PATH=path, **env)
        return path

    return apply


def authorize(token: str):
    event = copy.deepcopy(load_event("authorizer_request"))
    event["headers"] = {"Authorization": f"Bearer {token}"}
    return authorizer.lambda_handler(event, FakeLambdaContext())


def timed(fn, *args):
    started = time.monotonic()
    try:
        return fn(*args), time.monotonic() - started
    except Exception as e:  # noqa: BLE001 - the caller looks at what was raised
        return e, time.monotonic() - started


def stale_counts(out: str) -> int:
    docs = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    return sum(
        1
        for d in docs
        for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        if m["Name"] == "TokenListingStale"
    )


@pytest.mark.parametrize("failure", ["stall", "throttle"])
def test_a_known_token_is_allowed_within_1s_while_ssm_fails(
    ssm_env, stall, ssm_client, capsys, failure
):
    # Given a known client token, authorized once (the listing is read), TOKEN_CACHE_S=1
    path = ssm_env(TOKEN_CACHE_S="1")
    token, info = TokenStore(ssm_client, path, cache_s=0).mint("team-s", "client")
    assert authorize(token)["context"]["namespace"] == "team-s"
    capsys.readouterr()
    # When Parameter Store stalls (or throttles every call) past the listing's refresh time
    stall.mode = failure
    time.sleep(1.2)
    # Then every request for 3 s is allowed, each within 1 s, from the last good listing
    answers = []
    until = time.monotonic() + 3
    while time.monotonic() < until:
        answers.append(timed(authorize, token))
    assert all(isinstance(a, dict) for a, _ in answers), answers[:3]
    assert {a["context"]["namespace"] for a, _ in answers} == {"team-s"}
    assert max(t for _, t in answers) < ONE_SECOND, [round(t, 2) for _, t in answers]
    # And SSM is not asked once per request (one stalled read, then left alone a while)
    assert stall.requests < 10
    # And the stale answers are counted (the TokenListingStale alarm's metric): each one once
    # SSM has given no page for 0.7 s
    assert len(answers) - 1 <= stale_counts(capsys.readouterr().out) <= len(answers)
    # When SSM is back, Then the listing is read again and no stale answer follows
    stall.mode = "pass"
    time.sleep(5.2)  # RETRY_AFTER_FAILURE_S
    assert authorize(token)["context"]["token_id"] == info.token_id
    assert stale_counts(capsys.readouterr().out) == 0


def test_past_token_stale_max_s_a_known_token_is_no_longer_served(ssm_env, stall, ssm_client):
    # Given a known token, listing refresh 1 s, the last good listing kept 1 s past it
    path = ssm_env(TOKEN_CACHE_S="1", TOKEN_STALE_MAX_S="1")
    token, _ = TokenStore(ssm_client, path, cache_s=0).mint("team-t", "client")
    assert authorize(token)["context"]["namespace"] == "team-t"
    # When SSM stalls for longer than the bound
    stall.mode = "stall"
    time.sleep(2.2)
    # Then the request fails (an authorizer error, never cached), still within 1 s
    answer, took = timed(authorize, token)
    assert isinstance(answer, Exception) and "SSM" in str(answer), answer
    assert took < ONE_SECOND


def test_a_cold_authorizer_fails_within_1s_when_ssm_stalls(ssm_env, stall, ssm_client):
    # Given a known token, and a container that never read the listing, SSM stalled
    path = ssm_env(TOKEN_CACHE_S="60")
    token, _ = TokenStore(ssm_client, path, cache_s=0).mint("team-c", "client")
    stall.mode = "stall"
    # When it is presented, Then the authorizer gives up within 1 s (not 3 attempts x 3 s)
    answer, took = timed(authorize, token)
    assert isinstance(answer, Exception) and "SSM" in str(answer), answer
    assert took < ONE_SECOND


def test_the_admin_policy_read_answers_within_1s_when_ssm_stalls(ssm_env, stall):
    # Given SSM stalled
    ssm_env()
    stall.mode = "stall"
    # When an operator reads or sets a namespace's policy
    for event in (
        {"action": "get_policy", "namespace": "team-p"},
        {"action": "set_policy", "namespace": "team-p", "retention": "7d"},
    ):
        answer, took = timed(admin.lambda_handler, event, FakeLambdaContext())
        # Then the answer says SSM is unavailable, within 1 s, and nothing is written
        assert took < ONE_SECOND, event
        assert "SSM" in answer["error"], answer


def test_a_long_listing_that_progresses_is_not_counted_stale(ssm_env, stall, ssm_client, capsys):
    # Given a known token, authorized once, and 25 tokens in all (3 listing pages)
    path = ssm_env(TOKEN_CACHE_S="1")
    store = TokenStore(ssm_client, path, cache_s=0)
    token = store.mint("team-l", "client")[0]
    for i in range(24):
        store.mint(f"team-{i}", "client")
    assert authorize(token)["context"]["namespace"] == "team-l"
    capsys.readouterr()
    # When the listing's refresh takes ~1 s (each page 0.35 s late, but coming)
    stall.mode = "slow_listing"
    time.sleep(1.1)
    answers = [timed(authorize, token) for _ in range(4)]
    # Then each request is answered within 1 s, and no stale answer is counted (no alarm)
    assert all(isinstance(a, dict) for a, _ in answers), answers
    assert max(t for _, t in answers) < ONE_SECOND
    assert stale_counts(capsys.readouterr().out) == 0


def test_a_cold_authorizer_waits_for_a_long_listing_while_its_pages_come(
    ssm_env, stall, ssm_client
):
    # Given 25 tokens (3 listing pages), each page answered 0.35 s late: SSM slow, not stalled
    path = ssm_env(TOKEN_CACHE_S="60")
    store = TokenStore(ssm_client, path, cache_s=0)
    tokens = [store.mint(f"team-{i}", "client")[0] for i in range(25)]
    stall.mode = "slow_listing"
    # When a cold container is asked for a token, Then it waits for the whole listing (its
    # pages keep coming) and allows the token, as it would with SSM answering at once
    answer, took = timed(authorize, tokens[-1])
    assert isinstance(answer, dict), answer
    assert answer["context"]["namespace"] == "team-24"
    assert took > 0.35


def _through_the_gateway(running, token: str, namespace: str):
    url = f"{running.url}/v1/namespaces/{namespace}/jobs/01M97AH5F8Q3Q0CME4W53SRYBD"
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)


@pytest.mark.parametrize("container", ["cold", "past_the_stale_bound"])
def test_behind_the_gateway_an_authorizer_without_a_listing_answers_503_with_retry_after(
    ssm_env, stall, ssm_client, container
):
    # Given the local gateway (API Gateway's gateway responses as the stack configures them) and
    # a known client token, whose authorizer container never read the listing (cold) or read it
    # once and is then kept past TOKEN_STALE_MAX_S (listing refresh 1 s, kept 1 s past it)
    path = ssm_env(TOKEN_CACHE_S="60" if container == "cold" else "1", TOKEN_STALE_MAX_S="1")
    token, _ = TokenStore(ssm_client, path, cache_s=0).mint("team-g", "client")
    running = serve_in_thread(LocalGateway(), "127.0.0.1", 0)
    try:
        if container == "past_the_stale_bound":
            assert _through_the_gateway(running, token, "team-g").status_code == 404
        # When Parameter Store stalls (past the bound) and the token calls a route
        stall.mode = "stall"
        if container == "past_the_stale_bound":
            time.sleep(2.2)
        resp, took = timed(_through_the_gateway, running, token, "team-g")
    finally:
        running.stop()
    # Then the answer is a 503 the client retries (not API Gateway's 500 for every caller),
    # with Retry-After (the authorizer's back-off from SSM) and the code, within 1 s
    assert resp.status_code == 503, resp.text
    assert resp.headers["Retry-After"] == str(int(RETRY_AFTER_FAILURE_S))
    assert resp.json()["error"]["code"] == "token_store_unavailable"
    assert took < ONE_SECOND + 0.5
