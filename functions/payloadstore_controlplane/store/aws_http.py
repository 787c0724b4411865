"""AWS calls of the cold-start path, SigV4-signed in-process and sent with the standard library.

Two AWS reads happen on a cold start: the authorizer's GetParametersByPath (the token hashes,
SSM; GetParameter for a token the listing does not know) and, in a deployed stack, every API function's GetSecretValue (the ElastiCache AUTH token,
Secrets Manager). Through botocore each costs ~0.25 s of CPU on a cold start (importing botocore
~170 ms, loading the service model and building the client ~70 ms; Powertools' parameters
utility adds boto3), more than the rest of the authorizer's cold start. `AwsJsonClient` sends the
same request (AWS JSON 1.1 protocol, SigV4 header signing, byte for byte what botocore's
SigV4Auth signs: tests/unit/test_aws_http.py holds the two equal) over a socket of its own.

`SsmHttpClient` answers `get_paginator("get_parameters_by_path").paginate(Path=...)` and
`get_parameter(Name=...)` like a botocore client; everything else (put_parameter, delete_parameter, `exceptions`: the admin
function's mint and revoke) goes to a botocore client created on first use. `secret_value` reads
one secret. `from_environment` returns None when the environment leaves the endpoint or the
credentials to botocore's own resolution (no keys in the environment, no region, FIPS or
dual-stack endpoints, a partition other than aws): the callers then use botocore (Powertools for
the secret), as before.

Failures: throttling, 5xx answers and connection errors are tried again (ATTEMPTS in all, with
jittered backoff, as botocore's standard retry mode does); any other error answer, or the last
failed attempt, raises `AwsRequestError`, which goes where botocore's ClientError went (the
authorizer fails, API Gateway answers 500; an API function answers 500 internal_error).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import random
import time
from collections.abc import Iterator, Mapping
from typing import Any, Self

from . import sigv4

JSON_CONTENT_TYPE = "application/x-amz-json-1.1"
# Per attempt: well inside the authorizer's timeout even when tried again.
TIMEOUT_S = 3.0
ATTEMPTS = 3
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
_TRUE = ("1", "true", "yes", "on")
_PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
# PAYLOADSTORE_DIRECT_AWS=0: every AWS call through botocore, as before this module existed.
OPT_OUT_ENV = "PAYLOADSTORE_DIRECT_AWS"


def direct_calls_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an AWS call may go out signed here, on a socket of its own: not behind a proxy
    (botocore honours the proxy variables), not on FIPS or dual-stack endpoints (botocore picks
    those hosts), and not opted out with PAYLOADSTORE_DIRECT_AWS=0."""
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_ENV, "") in ("0", "off") or any(env.get(n) for n in _PROXY_ENV):
        return False
    return not any(
        env.get(name, "").lower() in _TRUE
        for name in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")
    )


class AwsRequestError(RuntimeError):
    """The service refused the request, or could not be reached on any attempt."""

    def __init__(self, message: str, code: str = "", status: int = 0):
        super().__init__(message)
        self.code = code
        self.status = status


def _env_endpoint(environ: dict[str, str] | os._Environ[str], env_name: str) -> str | None:
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() in _TRUE:
        return None
    return environ.get(f"AWS_ENDPOINT_URL_{env_name}") or environ.get("AWS_ENDPOINT_URL") or None


