"""The in-process SSM and Secrets Manager clients sign exactly what botocore's SigV4Auth signs, page
like botocore's paginator, retry what botocore would, and leave to botocore what they cannot
resolve."""

from __future__ import annotations

import json

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from payloadstore_controlplane.store import aws_http
from payloadstore_controlplane.store.aws_http import (
    AwsRequestError,
    SecretsManagerHttpClient,
    SsmHttpClient,
)
from tests.unit.test_presign_signer import FROZEN, frozen_time

AKID, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "region,endpoint,token",
    [
        ("eu-west-1", None, None),
        ("us-east-1", None, "token/with+odd=chars"),
        ("us-east-1", "http://127.0.0.1:45123", "session"),
        ("ap-southeast-2", "https://ssm.example.internal:8443/prefix", None),
        ("us-west-2", "https://ssm.example.internal:443", None),
    ],
)
def test_signature_is_botocores(monkeypatch, region, endpoint, token):
    frozen_time(monkeypatch)
    client = SsmHttpClient(region, endpoint, credentials=(AKID, SECRET, token))
    body = json.dumps({"Path": "/payloadstore/tokens", "NextToken": "a b+c"}).encode()
    ours = client.signed_headers("GetParametersByPath", body, now=FROZEN)

    url = f"{client.scheme}://{client.host}{client.path}"
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": "AmazonSSM.GetParametersByPath",
        },
    )
    SigV4Auth(Credentials(AKID, SECRET, token), "ssm", region).add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["X-Amz-Date"] == request.headers["X-Amz-Date"]
    assert ours.get("X-Amz-Security-Token") == request.headers.get("X-Amz-Security-Token")


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:45123"])
def test_secrets_manager_signature_is_botocores(monkeypatch, endpoint):
    frozen_time(monkeypatch)
    client = SecretsManagerHttpClient("eu-west-1", endpoint, credentials=(AKID, SECRET, "tok"))
    body = json.dumps({"SecretId": "arn:aws:secretsmanager:eu-west-1:1:secret:x"}).encode()
    ours = client.signed_headers("GetSecretValue", body, now=FROZEN)
    request = AWSRequest(
        method="POST",
        url=f"{client.scheme}://{client.host}{client.path}",
        data=body,
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": "secretsmanager.GetSecretValue",
        },
    )
    SigV4Auth(Credentials(AKID, SECRET, "tok"), "secretsmanager", "eu-west-1").add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]
    if endpoint is None:
        assert client.host == "secretsmanager.eu-west-1.amazonaws.com"


def test_secret_value_is_the_string_else_the_binary():
    client = SecretsManagerHttpClient("us-east-1", credentials=(AKID, SECRET, None))
    answers = Answers(client, [(200, {"SecretString": "pw"}), (200, {"SecretBinary": "AAE="})])
    assert client.secret_value("s") == "pw"
    assert client.secret_value("s") == b"\x00\x01"
    assert answers.sent[0] == {"target": "secretsmanager.GetSecretValue", "SecretId": "s"}


def test_secrets_manager_endpoint_from_environment():
    env = {
        "AWS_ACCESS_KEY_ID": AKID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_SSM": "http://127.0.0.1:5000",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:5002",
    }
    client = SecretsManagerHttpClient.from_environment(env)
    assert client is not None and client.host == "127.0.0.1:5002"
    ssm = SsmHttpClient.from_environment(env)
    assert ssm is not None and ssm.host == "127.0.0.1:5000"


def test_default_endpoint_is_the_regional_one():
    client = SsmHttpClient("eu-central-1", credentials=(AKID, SECRET, None))
    assert (client.scheme, client.host, client.path) == (
        "https",
        "ssm.eu-central-1.amazonaws.com",
        "/",
    )


@pytest.mark.parametrize(
    "env,expected",
    [
        (
            {"AWS_ACCESS_KEY_ID": AKID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "eu-west-1"},
            "https://ssm.eu-west-1.amazonaws.com",
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL_SSM": "http://127.0.0.1:5000",
            },
            "http://127.0.0.1:5000",
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": "http://127.0.0.1:5001",
            },
            "http://127.0.0.1:5001",
        ),
        # Left to botocore: no keys, no region, FIPS, dual-stack, another partition, or
        # configured endpoints switched off.
        ({"AWS_REGION": "us-east-1"}, None),
        ({"AWS_ACCESS_KEY_ID": AKID, "AWS_SECRET_ACCESS_KEY": SECRET}, None),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "us-east-1",
                "AWS_USE_FIPS_ENDPOINT": "true",
            },
            None,
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "us-east-1",
                "AWS_USE_DUALSTACK_ENDPOINT": "true",
            },
            None,
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "cn-north-1",
            },
            None,
        ),
        # A proxy botocore would use, or the opt-out
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "us-east-1",
                "HTTPS_PROXY": "http://proxy.internal:3128",
            },
            None,
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "us-east-1",
                "PAYLOADSTORE_DIRECT_AWS": "0",
            },
            None,
        ),
        (
            {
                "AWS_ACCESS_KEY_ID": AKID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": "cn-north-1",
                "AWS_ENDPOINT_URL_SSM": "http://127.0.0.1:5000",
                "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
            },
            None,
        ),
    ],
)
def test_from_environment(env, expected):
    client = SsmHttpClient.from_environment(env)
    if expected is None:
        assert client is None
    else:
        assert client is not None
        assert f"{client.scheme}://{client.host}" == expected


