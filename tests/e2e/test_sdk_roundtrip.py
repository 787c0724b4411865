"""Round trips through the local stack (gateway + handlers, real redis-server, S3 over HTTP from
moto's server): each payload size lands in the tier the threshold says, for args and results."""

from __future__ import annotations

import hashlib
import os

import pytest

from payloadstore import _checksum, codec
from tests.e2e.sdk_helpers import bytes_len_for_encoded_size, clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

MiB = 1 << 20


def result_for(data: bytes, result_size: int | None) -> bytes:
    """A result derived from every byte of the args (so a wrong byte anywhere shows), resized so
    the encoded result is `result_size` bytes (None: same length as the args)."""
    digest = hashlib.sha256(data).digest()
    if result_size is None:
        return digest[: len(data)]
    length = bytes_len_for_encoded_size(result_size)
    return (digest * (length // 32 + 1))[:length]


@pytest.fixture(scope="module")
def echo_daemon(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("roundtrip")

    def digest_sized(data, result_size=None):
        return result_for(bytes(data), result_size)

    with daemon_thread(daemon_client, queue, digest_sized) as daemon:
        yield client, queue, daemon
    client.close()
    daemon_client.close()


def sizes(threshold: int) -> list[tuple[str, int | None, int | None]]:
    """(label, raw args length, exact encoded payload size)."""
    return [
        ("0 B", 0, None),
        ("1 B", 1, None),
        ("threshold - 1", None, threshold - 1),
        ("threshold", None, threshold),
        ("threshold + 1", None, threshold + 1),
        ("8 MiB", None, 8 * MiB),
        ("64 MiB", None, 64 * MiB),
    ]


@pytest.mark.parametrize("label", [s[0] for s in sizes(262_144)])
def test_given_a_payload_of_each_size_when_round_tripped_then_args_and_result_land_in_the_threshold_tier(
    label, echo_daemon, local_gateway, s3_client
):
    client, queue, _ = echo_daemon
    threshold = client.config.inline_threshold
    _, raw_len, encoded_size = next(s for s in sizes(threshold) if s[0] == label)

    # Given: random args whose whole call (args and kwargs) encodes to exactly `encoded_size` bytes
    def call(data: bytes) -> dict:
        return {"args": [data], "kwargs": {"result_size": encoded_size}}

    if encoded_size is not None:
        raw_len = bytes_len_for_encoded_size(encoded_size, call)
    data = os.urandom(raw_len)
    payload_size = codec.encode(call(data)).nbytes
    assert encoded_size is None or payload_size == encoded_size
    expected_tier = "inline" if payload_size <= threshold else "s3"
    # When: enqueued, run by the daemon, and the result awaited (result sized like the args)
    job = client.queue(queue).add(data, result_size=encoded_size)
    value = job.result(timeout=120)
    # Then: the result is the daemon's function of every byte, and both sides used the right tier
    assert bytes(value) == result_for(data, encoded_size)
    status = job.status()
    assert (job.tier, status.tier, status.state) == (expected_tier, expected_tier, "succeeded")
    if expected_tier == "s3":
        head = s3_client.head_object(Bucket=local_gateway.bucket, Key=status.payload_ref["key"])
        assert head["ContentLength"] == payload_size
        stored = s3_client.get_object(Bucket=local_gateway.bucket, Key=status.payload_ref["key"])
        # The reference carries the CRC64NVME of exactly the stored bytes (the transfer checksum)
        assert status.payload_ref["crc64nvme"] == _checksum.to_b64(
            _checksum.of(stored["Body"].read())
        )
        assert status.result_ref is not None, "a result of the same size goes to S3 too"
        assert status.result_ref["key"].endswith(f"/{job.job_id}/result")
        assert (
            s3_client.head_object(Bucket=local_gateway.bucket, Key=status.result_ref["key"])[
                "ContentLength"
            ]
            == encoded_size
        )
    else:
        assert status.payload_ref is None and status.result_ref is None


def test_given_a_job_id_when_picked_up_by_another_client_then_its_result_is_readable(
    echo_daemon, local_gateway
):
    client, queue, _ = echo_daemon
    job = client.queue(queue).add(b"abc")
    other, _ = clients(local_gateway)
    assert bytes(other.job(job.job_id).result(timeout=30)) == result_for(b"abc", None)


def test_given_another_namespace_when_reading_a_job_then_job_not_found(echo_daemon, local_gateway):
    from payloadstore import JobNotFound

    client, queue, _ = echo_daemon
    job = client.queue(queue).add(b"abc")
    sandbox, _ = clients(local_gateway, "sandbox")
    with pytest.raises(JobNotFound):
        sandbox.job(job.job_id).status()
