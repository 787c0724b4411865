"""The SDK uses the presigned GET that poll and result answers carry, and asks for one only when
it is missing or expired (older servers, a long wait)."""

from __future__ import annotations

import hashlib

from payloadstore import Daemon
from tests.unit.sdk_fakes import FakeWorld, make_client


def big(n: int) -> bytes:
    return hashlib.sha256(b"seed").digest() * (n // 32) + b"x" * (n % 32)


def presign_gets(world: FakeWorld) -> int:
    return sum(
        1
        for r in world.calls("POST", "/payloads/presign")
        if b'"op": "get"' in r.content or b'"op":"get"' in r.content
    )


def run_one(world: FakeWorld, payload: bytes) -> bytes:
    client = make_client(world)
    job = client.queue("q").add(payload)
    daemon = Daemon(make_client(world), ["q"], wait_s=0, install_signal_handlers=False)
    assert daemon.run(lambda x: x, stop_when_idle=True)["succeeded"] == 1
    return job.result(timeout=5)


def test_given_download_urls_in_the_answers_when_a_job_runs_then_no_side_asks_for_one():
    # Given a server that hands out download URLs with S3 references
    world = FakeWorld(inline_threshold=1024, hand_out_downloads=True)
    # When an S3-tier job runs and its S3 result is read
    value = run_one(world, big(5000))
    # Then the daemon and the client downloaded through the handed-out URLs only
    assert value == big(5000)
    assert presign_gets(world) == 0
    assert len(world.calls("GET", "sig=handed")) == 2


def test_given_expired_download_urls_when_a_job_runs_then_each_side_asks_for_a_fresh_one():
    # Given URLs that expired before they were used
    world = FakeWorld(
        inline_threshold=1024, hand_out_downloads=True, download_expires_at="2001-01-01T00:00:00Z"
    )
    # When the job runs, Then each side made exactly one presign-get call instead
    assert run_one(world, big(5000)) == big(5000)
    assert presign_gets(world) == 2
    assert not world.calls("GET", "sig=handed")


def test_given_an_older_server_without_download_urls_then_presign_get_is_used():
    world = FakeWorld(inline_threshold=1024)
    assert run_one(world, big(5000)) == big(5000)
    assert presign_gets(world) == 2
