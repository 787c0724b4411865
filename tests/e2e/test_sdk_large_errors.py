"""Many failed jobs with large error text through the local gateway, which answers 502 past
Lambda's 6 MB as AWS does (issue 43): jobs:status answers what fits and lists the rest as
`unanswered`, and the SDK's as_completed and wait (sync and async) get every job with its whole
error, never ServiceUnavailable."""

from __future__ import annotations

import asyncio

import pytest

import payloadstore
from payloadstore import AsyncClient, JobFailed
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

JOBS = 100
# ~450 KB per job once escaped (emoji: 14 bytes each in the proxy answer; the traceback repeats
# the message): 100 of them would be a ~45 MB status answer.
MESSAGE = "😀" * 16_000


def fails(i):
    raise ValueError(f"{i:03d}" + MESSAGE)


def test_as_completed_and_wait_get_every_job_with_its_large_error(local_gateway):
    # Given 100 jobs that fail with a 16,000-emoji message (and a traceback repeating it)
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("large-errors")
    jobs = client.queue(queue).map(range(JOBS))
    with daemon_thread(daemon_client, queue, fails, concurrency=4):
        # When a client watches them with as_completed, then waits for them all
        finished = list(payloadstore.as_completed(jobs, timeout=120))
        done, not_done = payloadstore.wait(jobs, timeout=30)
    # Then every job came, once, and each error is whole
    assert sorted(j.job_id for j in finished) == sorted(j.job_id for j in jobs)
    assert not not_done and len(done) == JOBS
    for i, job in enumerate(jobs):
        with pytest.raises(JobFailed) as raised:
            job.result(timeout=5)
        assert f"{i:03d}{MESSAGE}" in str(raised.value)
    # And a status call of all 100 answers some, naming the others unanswered
    answers = client.wire.jobs_status([j.job_id for j in jobs])
    assert 0 < len(answers) < JOBS
    daemon_client.close()


def test_the_async_client_gets_every_job_with_its_large_error(local_gateway):
    # Given the same jobs, watched by the async client
    queue = unique_queue("large-errors-async")
    client, daemon_client = clients(local_gateway)
    ids = [j.job_id for j in client.queue(queue).map(range(JOBS))]
    token = local_gateway.token("dev", "client")

    async def collect():
        async with AsyncClient(local_gateway.url, token, "dev") as c:
            every = [c.job(i) for i in ids]
            seen = [job async for job in payloadstore.as_completed(every, timeout=120)]
            done, not_done = await payloadstore.wait(every, timeout=30)
            assert not not_done and len(done) == JOBS
            messages = []
            for job in every:
                try:
                    await job.result()
                except JobFailed as e:
                    messages.append(str(e))
            return seen, messages

    with daemon_thread(daemon_client, queue, fails, concurrency=4):
        seen, messages = asyncio.run(collect())
    # Then every job came once, each with its whole error
    assert sorted(j.job_id for j in seen) == sorted(ids)
    assert all(f"{i:03d}{MESSAGE}" in m for i, m in enumerate(messages))
    daemon_client.close()