class AwsJsonClient:
    """One AWS JSON 1.1 service: `call(operation, params)` -> the parsed answer."""

    SERVICE = ""  # signing name and endpoint prefix, e.g. "ssm"
    TARGET_PREFIX = ""  # X-Amz-Target before the operation, e.g. "AmazonSSM."
    ENDPOINT_ENV = ""  # AWS_ENDPOINT_URL_<this>: botocore's name for the service's endpoint

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        credentials: tuple[str, str, str | None] | None = None,
    ):
        self.region = region
        url = (endpoint_url or f"https://{self.SERVICE}.{region}.amazonaws.com").rstrip("/")
        scheme, _, rest = url.partition("://")
        if scheme not in ("http", "https") or not rest:
            raise ValueError(f"not an http(s) endpoint: {endpoint_url!r}")
        netloc, slash, prefix = rest.partition("/")
        self.scheme = scheme
        self.path = "/" + prefix if slash and prefix else "/"
        default_port = {"http": ":80", "https": ":443"}[scheme]
        self.host = netloc.removesuffix(default_port)
        self._credentials = credentials

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> Self | None:
        """A client for this process's environment, or None where botocore must resolve the
        endpoint or the credentials itself."""
        env = os.environ if environ is None else environ
        if not (env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")):
            return None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if not region:
            return None
        if not direct_calls_allowed(env):
            return None
        endpoint = _env_endpoint(env, cls.ENDPOINT_ENV)
        if endpoint is None and not sigv4.STANDARD_REGION.match(region):
            return None
        return cls(region, endpoint)

    # -- the request ---------------------------------------------------------------------------

    def _current_credentials(self) -> tuple[str, str, str | None]:
        if self._credentials is not None:
            return self._credentials
        found = sigv4.environment_credentials()
        if found is None:
            raise AwsRequestError("no AWS credentials in the environment to sign with")
        return found

    def signed_headers(self, operation: str, body: bytes, now: float | None = None) -> dict:
        """The request's headers with SigV4's Authorization, as botocore's SigV4Auth signs them
        (every header sent is signed; the payload hash is the body's sha256)."""
        access_key, secret, token = self._current_credentials()
        stamp = sigv4.amz_date(now)
        headers = {
            "Content-Type": JSON_CONTENT_TYPE,
            "Host": self.host,
            "X-Amz-Date": stamp,
            "X-Amz-Target": self.TARGET_PREFIX + operation,
        }
        if token:
            headers["X-Amz-Security-Token"] = token
        headers["Authorization"] = sigv4.authorization(
            "POST",
            self.path,
            headers,
            hashlib.sha256(body).hexdigest(),
            credentials=(access_key, secret),
            stamp=stamp,
            region=self.region,
            service=self.SERVICE,
        )
        return headers

    def call(self, operation: str, params: dict) -> dict:
        """One operation (PascalCase name, e.g. GetParametersByPath), its parsed answer."""
        body = json.dumps(params, separators=(",", ":")).encode()
        last: AwsRequestError | None = None
        for attempt in range(ATTEMPTS):
            if attempt:
                # Full jitter, as botocore's standard mode: up to 0.1 s, 0.2 s, ...
                time.sleep(random.random() * min(0.1 * 2 ** (attempt - 1), 2.0))
            try:
                status, data = self._send(self.signed_headers(operation, body), body)
            except OSError as e:  # timeouts, refused or cut connections, TLS errors
                last = AwsRequestError(f"{self.SERVICE} {operation}: {type(e).__name__}: {e}")
                continue
            if status == 200:
                return json.loads(data) if data.strip() else {}
            code, message = _error_of(data)
            last = AwsRequestError(
                f"{self.SERVICE} {operation} answered {status} {code}: {message}", code, status
            )
            if status < 500 and code not in RETRYABLE_CODES:
                raise last
        assert last is not None
        raise last

    def _send(self, headers: dict, body: bytes) -> tuple[int, bytes]:
        """POST the request on a connection of its own and read the answer to its end.

        HTTP/1.1 with `Connection: close`, written by hand: `http.client` would import the
        email package to parse headers (~10 ms of a cold start) for one small JSON answer. A
        connection per call is fine at one call per TOKEN_CACHE_S (the tokens) or per container
        (the Redis secret)."""
        import socket

        host, port = _host_port(self.host, 443 if self.scheme == "https" else 80)
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = (
            f"POST {self.path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1") + body
        sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
        try:
            if self.scheme == "https":
                context = _tls_context(os.environ.get("AWS_CA_BUNDLE") or None)
                sock = context.wrap_socket(sock, server_hostname=host)
            sock.sendall(request)
            received = []
            while chunk := sock.recv(65536):
                received.append(chunk)
        finally:
            sock.close()
        return parse_response(b"".join(received))


def _host_port(netloc: str, default_port: int) -> tuple[str, int]:
    if netloc.startswith("["):  # [IPv6]:port
        host, _, rest = netloc[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, _, port = netloc.partition(":")
    return host, int(port) if port else default_port


def parse_response(raw: bytes) -> tuple[int, bytes]:
    """(status, body) of a whole HTTP/1.1 answer; OSError when it is cut or malformed (the call
    is then tried again, like a connection error)."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise OSError("malformed HTTP answer")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = bytearray()
        pos = 0
        try:
            while True:
                end = rest.index(b"\r\n", pos)
                size = int(rest[pos:end].split(b";", 1)[0], 16)
                if size == 0:
                    break
                start = end + 2
                if len(rest) < start + size:
                    raise ValueError("cut chunk")
                body += rest[start : start + size]
                pos = start + size + 2
        except ValueError as e:
            raise OSError(f"malformed chunked HTTP answer: {e}") from e
        return int(parts[1]), bytes(body)
    length = fields.get(b"content-length")
    if length is not None:
        if not length.isdigit() or len(rest) < int(length):
            raise OSError("HTTP answer cut short")
        return int(parts[1]), rest[: int(length)]
    return int(parts[1]), rest


@functools.lru_cache(maxsize=2)
def _tls_context(cafile: str | None):
    """One TLS context per process (per CA bundle): loading the CA certificates costs ~30 ms of
    CPU, paid once, not on every token refresh."""
    import ssl

    return ssl.create_default_context(cafile=cafile)


def _error_of(data: bytes) -> tuple[str, str]:
    try:
        value = json.loads(data)
    except ValueError:
        return "", data[:200].decode("utf-8", "replace")
    if not isinstance(value, dict):
        return "", str(value)[:200]
    code = str(value.get("__type") or value.get("code") or "").rpartition("#")[2]
    return code, str(value.get("message") or value.get("Message") or "")


class SsmHttpClient(AwsJsonClient):
    """SSM Parameter Store, shaped like botocore's client for what the token store reads."""

    SERVICE = "ssm"
    TARGET_PREFIX = "AmazonSSM."
    ENDPOINT_ENV = "SSM"

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        credentials: tuple[str, str, str | None] | None = None,
    ):
        super().__init__(region, endpoint_url, credentials)
        self._botocore: Any = None

    # -- what the token store uses, shaped like a botocore client ------------------------------

    def get_paginator(self, operation: str):
        if operation == "get_parameters_by_path":
            return _ParametersByPath(self)
        return self._client().get_paginator(operation)

    def get_parameter(self, **params) -> dict:
        """GetParameter, signed here: the authorizer's by-name read of one token's hash. A
        missing parameter raises AwsRequestError with code `ParameterNotFound`."""
        return self.call("GetParameter", params)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._client(), name)

    def _client(self):
        """botocore's SSM client, for every operation but GetParametersByPath (created once)."""
        if self._botocore is None:
            import botocore.session

            self._botocore = botocore.session.get_session().create_client(
                self.SERVICE, region_name=self.region
            )
        return self._botocore


