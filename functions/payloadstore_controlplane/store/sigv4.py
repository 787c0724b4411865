"""SigV4 (AWS4-HMAC-SHA256), computed in one place for every request signed in-process: the
header-signed AWS JSON calls of `aws_http.py`, the S3 HEAD and the query-signed presigned URLs of
`s3/signer.py`. Each caller's tests hold its output equal to botocore's signer
(tests/unit/test_aws_http.py, test_s3_head.py, test_presign_signer.py)."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
# Regions of the aws partition (amazonaws.com); any other partition is left to botocore.
STANDARD_REGION = re.compile(r"^(us|eu|ap|sa|ca|me|af|il|mx)-[a-z]+-\d+$")


Credentials = tuple[str, str, str | None]

# The credentials of the invocation running in this context, where its runtime says so. Never set
# in Lambda: there the function's role keys are in its environment. The local gateway (and the
# integration tests) run every function in one process, so each invocation runs under its own
# function's local keys (payloadstore_devstack.s3_credentials.function_credentials), which the
# local S3 emulator maps to that function's grants. A thread the handler starts itself begins
# with an empty context and signs with the process's environment keys.
_invocation_credentials: ContextVar[Credentials | None] = ContextVar(
    "payloadstore_invocation_credentials", default=None
)


def invocation_credentials() -> Credentials | None:
    """The credentials set for this invocation (see above), or None: use the environment's."""
    return _invocation_credentials.get()


@contextmanager
def invocation_running_as(credentials: Credentials) -> Iterator[None]:
    """Run the block as one function would: S3 and AWS calls signed with `credentials`."""
    token = _invocation_credentials.set(credentials)
    try:
        yield
    finally:
        _invocation_credentials.reset(token)


def environment_credentials() -> Credentials | None:
    """(access key, secret, session token) from this process's environment, as Lambda sets them
    for the function's role, or None when the keys are not there. An invocation's own
    credentials (invocation_running_as) come first."""
    own = _invocation_credentials.get()
    if own is not None:
        return own
    akid, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (akid and secret):
        return None
    return akid, secret, os.environ.get("AWS_SESSION_TOKEN") or None


def amz_date(now: float | None = None) -> str:
    """`20261201T215748Z`: the request's time as SigV4 signs it."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))


def scope(stamp: str, region: str, service: str) -> str:
    return f"{stamp[:8]}/{region}/{service}/aws4_request"


@lru_cache(maxsize=8)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The day's signing key (four HMACs), derived once per secret, day, region and service."""
    key = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def canonical_headers(headers: Mapping[str, str]) -> tuple[str, str]:
    """(canonical header block, signed header names) of the headers to sign: names lower-cased
    and sorted, runs of whitespace in values collapsed."""
    signed = sorted((name.lower(), " ".join(str(value).split())) for name, value in headers.items())
    return "".join(f"{n}:{v}\n" for n, v in signed), ";".join(n for n, _ in signed)


def signature(secret: str, stamp: str, region: str, service: str, canonical_request: str) -> str:
    string_to_sign = (
        f"{ALGORITHM}\n{stamp}\n{scope(stamp, region, service)}\n"
        + hashlib.sha256(canonical_request.encode()).hexdigest()
    )
    key = signing_key(secret, stamp[:8], region, service)
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def authorization(
    method: str,
    path: str,
    headers: Mapping[str, str],
    payload_sha256: str,
    *,
    credentials: tuple[str, str],
    stamp: str,
    region: str,
    service: str,
    query: str = "",
) -> str:
    """The Authorization header of a request whose every header in `headers` is signed."""
    access_key, secret = credentials
    block, names = canonical_headers(headers)
    canonical_request = f"{method}\n{path}\n{query}\n{block}\n{names}\n{payload_sha256}"
    sig = signature(secret, stamp, region, service, canonical_request)
    return (
        f"{ALGORITHM} Credential={access_key}/{scope(stamp, region, service)}, "
        f"SignedHeaders={names}, Signature={sig}"
    )
