"""botocore's S3 client (the fallback of the signed HEAD, the multipart calls, CopyObject, health
checks), created on first use, once per container; boto3 is not needed at all."""

from __future__ import annotations

from typing import Any

from ...runtime.once import built_once
from .. import sigv4


@built_once(maxsize=16)
def cached_s3_client(
    region: str,
    endpoint_url: str | None,
    credentials: sigv4.Credentials | None = None,
    read_timeout_s: int = 5,
):
    """botocore's S3 client (no boto3: its resource layer and s3transfer cost ~0.1 s to import
    and nothing here uses them). `credentials`: the invocation's own (sigv4.invocation_credentials,
    the local stack's per-function keys); None, as in Lambda, resolves them the usual way."""
    import botocore.session
    from botocore.config import Config

    config = Config(
        signature_version="s3v4",
        # A local emulator speaks path style; AWS gets virtual-hosted URLs on the regional endpoint.
        s3={"addressing_style": "path" if endpoint_url else "virtual"},
        # Two tries: a request must end well inside API Gateway's 29 s even when S3 is down.
        retries={"mode": "standard", "max_attempts": 2},
        connect_timeout=2,
        read_timeout=read_timeout_s,
    )
    keys: dict[str, Any] = {}
    if credentials is not None:
        keys = {
            "aws_access_key_id": credentials[0],
            "aws_secret_access_key": credentials[1],
            "aws_session_token": credentials[2],
        }
    return botocore.session.get_session().create_client(
        "s3", region_name=region, endpoint_url=endpoint_url, config=config, **keys
    )


class LazyS3Client:
    """Creates the S3 client on first attribute access: a function that only presigns (the
    payloads function) never pays for the client (~0.1-0.2 s: the S3 service model)."""

    def __init__(self, region: str, endpoint_url: str | None, read_timeout_s: int = 5):
        self.region = region
        self.endpoint_url = endpoint_url
        # 5 s on a request's path; the renewer's copies take longer (COPY_READ_TIMEOUT_S).
        self.read_timeout_s = read_timeout_s

    def __getattr__(self, name: str):
        client = cached_s3_client(
            self.region, self.endpoint_url, sigv4.invocation_credentials(), self.read_timeout_s
        )
        return getattr(client, name)