class Answers:
    """Stands in for the HTTP exchange: a list of (status, body) or exceptions, in order."""

    def __init__(self, client: SsmHttpClient, answers: list):
        self.answers = list(answers)
        self.sent: list[dict] = []
        client._send = self.send  # type: ignore[method-assign]

    def send(self, headers: dict, body: bytes):
        self.sent.append({"target": headers["X-Amz-Target"], **json.loads(body)})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, value = answer
        return status, json.dumps(value).encode()


def test_pages_follow_next_token(monkeypatch):
    client = SsmHttpClient("us-east-1", credentials=(AKID, SECRET, None))
    answers = Answers(
        client,
        [
            (200, {"Parameters": [{"Name": "/p/a", "Value": "1"}], "NextToken": "t1"}),
            (200, {"Parameters": [{"Name": "/p/b", "Value": "2"}]}),
        ],
    )
    pages = list(client.get_paginator("get_parameters_by_path").paginate(Path="/p"))
    assert [p["Parameters"][0]["Name"] for p in pages] == ["/p/a", "/p/b"]
    assert answers.sent == [
        {"target": "AmazonSSM.GetParametersByPath", "Path": "/p"},
        {"target": "AmazonSSM.GetParametersByPath", "Path": "/p", "NextToken": "t1"},
    ]


def test_throttling_5xx_and_connection_errors_are_tried_again(monkeypatch):
    monkeypatch.setattr(aws_http.time, "sleep", lambda s: None)
    client = SsmHttpClient("us-east-1", credentials=(AKID, SECRET, None))
    Answers(
        client,
        [
            (400, {"__type": "com.amazonaws.ssm#ThrottlingException", "message": "slow down"}),
            ConnectionRefusedError("refused"),
            (200, {"Parameters": []}),
        ],
    )
    assert client.call("GetParametersByPath", {"Path": "/p"}) == {"Parameters": []}

    Answers(client, [(503, {}), (500, {}), (502, {})])
    with pytest.raises(AwsRequestError) as err:
        client.call("GetParametersByPath", {"Path": "/p"})
    assert err.value.status == 502


def test_other_errors_are_raised_at_once():
    client = SsmHttpClient("us-east-1", credentials=(AKID, SECRET, None))
    answers = Answers(
        client,
        [(400, {"__type": "AccessDeniedException", "message": "not allowed"}), (200, {})],
    )
    with pytest.raises(AwsRequestError) as err:
        client.call("GetParametersByPath", {"Path": "/p"})
    assert (err.value.code, err.value.status) == ("AccessDeniedException", 400)
    assert len(answers.sent) == 1


def test_other_operations_go_to_botocore(monkeypatch):
    client = SsmHttpClient("us-east-1", credentials=(AKID, SECRET, None))

    class Fake:
        exceptions = "botocore exceptions"

        def put_parameter(self, **kw):
            return "put"

        def get_paginator(self, name):
            return f"botocore {name}"

    monkeypatch.setattr(client, "_botocore", Fake())
    assert client.put_parameter(Name="x") == "put"
    assert client.exceptions == "botocore exceptions"
    assert client.get_paginator("describe_parameters") == "botocore describe_parameters"


def test_one_tls_context_per_process():
    # Loading the CA certificates costs ~30 ms of CPU: once, not on every token refresh
    import ssl

    from payloadstore_controlplane.store.aws_http import _tls_context

    context = _tls_context(None)
    assert context is _tls_context(None)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize(
    "raw,expected",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", (200, b"{}")),
        (b"HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\nX: y\r\n\r\nabcdEXTRA", (400, b"abcd")),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n",
            (200, b"abcde"),
        ),
        (b"HTTP/1.0 503 Slow Down\r\nServer: x\r\n\r\nuntil close", (503, b"until close")),
    ],
)
def test_parse_response(raw, expected):
    assert aws_http.parse_response(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # cut
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # cut chunk
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2",  # no end of headers
    ],
)
def test_parse_response_refuses_cut_or_malformed_answers(raw):
    with pytest.raises(OSError):
        aws_http.parse_response(raw)


def test_host_port():
    assert aws_http._host_port("ssm.eu-west-1.amazonaws.com", 443) == (
        "ssm.eu-west-1.amazonaws.com",
        443,
    )
    assert aws_http._host_port("127.0.0.1:5000", 80) == ("127.0.0.1", 5000)
    assert aws_http._host_port("[::1]:5000", 80) == ("::1", 5000)
    assert aws_http._host_port("[::1]", 443) == ("::1", 443)
