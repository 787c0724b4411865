"""The S3 HEAD signed in-process: S3's signature check accepts it (botocore's signer recomputes
it over the request as received), connections are kept, and what it does not settle goes to
the client as before."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from payloadstore_controlplane.store.s3.connections import HeadConnections, direct_head_allowed
from payloadstore_controlplane.store.s3.objects import ObjectInfo
from payloadstore_controlplane.store.s3.signer import SigV4Presigner
from payloadstore_controlplane.store.s3_objects import S3Objects

KEY = "payloads/2026/11/29/01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
CREDS = Credentials("AKIDEXAMPLE", SECRET, "token/with+odd=chars")
OK = (
    "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nContent-Type: application/msgpack\r\n"
    "x-amz-checksum-sha256: q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=\r\n\r\n"
)


def botocore_signature(method: str, host: str, path: str, headers: dict, region: str) -> str:
    """What S3 computes for a header-signed request: botocore's signer over what arrived."""
    signed = {k: v for k, v in headers.items() if k != "authorization"}
    request = AWSRequest(method=method, url=f"http://{host}{path}", headers=signed)
    request.context["timestamp"] = headers["x-amz-date"]
    signer = S3SigV4Auth(Credentials(CREDS.access_key, CREDS.secret_key, CREDS.token), "s3", region)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


class FakeS3:
    """One HTTP/1.1 listener: checks each HEAD's SigV4 signature, answers from `answers`."""

    def __init__(self, answers: list[str], close_after_each: bool = False):
        self.answers = answers
        self.close_after_each = close_after_each
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                self.requests.append({"method": method, "path": target, "headers": headers})
                answer = self.answers.pop(0) if self.answers else OK
                if answer == "drop":
                    return
                conn.sendall(answer.encode("latin-1"))
                if self.close_after_each:
                    return

    def close(self) -> None:
        self.listener.close()


class CountingClient:
    """The botocore client's head_object, counted (the fallback)."""

    def __init__(self, answer: dict | None = None):
        self.calls = 0
        self.answer = answer or {"ContentLength": 7, "ChecksumSHA256": None, "ContentType": None}

    def head_object(self, **params):
        self.calls += 1
        return self.answer


@pytest.fixture
def fake_s3():
    servers = []

    def make(*answers: str, close_after_each: bool = False) -> FakeS3:
        server = FakeS3(list(answers), close_after_each)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def objects_for(server: FakeS3, client: Any = None) -> S3Objects:
    endpoint = f"http://127.0.0.1:{server.port}"
    return S3Objects(
        client or CountingClient(),
        "payloadstore-payloads",
        900,
        SigV4Presigner("eu-west-1", endpoint, CREDS),
    )


def test_head_is_signed_as_s3_checks_it_and_answers_size_and_checksum(fake_s3):
    # Given an S3 that answers 200 with a length and a sha256 checksum
    server = fake_s3()
    objects = objects_for(server)
    # When the object is HEAD-ed
    info = objects.head(KEY)
    # Then the request asked for the checksum, and its signature is the one S3 computes
    request = server.requests[0]
    assert request["method"] == "HEAD"
    assert request["path"] == f"/payloadstore-payloads/{KEY}"
    headers = request["headers"]
    assert headers["x-amz-checksum-mode"] == "ENABLED"
    assert headers["x-amz-security-token"] == CREDS.token
    expected = botocore_signature("HEAD", headers["host"], request["path"], headers, "eu-west-1")
    assert headers["authorization"].endswith(f"Signature={expected}")
    assert (
        "SignedHeaders=host;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date;"
        in (headers["authorization"])
    )
    # And the answer is read as the client reads it
    assert info == ObjectInfo(
        size=1_048_576,
        sha256_b64="q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=",
        content_type="application/msgpack",
    )


