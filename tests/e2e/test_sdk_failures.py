"""Failure paths through the local stack: corrupt and lost payloads, expired upload URLs, a
function that raises, and a daemon refusing to start against a misconfigured bucket."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from datetime import UTC, datetime

import httpx
import pytest

from payloadstore import (
    Client,
    Daemon,
    JobFailed,
    PayloadCorrupt,
    PayloadLost,
    ServiceUnavailable,
    _checksum,
)
from tests.e2e.sdk_helpers import clients, unique_queue

pytestmark = pytest.mark.e2e

LARGE = 300_000  # over the 256 KiB threshold: the args go to S3


def run_until_idle(daemon_client: Client, queue: str, fn) -> dict:
    return Daemon(daemon_client, [queue], wait_s=1, install_signal_handlers=False).run(
        fn, stop_when_idle=True
    )


def test_given_args_overwritten_in_s3_when_the_daemon_fetches_them_then_payload_corrupt_and_the_job_is_terminal(
    local_gateway, s3_client
):
    # Given: a large job whose stored object is then overwritten with other bytes of the same size
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("corrupt")
    job = client.queue(queue).add(os.urandom(LARGE))
    ref = job.status().payload_ref
    original = s3_client.get_object(Bucket=local_gateway.bucket, Key=ref["key"])["Body"].read()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0x01
    s3_client.put_object(Bucket=local_gateway.bucket, Key=ref["key"], Body=bytes(tampered))
    calls: list = []
    # When
    stats = run_until_idle(daemon_client, queue, lambda *a, **k: calls.append(a))
    # Then: the function never ran, the job is payload_corrupt for good, with both checksums
    # (CRC64NVME, the transfer checksum the reference carries)
    assert calls == []
    assert stats == {"payload_corrupt": 1}
    status = job.status()
    assert status.state == "payload_corrupt"
    crc = _checksum.to_b64
    assert status.error["expected_crc64nvme"] == ref["crc64nvme"] == crc(_checksum.of(original))
    assert status.error["actual_crc64nvme"] == crc(_checksum.of(bytes(tampered)))
    with pytest.raises(PayloadCorrupt) as info:
        job.result(timeout=5)
    assert info.value.job_id == job.job_id
    assert run_until_idle(daemon_client, queue, lambda *a: calls.append(a)) == {}, (
        "never redelivered"
    )


def test_given_args_deleted_from_s3_when_the_daemon_fetches_them_then_payload_lost_after_the_retry_once(
    local_gateway, s3_client
):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("lost")
    job = client.queue(queue).add(os.urandom(LARGE))
    s3_client.delete_object(Bucket=local_gateway.bucket, Key=job.status().payload_ref["key"])
    stats = run_until_idle(daemon_client, queue, lambda *a: pytest.fail("must not run"))
    # The CP's default policy requeues once: the daemon sees the job twice, then it is terminal.
    assert stats == {"payload_lost": 2}
    status = job.status()
    assert (status.state, status.attempts) == ("payload_lost", 2)
    with pytest.raises(PayloadLost):
        job.result(timeout=5)


def test_given_a_function_that_raises_when_the_job_runs_then_job_failed_carries_the_remote_traceback(
    local_gateway,
):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("raises")
    job = client.queue(queue).add({"width": -3})

    def resize(options):
        if options["width"] < 0:
            raise ValueError(f"width must be positive, got {options['width']}")
        return options

    assert run_until_idle(daemon_client, queue, resize) == {"failed": 1}
    with pytest.raises(JobFailed) as info:
        job.result(timeout=5)
    error = info.value
    assert (error.type, error.message) == ("ValueError", "width must be positive, got -3")
    assert "in resize" in error.traceback and "raise ValueError" in error.traceback
    assert job.status().state == "failed"


class S3ExpiryRule(httpx.BaseTransport):
    """S3 refuses a presigned request once X-Amz-Date + X-Amz-Expires has passed (403 AccessDenied,
    "Request has expired"); moto's server does not check it. This applies that rule in front of
    moto, whose HTTP server still receives and stores every byte. The first PUT stalls until its
    URL has expired, as an upload queued behind a slow link would."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.puts: list[tuple[str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        params = request.url.params
        if "X-Amz-Date" in params:
            signed = (
                datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
                .replace(tzinfo=UTC)
                .timestamp()
            )
            expires = signed + int(params["X-Amz-Expires"])
            if request.method == "PUT" and not self.puts:
                time.sleep(max(0.0, expires - time.time()) + 1.1)
            if time.time() > expires:
                if request.method == "PUT":
                    self.puts.append((str(request.url), 403))
                return httpx.Response(
                    403,
                    content=b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
                    headers={"content-type": "application/xml"},
                )
        response = self.inner.handle_request(request)
        if request.method == "PUT":
            self.puts.append((str(request.url), response.status_code))
        return response


def test_given_an_upload_url_that_expires_before_the_put_when_adding_then_it_re_presigns_the_same_job_and_succeeds(
    start_local_gateway, s3_client
):
    # Given: URLs valid for 2 s, and an upload that only starts after its URL expired
    gateway = start_local_gateway(PRESIGN_TTL_S="2")
    s3 = S3ExpiryRule()
    client = Client(
        gateway.url,
        gateway.token("dev", "client"),
        "dev",
        s3_http=httpx.Client(transport=s3, timeout=60),
    )
    daemon_client = Client(gateway.url, gateway.token("dev", "daemon"), "dev")
    queue = unique_queue("expired")
    data = os.urandom(LARGE)
    # When
    job = client.queue(queue).add(data)
    # Then: one refused PUT, one good PUT to a new URL for the same key, and the job runs
    assert [status for _, status in s3.puts] == [403, 200]
    first, second = s3.puts[0][0], s3.puts[1][0]
    assert first != second
    assert httpx.URL(first).path == httpx.URL(second).path
    assert job.job_id in httpx.URL(second).path
    assert run_until_idle(daemon_client, queue, lambda b: hashlib.sha256(b).hexdigest()) == {
        "succeeded": 1
    }
    assert job.result(timeout=10) == hashlib.sha256(data).hexdigest()


def test_given_a_bucket_without_the_lifecycle_rule_when_the_daemon_starts_then_it_refuses_naming_the_check(
    start_local_gateway, s3_client
):
    bucket = f"payloadstore-e2e-bare-{os.getpid()}"
    s3_client.create_bucket(Bucket=bucket)
    gateway = start_local_gateway(PAYLOAD_BUCKET=bucket)
    daemon_client = Client(gateway.url, gateway.token("dev", "daemon"), "dev")
    ran = threading.Event()
    with pytest.raises(ServiceUnavailable, match="refusing to take jobs: .*lifecycle") as info:
        Daemon(daemon_client, ["any"], wait_s=1, install_signal_handlers=False).run(
            lambda *a: ran.set()
        )
    assert "lifecycle" in info.value.checks and not info.value.checks["lifecycle"]["ok"]
    assert not ran.is_set()
