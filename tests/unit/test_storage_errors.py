"""How S3 failures map to answers (narrow unit test: botocore errors built by hand)."""

from __future__ import annotations

from botocore.exceptions import ClientError, EndpointConnectionError

from payloadstore_controlplane.models.errors import ServiceUnavailable, UpstreamError
from payloadstore_controlplane.store.s3.errors import storage_error


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "HeadObject")


def test_throttling_and_outages_are_retryable_503():
    for e in (
        client_error("SlowDown"),
        client_error("ServiceUnavailable"),
        EndpointConnectionError(endpoint_url="http://s3"),
    ):
        mapped = storage_error(e, "head")
        assert isinstance(mapped, ServiceUnavailable) and mapped.status == 503
        assert mapped.headers["Retry-After"]


def test_refusals_are_502_naming_the_code():
    mapped = storage_error(client_error("AccessDenied"), "head")
    assert isinstance(mapped, UpstreamError) and mapped.status == 502
    assert "AccessDenied" in mapped.message
