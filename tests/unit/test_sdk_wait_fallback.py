"""An enqueue-and-wait answered `waited: false` (issue 43: the job is queued, the control
plane's wait for it failed) is an ordinary queued job: the SDK waits for its result as usual,
sync and async, and never enqueues it again."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx

from payloadstore import codec
from payloadstore.aio import AsyncClient
from tests.unit.sdk_fakes import CP, FakeWorld, make_client


def ended_but_not_waited(world: FakeWorld):
    """The enqueue as the fake serves it, then the job ends at once (a daemon was quick) while
    the answer says the wait failed: `{job_id, tier, waited: false}`."""

    def answer(request: httpx.Request) -> httpx.Response:
        served = world._cp(request, request.read())
        body = json.loads(served.content)
        world.jobs[body["job_id"]]["state"] = "succeeded"
        world.jobs[body["job_id"]]["result"] = {
            "resultInline": base64.b64encode(codec.encode(42).tobytes()).decode()
        }
        return httpx.Response(201, json={**body, "waited": False})

    world.fail("POST", "/jobs", answer)


def test_a_call_whose_enqueue_did_not_wait_reads_its_result_as_usual():
    # Given an enqueue-and-wait answered 201 with `waited: false`
    world = FakeWorld()
    ended_but_not_waited(world)
    client = make_client(world)
    # When a call runs
    value = client.queue("q").call(1, timeout=5)
    # Then its value comes from an ordinary result read, and the job was enqueued once
    assert value == 42
    assert len(world.calls("POST", "/queues/q/jobs")) == 1
    assert world.calls("GET", "/result")


def test_the_wire_says_the_enqueue_did_not_wait():
    world = FakeWorld()
    ended_but_not_waited(world)
    client = make_client(world)
    enqueued = client.wire.enqueue_inline("q", b"\x01", idempotency_key="k", wait_s=5)
    assert enqueued.waited is False and enqueued.result is None


def test_an_async_call_whose_enqueue_did_not_wait_reads_its_result_as_usual():
    # Given the same answer, to the async client
    world = FakeWorld()
    ended_but_not_waited(world)

    async def main():
        client = AsyncClient(
            CP,
            "pst_good",
            "ns",
            http=httpx.AsyncClient(transport=world.transport()),
            s3_http=httpx.Client(transport=world.transport()),
        )
        try:
            return await client.queue("q").call(1, timeout=5)
        finally:
            await client.wire.http.aclose()

    # Then the value comes from an ordinary result read, and the job was enqueued once
    assert asyncio.run(main()) == 42
    assert len(world.calls("POST", "/queues/q/jobs")) == 1
