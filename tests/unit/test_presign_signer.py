"""The in-process SigV4 presigner produces exactly the URLs botocore's client would."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import botocore.session
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from payloadstore_controlplane.store.s3.signer import SigV4Presigner
from payloadstore_controlplane.store.s3_objects import S3Objects

KEY = "payloads/2026/11/29/01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args"
FROZEN = 1_764_400_000.0  # 2025-11-29T07:06:40Z


def botocore_client(region: str, endpoint: str | None):
    return botocore.session.get_session().create_client(
        "s3",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        aws_session_token="token/with+odd=chars",
        config=Config(
            signature_version="s3v4", s3={"addressing_style": "path" if endpoint else "virtual"}
        ),
    )


def frozen_time(monkeypatch):
    import datetime as dt

    import botocore.auth

    class FrozenDateTime(dt.datetime):
        @classmethod
        def utcnow(cls):
            return dt.datetime(2025, 11, 29, 7, 6, 40)

        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2025, 11, 29, 7, 6, 40, tzinfo=tz)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", FrozenDateTime)


def same_url(a: str, b: str) -> None:
    pa, pb = urlsplit(a), urlsplit(b)
    assert (pa.scheme, pa.netloc, pa.path) == (pb.scheme, pb.netloc, pb.path)
    assert dict(parse_qsl(pa.query)) == dict(parse_qsl(pb.query))


@pytest.mark.parametrize(
    "region,endpoint",
    [
        ("eu-west-1", None),
        ("us-east-1", None),
        ("us-east-1", "http://127.0.0.1:45123"),
        ("ap-southeast-2", "https://s3.example.internal:8443"),
    ],
)
@pytest.mark.parametrize("checksum", [None, "ab" * 32])
def test_presigned_put_and_get_equal_botocore(monkeypatch, region, endpoint, checksum):
    # Given the same credentials, clock, bucket and key (and no endpoint from the environment)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    frozen_time(monkeypatch)
    client = botocore_client(region, endpoint)
    creds = Credentials(
        "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "token/with+odd=chars"
    )
    ours = S3Objects(client, "payloadstore-payloads", 900, SigV4Presigner(region, endpoint, creds))
    theirs = S3Objects(client, "payloadstore-payloads", 900)
    monkeypatch.setattr("payloadstore_controlplane.store.sigv4.time.time", lambda: FROZEN)

    # When both presign a PUT (size, type, checksum signed) and a GET
    put_ours = ours.presign_put(KEY, 8_388_608, "application/msgpack", checksum)
    put_theirs = theirs.presign_put(KEY, 8_388_608, "application/msgpack", checksum)
    get_ours, get_theirs = ours.presign_get(KEY), theirs.presign_get(KEY)

    # Then the URLs (host, path, every query parameter and the signature) are the same
    same_url(put_ours.url, put_theirs.url)
    same_url(get_ours, get_theirs)
    assert put_ours.headers == put_theirs.headers


def test_bucket_with_dots_falls_back_to_the_client(monkeypatch):
    # Given a bucket name a virtual-hosted https URL cannot carry
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    client = botocore_client("eu-west-1", None)
    objects = S3Objects(client, "my.dotted.bucket", 900, SigV4Presigner("eu-west-1", None))
    # When presigning, Then the client signs it (path style, as botocore decides)
    url = objects.presign_get(KEY)
    assert "my.dotted.bucket" in url and "X-Amz-Signature=" in url


def test_credentials_come_from_the_environment(monkeypatch):
    # Given Lambda-style credentials in the environment
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "tok")
    # When presigning without explicit credentials
    url = SigV4Presigner("eu-west-1", None).url("GET", "bucket-a", KEY, 60)
    # Then the URL names that key id and carries the session token
    query = dict(parse_qsl(urlsplit(url).query))
    assert query["X-Amz-Credential"].startswith("AKIDENV/")
    assert query["X-Amz-Security-Token"] == "tok"
    assert query["X-Amz-Expires"] == "60"
