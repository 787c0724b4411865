"""`inline: never` covers error text and tracebacks (issue 43, defect 8), end to end: a daemon
function that raises with an argument in its message, in an inline-never namespace of the local
stack; the SDK (sync and async) shows the error and its traceback as for any namespace, and no
byte of them is in Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from payloadstore import AsyncClient, Client, JobFailed
from tests.e2e.sdk_helpers import daemon_thread, unique_queue
from tests.e2e.test_namespace_policies import _cli, _namespace, _redis_bytes

pytestmark = pytest.mark.e2e


def test_a_failed_jobs_error_in_an_inline_never_namespace_reads_as_before(
    local_gateway, ssm_client
):
    # Given an inline `never` namespace whose daemon function raises with its argument
    ns, tokens = _namespace(local_gateway, ssm_client, "enever")
    assert _cli(local_gateway, "namespace", "policy", ns, "--inline", "never").returncode == 0
    secret = "SECRET" + uuid.uuid4().hex
    client = Client(local_gateway.url, tokens["client"], ns)
    worker = Client(local_gateway.url, tokens["daemon"], ns)
    queue = unique_queue("enever")

    def check(value):
        raise ValueError(f"bad {value!r}")

    # When a client's job runs and fails
    with daemon_thread(worker, queue, check):
        job = client.queue(queue).add(secret)
        with pytest.raises(JobFailed) as info:
            job.result(timeout=60)
    # Then the SDK shows the error and the remote traceback as for any namespace
    error = info.value
    assert (error.type, error.message) == ("ValueError", f"bad {secret!r}")
    assert "in check" in error.traceback and "raise ValueError" in error.traceback
    assert job.status().error["message"] == f"bad {secret!r}"

    # And the async client reads the same error
    async def read_async():
        async with AsyncClient(local_gateway.url, tokens["client"], ns) as aclient:
            status = await aclient.job(job.job_id).status()
            return status.error

    assert asyncio.run(read_async())["message"] == f"bad {secret!r}"
    # And no byte of the argument, the message or the traceback is in Redis
    every = b"\n".join(_redis_bytes(local_gateway.redis_client()))
    assert secret.encode() not in every