def test_a_key_with_characters_to_encode_is_signed_over_its_encoded_path(fake_s3):
    server = fake_s3()
    objects = objects_for(server)
    objects.head("payloads/a b+c=d~e/args")
    request = server.requests[0]
    assert request["path"] == "/payloadstore-payloads/payloads/a%20b%2Bc%3Dd~e/args"
    headers = request["headers"]
    expected = botocore_signature("HEAD", headers["host"], request["path"], headers, "eu-west-1")
    assert headers["authorization"].endswith(f"Signature={expected}")


def test_virtual_hosted_aws_target_matches_the_presigned_urls():
    presigner = SigV4Presigner("eu-west-1", None, CREDS)
    scheme, host, path, headers = presigner.head_request("payloadstore-payloads", KEY)
    assert (scheme, host, path) == (
        "https",
        "payloadstore-payloads.s3.eu-west-1.amazonaws.com",
        f"/{KEY}",
    )
    assert headers["host"] == host
    url = presigner.url("GET", "payloadstore-payloads", KEY, 60)
    assert url.startswith(f"https://{host}{path}?")


def test_missing_object_is_none(fake_s3):
    server = fake_s3("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    client = CountingClient()
    assert objects_for(server, client).head(KEY) is None
    assert client.calls == 0


def test_connections_are_kept_between_heads(fake_s3):
    server = fake_s3()
    objects = objects_for(server)
    for _ in range(5):
        assert objects.head(KEY).size == 1_048_576
    assert server.connections == 1 and len(server.requests) == 5


def test_a_server_that_closes_each_connection_gets_a_new_one_each_time(fake_s3):
    server = fake_s3(
        *[OK.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")] * 3, close_after_each=True
    )
    client = CountingClient()
    objects = objects_for(server, client)
    for _ in range(3):
        assert objects.head(KEY).size == 1_048_576
    assert server.connections == 3 and client.calls == 0


def test_a_kept_connection_closed_while_idle_is_replaced_once(fake_s3):
    # Given a connection kept from a first HEAD, which the server then drops unanswered
    server = fake_s3(OK, "drop")
    client = CountingClient()
    objects = objects_for(server, client)
    objects.head(KEY)
    # When the next HEAD finds it dead, Then a new connection answers it, without the client
    assert objects.head(KEY).size == 1_048_576
    assert server.connections == 2 and client.calls == 0


@pytest.mark.parametrize(
    "answer",
    [
        "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: us-west-2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\n\r\n",  # no length
        "garbage\r\n\r\n",
        "drop",
    ],
)
def test_anything_else_goes_to_the_client_as_before(fake_s3, answer):
    # Given an answer the signed HEAD does not settle (or none, on a fresh connection)
    server = fake_s3(answer)
    client = CountingClient({"ContentLength": 7, "ChecksumSHA256": "x", "ContentType": "t"})
    # When HEAD-ing, Then the client's head_object decides (its retries, its error mapping)
    info = objects_for(server, client).head(KEY)
    assert client.calls == 1
    assert info == ObjectInfo(size=7, sha256_b64="x", content_type="t")


def test_no_server_at_all_goes_to_the_client():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    client = CountingClient()
    objects = S3Objects(
        client,
        "payloadstore-payloads",
        900,
        SigV4Presigner("eu-west-1", f"http://127.0.0.1:{port}", CREDS),
    )
    objects.head(KEY)
    assert client.calls == 1


def test_without_a_presigner_the_client_heads():
    client = CountingClient()
    assert S3Objects(client, "payloadstore-payloads", 900).head(KEY).size == 7
    assert client.calls == 1


def test_connections_answer_status_and_lower_case_fields(fake_s3):
    server = fake_s3("HTTP/1.1 200 OK\r\nX-Amz-Checksum-SHA256: abc\r\nContent-Length: 3\r\n\r\n")
    status, fields = HeadConnections().head(
        "http", f"127.0.0.1:{server.port}", "/b/k", {"host": f"127.0.0.1:{server.port}"}
    )
    assert status == 200 and fields["x-amz-checksum-sha256"] == "abc"
    assert fields["content-length"] == "3"


@pytest.mark.parametrize(
    "env",
    [
        {"HTTPS_PROXY": "http://proxy:3128"},
        {"http_proxy": "http://proxy:3128"},
        {"PAYLOADSTORE_DIRECT_AWS": "0"},
        {"AWS_USE_FIPS_ENDPOINT": "true"},
        {"AWS_USE_DUALSTACK_ENDPOINT": "1"},
    ],
)
def test_proxy_opt_out_fips_and_dualstack_leave_the_head_to_the_client(fake_s3, monkeypatch, env):
    assert direct_head_allowed({}) and not direct_head_allowed(env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server = fake_s3()
    client = CountingClient()
    objects_for(server, client).head(KEY)
    assert client.calls == 1 and not server.requests


def test_a_connection_idle_too_long_is_not_reused(fake_s3, monkeypatch):
    # The clock is fixed from the first request on: what the real monotonic clock reads (time
    # since boot) must not decide whether the first connection looks idle.
    clock = [1000.0]
    monkeypatch.setattr(
        "payloadstore_controlplane.store.s3.connections.time.monotonic", lambda: clock[0]
    )
    server = fake_s3()
    objects = objects_for(server)
    objects.head(KEY)
    # a connection kept at t=1000 ...
    objects.head(KEY)
    # ... and asked for again past MAX_IDLE_S
    clock[0] += HeadConnections.MAX_IDLE_S + 1
    objects.head(KEY)
    assert server.connections == 2 and len(server.requests) == 3


def test_a_connection_the_server_closed_while_idle_is_not_written_to(fake_s3):
    # Given a server that closes after each answer without saying so
    server = fake_s3(close_after_each=True)
    client = CountingClient()
    objects = objects_for(server, client)
    objects.head(KEY)
    import time

    time.sleep(0.05)  # the server's close arrives
    # When the next HEAD comes, Then it goes out on a new connection, answered once
    assert objects.head(KEY).size == 1_048_576
    assert server.connections == 2 and len(server.requests) == 2 and client.calls == 0


TAGGING_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet>'
    "<Tag><Key>payloadstore-retention</Key><Value>7d</Value></Tag>"
    "</TagSet></Tagging>"
)


def _answer_with_body(body: str) -> str:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body.encode())}\r\n\r\n{body}"
    )


