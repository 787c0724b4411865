"""The in-process AWS clients against the local emulator: the Redis AUTH secret and the token
hashes read as botocore reads them."""

from __future__ import annotations

import uuid

import boto3

from payloadstore_controlplane.store.aws_http import (
    SecretsManagerHttpClient,
    SsmHttpClient,
    secret_value,
)
from tests.support.env import patched_environ


def test_secret_value_reads_the_secret(aws_env, moto_server):
    sm = boto3.client("secretsmanager", endpoint_url=moto_server.endpoint)
    name = f"payloadstore-test/redis-auth-{uuid.uuid4().hex[:8]}"
    arn = sm.create_secret(Name=name, SecretString="s3cret pass/word")["ARN"]
    with patched_environ({"AWS_ENDPOINT_URL_SECRETS_MANAGER": moto_server.endpoint}):
        assert isinstance(SecretsManagerHttpClient.from_environment(), SecretsManagerHttpClient)
        assert secret_value(arn) == "s3cret pass/word"
        assert secret_value(name) == "s3cret pass/word"


def test_parameters_by_path_pages_like_botocore(aws_env, moto_server, ssm_client):
    path = f"/payloadstore-test/paging-{uuid.uuid4().hex[:8]}"
    for i in range(23):  # three pages of at most 10
        ssm_client.put_parameter(Name=f"{path}/p{i:02d}", Value=str(i), Type="String")
    client = SsmHttpClient.from_environment()
    assert client is not None
    ours = [
        p["Name"]
        for page in client.get_paginator("get_parameters_by_path").paginate(Path=path)
        for p in page["Parameters"]
    ]
    theirs = [
        p["Name"]
        for page in ssm_client.get_paginator("get_parameters_by_path").paginate(Path=path)
        for p in page["Parameters"]
    ]
    assert sorted(ours) == sorted(theirs) and len(ours) == 23


def test_https_with_a_verified_certificate_and_a_chunked_answer(tmp_path, monkeypatch):
    # Given an HTTPS endpoint whose certificate a CA bundle of our own vouches for (as
    # AWS_CA_BUNDLE names one), answering in chunks
    import json
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from payloadstore_controlplane.store import aws_http
    from tests.integration.test_redis_client import _certs

    certs = _certs(tmp_path, "DNS:localhost")
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"target": self.headers["X-Amz-Target"], **json.loads(body)})
            answer = json.dumps({"Parameters": [{"Name": "/p/a", "Value": "1"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (answer[:10], answer[10:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["cert"], certs["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        monkeypatch.setenv("AWS_CA_BUNDLE", certs["ca"])
        client = SsmHttpClient("us-east-1", f"https://localhost:{port}", ("AKID", "SECRET", None))
        # When the tokens are read from it, Then the answer comes whole
        pages = list(client.get_paginator("get_parameters_by_path").paginate(Path="/p"))
        assert pages == [{"Parameters": [{"Name": "/p/a", "Value": "1"}]}]
        assert seen == [{"target": "AmazonSSM.GetParametersByPath", "Path": "/p"}]
        # And a name the certificate does not carry is refused (on every attempt)
        monkeypatch.setattr(aws_http.time, "sleep", lambda s: None)
        wrong = SsmHttpClient("us-east-1", f"https://127.0.0.1:{port}", ("AKID", "SECRET", None))
        try:
            wrong.call("GetParametersByPath", {"Path": "/p"})
        except aws_http.AwsRequestError as e:
            assert "certificate" in str(e).lower() or "SSL" in str(e)
        else:
            raise AssertionError("a certificate for another name was accepted")
        assert len(seen) == 1
    finally:
        server.shutdown()