class SecretsManagerHttpClient(AwsJsonClient):
    SERVICE = "secretsmanager"
    TARGET_PREFIX = "secretsmanager."
    ENDPOINT_ENV = "SECRETS_MANAGER"

    def secret_value(self, secret_id: str) -> str | bytes:
        """The secret's current value: its string, else its binary (what Powertools'
        `parameters.get_secret` answers)."""
        answer = self.call("GetSecretValue", {"SecretId": secret_id})
        if "SecretString" in answer:
            return answer["SecretString"]
        return base64.b64decode(answer["SecretBinary"])


def secret_value(secret_id: str) -> str | bytes:
    """A Secrets Manager secret, read with one signed request where the environment allows
    (Lambda's does), else through Powertools (boto3), as before."""
    client = SecretsManagerHttpClient.from_environment()
    if client is None:
        from aws_lambda_powertools.utilities import parameters

        return parameters.get_secret(secret_id, max_age=3600)
    return client.secret_value(secret_id)


class _ParametersByPath:
    """botocore's `get_parameters_by_path` paginator, for the arguments the token store uses."""

    def __init__(self, client: SsmHttpClient):
        self._client = client

    def paginate(self, **params) -> Iterator[dict]:
        if "PaginationConfig" in params:
            yield from (
                self._client._client().get_paginator("get_parameters_by_path").paginate(**params)
            )
            return
        request = dict(params)
        while True:
            page = self._client.call("GetParametersByPath", request)
            yield page
            token = page.get("NextToken")
            if not token:
                return
            request["NextToken"] = token
