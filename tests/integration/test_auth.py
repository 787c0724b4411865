"""The REQUEST authorizer against tokens in SSM (moto over HTTP), and role/namespace refusals."""

from __future__ import annotations

import copy

import pytest

from payloadstore_controlplane.handlers import admin, authorizer
from payloadstore_controlplane.store.tokens import TokenStore, hash_token
from tests.support.control_plane import TOKEN_PATH
from tests.support.events import FakeLambdaContext, load_event


@pytest.fixture
def tokens(cp_env, ssm_client):
    return TokenStore(ssm_client, TOKEN_PATH, cache_s=0)


def authorize(token: str | None, header="Authorization"):
    event = copy.deepcopy(load_event("authorizer_request"))
    event["headers"] = {} if token is None else {header: f"Bearer {token}"}
    return authorizer.lambda_handler(event, FakeLambdaContext())


def test_minted_token_is_allowed_with_namespace_and_role_in_context(tokens):
    token, info = tokens.mint("team-a", "client")
    policy = authorize(token)
    assert policy["context"] == {"namespace": "team-a", "role": "client", "token_id": info.token_id}
    statement = policy["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow"
    # One cached answer must serve every route of the API
    assert statement["Resource"][0].endswith("abcdef1234/prod/*/*")


def test_header_name_is_case_insensitive(tokens):
    token, _ = tokens.mint("team-a", "daemon")
    assert authorize(token, header="authorization")["context"]["role"] == "daemon"


def test_unknown_missing_and_malformed_tokens_are_unauthorized(tokens):
    tokens.mint("team-a", "client")
    for bad in ("pst_" + "x" * 43, None, "not-a-token", ""):
        with pytest.raises(Exception, match="^Unauthorized$"):
            authorize(bad)


def test_token_is_stored_only_as_its_hash(tokens, ssm_client):
    token, _info = tokens.mint("team-b", "client")
    names = [p["Name"] for p in ssm_client.get_parameters_by_path(Path=TOKEN_PATH)["Parameters"]]
    assert f"{TOKEN_PATH}/{hash_token(token)}" in names
    values = [p["Value"] for p in ssm_client.get_parameters_by_path(Path=TOKEN_PATH)["Parameters"]]
    assert not any(token in v for v in values + names)


def test_revoked_token_is_refused(tokens):
    token, info = tokens.mint("team-c", "client")
    assert authorize(token)["context"]["namespace"] == "team-c"
    assert tokens.revoke(info.token_id) == 1
    with pytest.raises(Exception, match="Unauthorized"):
        authorize(token)


def test_admin_function_mints_lists_and_revokes(cp_env):
    minted = admin.lambda_handler(
        {"action": "mint", "namespace": "team-d", "role": "daemon"}, FakeLambdaContext()
    )
    assert minted["token"].startswith("pst_") and minted["role"] == "daemon"
    listed = admin.lambda_handler({"action": "list"}, FakeLambdaContext())
    assert any(t["token_id"] == minted["token_id"] for t in listed["tokens"])
    assert authorize(minted["token"])["context"]["namespace"] == "team-d"
    assert admin.lambda_handler(
        {"action": "revoke", "token": minted["token"]}, FakeLambdaContext()
    ) == {"revoked": 1}
    bad = admin.lambda_handler(
        {"action": "mint", "namespace": "Bad NS", "role": "client"}, FakeLambdaContext()
    )
    assert "invalid namespace" in bad["error"]


def test_handlers_refuse_other_namespace_and_role(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    # path namespace other than the token's
    r = cp.call(
        "jobs", "GET", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": "elsewhere", "job_id": job}
    )
    assert r.status == 403 and "namespace" in r.error["message"]


def test_role_matrix(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    daemon_only = [
        (
            "daemon",
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"resultInline": "AQ==", "lease": "x"},
        ),
        (
            "daemon",
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/failure",
            {"state": "payload_lost", "lease": "x"},
        ),
    ]
    for function, method, resource, body in daemon_only:
        r = cp.call(
            function, method, resource, {"ns": cp.ns, "job_id": job}, role="client", body=body
        )
        assert r.status == 403, resource
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs",
        {"ns": cp.ns, "queue": "q"},
        role="daemon",
        body={"payloadInline": "AQ=="},
    )
    assert r.status == 403
    r = cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/jobs/{job_id}/result",
        {"ns": cp.ns, "job_id": job},
        role="daemon",
    )
    assert r.status == 403
    # no authorizer context at all (misconfigured API) is 401, never served
    r = cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/jobs/{job_id}",
        {"ns": cp.ns, "job_id": job},
        namespace=None,
    )
    assert r.status == 401


def test_a_token_minted_after_the_cache_was_filled_works_at_once(settings_env, ssm_client):
    # Given an authorizer whose token cache is long and already filled
    settings_env(TOKEN_CACHE_S="3600")
    minter = TokenStore(ssm_client, TOKEN_PATH, cache_s=0)
    old, _ = minter.mint("team-n", "client")
    assert authorize(old)["context"]["namespace"] == "team-n"
    # When a token is minted now (another container, the CLI)
    new, info = minter.mint("team-n", "daemon")
    # Then the authorizer allows it on its first use, without waiting for the cache to age
    assert authorize(new)["context"] == {
        "namespace": "team-n",
        "role": "daemon",
        "token_id": info.token_id,
    }


