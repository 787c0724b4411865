"""A client reads `/v1/config` again (issue 44, "limits that follow the stack"): before refusing
a size its cached cap does not allow, after the control plane refused a call on a limit, and
every CONFIG_MAX_AGE_S otherwise; a periodic re-read that fails keeps the config it has."""

from __future__ import annotations

import httpx

import payloadstore._client_core
import payloadstore.client
from tests.unit.sdk_fakes import FakeWorld, make_client


def config_reads(world: FakeWorld) -> int:
    return len(world.calls("GET", "/v1/config"))


def test_given_a_cap_raised_since_the_config_was_read_when_sending_more_than_the_old_cap_then_it_is_sent():
    # Given: a client that read a 1 MiB cap; the stack's cap is 4 MiB since
    world = FakeWorld(max_payload_bytes=1 << 20)
    client = make_client(world)
    assert client.config.max_payload_bytes == 1 << 20
    world.max_payload_bytes = 4 << 20
    # When: it sends 2 MiB of arguments
    job = client.queue("q").add(bytes(2 << 20))
    # Then: the job exists (the cap was read again before refusing), and one more read was made
    assert job.status().state == "queued"
    assert config_reads(world) == 2
    assert client.config.max_payload_bytes == 4 << 20


def test_given_a_refusal_on_a_limit_then_the_next_use_reads_the_config_again():
    world = FakeWorld()
    client = make_client(world)
    client.config  # noqa: B018 - the first read
    world.fail(
        "POST",
        "/payloads/presign",
        httpx.Response(413, json={"error": {"code": "payload_too_large", "message": "cap"}}),
    )
    try:
        client.queue("q").add(bytes(4096))
    except payloadstore.errors.PayloadTooLarge:
        pass
    client.config  # noqa: B018
    assert config_reads(world) == 2


def test_given_the_config_is_older_than_its_max_age_then_it_is_read_again_and_a_failed_read_keeps_it(
    monkeypatch,
):
    world = FakeWorld()
    client = make_client(world)
    assert client.config.max_payload_bytes == world.max_payload_bytes
    client.config  # noqa: B018 - fresh: no read
    assert config_reads(world) == 1
    monkeypatch.setattr(payloadstore._client_core, "CONFIG_MAX_AGE_S", 0.0)
    world.max_payload_bytes = 123456
    assert client.config.max_payload_bytes == 123456
    world.fail("GET", "/v1/config", *[httpx.Response(503) for _ in range(10)])
    assert client.config.max_payload_bytes == 123456


def test_given_inline_threshold_lowered_since_the_daemon_read_it_when_posting_then_the_result_goes_through_s3():
    import json

    from tests.unit.test_sdk_daemon import daemon_for

    # Given: a daemon that read INLINE_THRESHOLD 1024, lowered since (the post answers 413)
    world = FakeWorld(inline_threshold=1024)
    job = make_client(world).queue("q").add(1)
    daemon = daemon_for(world)
    assert daemon.client.config.inline_threshold == 1024
    world.inline_threshold = 16
    world.fail(
        "POST",
        f"/jobs/{job.job_id}/result",
        httpx.Response(413, json={"error": {"code": "payload_too_large", "message": "inline"}}),
    )
    # When: its function returns 500 bytes
    stats = daemon.run(lambda x: b"r" * 500, stop_when_idle=True)
    # Then: the job succeeded through S3, and the config was read again
    assert stats == {"succeeded": 1}
    posts = [json.loads(r.content) for r in world.calls("POST", f"/jobs/{job.job_id}/result")]
    assert "resultInline" in posts[0] and "resultRef" in posts[-1]
    assert daemon.client.config.inline_threshold == 16


def test_given_max_payload_bytes_lowered_since_the_daemon_read_it_when_a_result_is_over_it_then_the_job_fails_payload_too_large():
    import json

    from tests.unit.test_sdk_daemon import daemon_for

    # Given: a daemon that read a 1 MiB cap, lowered to 10,000 bytes since (the presign of a
    # larger result answers 413)
    world = FakeWorld(max_payload_bytes=1 << 20, inline_threshold=1024)
    job = make_client(world).queue("q").add(1)
    daemon = daemon_for(world)
    assert daemon.client.config.max_payload_bytes == 1 << 20
    world.max_payload_bytes = 10_000
    # When: its function returns 20,000 bytes
    stats = daemon.run(lambda x: b"r" * 20_000, stop_when_idle=True)
    # Then: the job failed PayloadTooLarge naming the cap the stack has now (not abandoned, to
    # be run again a visibility timeout later), and the config was read again
    assert stats == {"failed": 1}
    (post,) = world.calls("POST", f"/jobs/{job.job_id}/result")
    error = json.loads(post.content)["error"]
    assert error["type"] == "PayloadTooLarge", error
    assert "over the 10000 byte cap" in error["message"]
    assert daemon.client.config.max_payload_bytes == 10_000
