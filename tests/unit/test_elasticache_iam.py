"""The ElastiCache IAM auth token signed in-process is exactly the one botocore's SigV4QueryAuth
makes (the way AWS's own example builds it: a presigned `connect` GET to the cache's name)."""

from __future__ import annotations

import datetime as dt
from urllib.parse import parse_qsl, urlsplit

import pytest
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from payloadstore_controlplane.store import sigv4
from payloadstore_controlplane.store.elasticache_iam import (
    IamCredentialProvider,
    iam_auth_token,
)

FROZEN = 1_764_400_000.0  # 2025-11-29T07:06:40Z
CREDS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "token/with+odd=chars")


def botocore_token(monkeypatch, cache: str, user: str, region: str, serverless: bool) -> str:
    import botocore.auth

    class FrozenDateTime(dt.datetime):
        @classmethod
        def utcnow(cls):
            return dt.datetime(2025, 11, 29, 7, 6, 40)

        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2025, 11, 29, 7, 6, 40, tzinfo=tz)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", FrozenDateTime)
    query = {"Action": "connect", "User": user}
    if serverless:
        query["ResourceType"] = "ServerlessCache"
    request = AWSRequest(method="GET", url=f"http://{cache}/", params=query)
    SigV4QueryAuth(Credentials(*CREDS), "elasticache", region, expires=900).add_auth(request)
    return request.prepare().url.removeprefix("http://")


@pytest.mark.parametrize("serverless", [True, False])
def test_token_matches_botocore(monkeypatch, serverless):
    # Given a cache, an IAM-enabled ElastiCache user and role credentials with a session token
    cache, user, region = "payloadstore-dev", "payloadstore-dev-functions", "eu-west-1"
    # When both sign the connect request at the same instant
    ours = iam_auth_token(cache, user, region, CREDS, serverless=serverless, now=FROZEN)
    theirs = botocore_token(monkeypatch, cache, user, region, serverless)
    # Then the tokens carry the same parameters and the same signature
    ours_parts, theirs_parts = urlsplit("http://" + ours), urlsplit("http://" + theirs)
    assert ours_parts.netloc == theirs_parts.netloc == cache
    assert sorted(parse_qsl(ours_parts.query)) == sorted(parse_qsl(theirs_parts.query))
    assert dict(parse_qsl(ours_parts.query))["X-Amz-Expires"] == "900"


def test_provider_signs_with_the_environment_credentials(monkeypatch):
    # Given a Lambda environment (the role's keys in the environment)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDS[1])
    monkeypatch.setenv("AWS_SESSION_TOKEN", CREDS[2])
    provider = IamCredentialProvider("payloadstore-dev", "payloadstore-dev-functions", "us-east-1")
    # When redis-py asks for a connection's credentials
    user, password = provider.get_credentials()
    # Then the user is the IAM user and the password a connect token for the serverless cache
    assert user == "payloadstore-dev-functions"
    query = dict(parse_qsl(urlsplit("http://" + password).query))
    assert query["Action"] == "connect" and query["ResourceType"] == "ServerlessCache"
    assert query["X-Amz-Security-Token"] == CREDS[2]


def test_provider_without_credentials_says_why(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with sigv4.invocation_running_as(CREDS):
        assert IamCredentialProvider("c", "u", "us-east-1").get_credentials()[0] == "u"
    with pytest.raises(RuntimeError, match="no AWS credentials"):
        IamCredentialProvider("c", "u", "us-east-1").get_credentials()
