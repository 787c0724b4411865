"""A value the daemon could not decode (a tuple or frozenset as a dict key) is refused where it is
encoded, with the place named, before any job exists; a daemon function returning one fails its
job with the same error (issue 44)."""

from __future__ import annotations

import asyncio

import pytest

from payloadstore import AsyncClient, JobFailed, QueueNotFound
from payloadstore.codec import CodecError
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e


def assert_no_job(client, queue: str) -> None:
    # The queue was never used: no job, no queue.
    with pytest.raises(QueueNotFound):
        client.queue(queue).stats()


def test_add_of_a_tuple_key_raises_naming_the_place_and_creates_no_job(local_gateway):
    # Given a client and a fresh queue
    client, _ = clients(local_gateway)
    queue = unique_queue("badkey")
    q = client.queue(queue)
    # When a dict with a tuple key is added, called, submitted or mapped
    with pytest.raises(CodecError, match=r"\(1, 2\) \(a tuple\) in args\[0\]"):
        q.add({(1, 2): "x"})
    with pytest.raises(CodecError, match=r"in kwargs\['opts'\]\['a'\]"):
        q.call(1, opts={"a": {(1, 2): 1}}, timeout=5)
    with pytest.raises(CodecError, match=r"in args\[1\]\[0\]"):
        q.submit(["ok", [{frozenset({1}): 2}]])
    with pytest.raises(CodecError, match=r"item 2: cannot encode the dict key \(3,\)"):
        q.map([1, 2, {(3,): 3}])
    # Then each raised before anything was sent: no job exists on the queue
    assert_no_job(client, queue)


def test_async_add_and_map_of_a_tuple_key_raise_and_create_no_job(local_gateway):
    client, _ = clients(local_gateway)
    queue = unique_queue("badkey-async")

    async def scenario():
        async with AsyncClient(local_gateway.url, local_gateway.token("dev", "client"), "dev") as a:
            with pytest.raises(CodecError, match=r"in args\[0\]\['deep'\]"):
                await a.queue(queue).add({"deep": {(1, 2): "x"}})
            with pytest.raises(CodecError, match=r"item 0:"):
                await a.queue(queue).map([{(1, 2): "x"}])

    asyncio.run(scenario())
    assert_no_job(client, queue)


def test_tuples_as_values_still_travel_as_lists(local_gateway):
    # Given a daemon echoing its argument
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("tuplevalues")
    with daemon_thread(daemon_client, queue, lambda v: v):
        # When tuples are values (not keys), and a key is a plain scalar
        out = client.queue(queue).call({"a": (1, (2, 3)), 4: [(5,)]}, timeout=60)
    # Then they arrive as lists, as documented
    assert out == {"a": [1, [2, 3]], 4: [[5]]}


def test_a_function_returning_a_tuple_key_fails_its_job_with_the_place(local_gateway):
    # Given a daemon whose function returns a dict with a tuple key
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("badresult")
    with daemon_thread(daemon_client, queue, lambda: {"grid": {(0, 0): 1.5}}):
        job = client.queue(queue).add()
        # When the client waits for the result
        with pytest.raises(JobFailed) as failed:
            job.result(timeout=60)
    # Then the job failed with the codec's error naming where the key is
    assert failed.value.type == "CodecError"
    assert "(0, 0) (a tuple) in result['grid']" in failed.value.message
    assert job.status().state == "failed"