def test_tags_are_read_signed_as_s3_checks_them_on_the_kept_connection(fake_s3):
    # Given an S3 that answers a HEAD, then a GetObjectTagging with one tag
    server = fake_s3(OK, _answer_with_body(TAGGING_XML))
    objects = objects_for(server)
    # When the object is HEAD-ed, then its tags read (the namespace policy's check)
    objects.head(KEY)
    tags = objects.tags(KEY)
    # Then the tags are the answer's, read without the client, over the same connection
    assert tags == {"payloadstore-retention": "7d"}
    assert server.connections == 1
    request = server.requests[1]
    assert request["method"] == "GET"
    assert request["path"] == f"/payloadstore-payloads/{KEY}?tagging"
    # And its signature is the one S3 computes for GET ?tagging
    headers = request["headers"]
    expected = botocore_signature("GET", headers["host"], request["path"], headers, "eu-west-1")
    assert headers["authorization"].endswith(f"Signature={expected}")


def test_tags_of_a_missing_object_are_none_and_an_odd_answer_goes_to_the_client(fake_s3):
    class TaggingClient:
        calls = 0

        def get_object_tagging(self, **params):
            TaggingClient.calls += 1
            return {"TagSet": [{"Key": "k", "Value": "v"}]}

    server = fake_s3(
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", _answer_with_body("nope")
    )
    objects = objects_for(server, TaggingClient())
    assert objects.tags(KEY) is None
    assert objects.tags(KEY) == {"k": "v"}
    assert TaggingClient.calls == 1