def counting_store(ssm_client) -> tuple[TokenStore, list[str]]:
    """A store with a long cache whose reads of SSM are listed."""
    store = TokenStore(ssm_client, TOKEN_PATH, cache_s=3600)
    reads: list[str] = []
    paginate = ssm_client.get_paginator

    def counting(name):
        reads.append(name)
        return paginate(name)

    store._ssm = type("Counting", (), {"get_paginator": staticmethod(counting)})()
    return store, reads


class CountingSsm:
    """The authorizer's own SSM client (store/aws_http.py) against moto's server over HTTP, with
    every call it sends counted by operation."""

    def __init__(self, endpoint: str):
        from payloadstore_controlplane.store.aws_http import SsmHttpClient

        calls: dict[str, int] = {}
        self.calls = calls

        class Counting(SsmHttpClient):
            def call(self, operation, params):
                calls[operation] = calls.get(operation, 0) + 1
                return super().call(operation, params)

        self.client = Counting("us-east-1", endpoint)


def test_a_burst_of_200_unknown_tokens_costs_a_bounded_number_of_ssm_calls(
    tokens, moto_server, monkeypatch
):
    """Issue 23: a miss reads the one parameter named by the token's hash (GetParameter), within a
    per-container ration; the listing happens on the refresh interval only."""
    from payloadstore_controlplane.store import tokens as token_module

    # Given a few hundred tokens in the store and a warm authorizer store (long refresh interval)
    for i in range(30):
        tokens.mint(f"team-{i % 3}", "client")
    known, _ = tokens.mint("team-k", "daemon")
    ssm = CountingSsm(moto_server.endpoint)
    store = TokenStore(ssm.client, TOKEN_PATH, cache_s=3600)
    assert store.lookup(known) is not None
    listing = dict(ssm.calls)
    assert set(listing) == {"GetParametersByPath"}
    # When 200 distinct unknown tokens arrive in a burst, then the same 200 again
    junk = [f"pst_unknown{i:040d}" for i in range(200)]
    for token in junk + junk:
        assert store.lookup(token) is None
    # Then SSM saw no further listing and at most the ration's burst (plus what refilled during
    # the burst) of by-name reads
    after = {k: v - listing.get(k, 0) for k, v in ssm.calls.items()}
    assert after.get("GetParametersByPath", 0) == 0
    print(f"SSM calls for 400 unknown lookups (200 distinct): {after}")
    assert 1 <= after["GetParameter"] <= token_module.MISS_READ_BURST + 5, after
    # And a known token still works from the listing, with no call at all
    before = dict(ssm.calls)
    assert store.lookup(known) is not None
    assert ssm.calls == before


def test_a_new_token_is_read_by_name_and_an_unknown_hash_is_remembered(tokens, moto_server):
    ssm = CountingSsm(moto_server.endpoint)
    store = TokenStore(ssm.client, TOKEN_PATH, cache_s=3600)
    assert store.lookup("pst_" + "x" * 43) is None  # fills the listing, one by-name miss
    pages = ssm.calls["GetParametersByPath"]  # 10 parameters a page
    assert ssm.calls == {"GetParametersByPath": pages, "GetParameter": 1}
    # An unknown token sent again is answered from the negative cache
    assert store.lookup("pst_" + "x" * 43) is None
    assert ssm.calls == {"GetParametersByPath": pages, "GetParameter": 1}
    # A token minted after the listing works at once: one GetParameter, then cached
    token, info = tokens.mint("team-late", "client")
    assert store.lookup(token) == info
    assert store.lookup(token) == info
    assert ssm.calls == {"GetParametersByPath": pages, "GetParameter": 2}


def test_revocation_waits_for_the_cache_as_documented(settings_env, ssm_client):
    # Given a cached, known token
    store = TokenStore(ssm_client, TOKEN_PATH, cache_s=3600)
    minter = TokenStore(ssm_client, TOKEN_PATH, cache_s=0)
    token, info = minter.mint("team-r", "client")
    assert store.lookup(token) is not None
    # When it is revoked, the refresh-on-miss does not apply to a known token: it stays valid
    # until the cache (TOKEN_CACHE_S) ages out, as docs/wire.md says
    minter.revoke(info.token_id)
    assert store.lookup(token) is not None
    assert TokenStore(ssm_client, TOKEN_PATH, cache_s=0).lookup(token) is None


def test_concurrent_lookups_on_a_cold_store_read_ssm_once(tokens, ssm_client):
    # Given a minted token and a cold store shared by many threads (the local gateway's containers)
    import threading

    token, info = tokens.mint("team-c", "client")
    store, reads = counting_store(ssm_client)
    found = []
    start = threading.Barrier(20)

    def lookup():
        start.wait()
        found.append(store.lookup(token))

    # When 20 requests look the token up at the same moment
    threads = [threading.Thread(target=lookup) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then each found it, and SSM was read once, not once per request
    assert [f.token_id for f in found] == [info.token_id] * 20
    assert len(reads) == 1
