"""A Daemon keeps serving through the local stack (issue 46): one job's error (its arguments'
download, the form of its result) never stops `run()`, never throws a result away, and ends in
an outcome counted in the daemon's summary."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from payloadstore import Client, Daemon, RetryPolicy
from payloadstore_controlplane.store.tokens import TokenStore
from tests.e2e.sdk_helpers import clients, unique_queue

pytestmark = pytest.mark.e2e

LARGE = 300_000  # over the 256 KiB threshold: the args go to S3
FAST_RETRY = RetryPolicy(max_attempts=2, base_s=0.01, max_backoff_s=0.05)


class BrokenKeys(httpx.BaseTransport):
    """S3 over HTTP, except that requests for the named keys fail: with a refused connection
    (`unreachable`) or S3's 403."""

    def __init__(self, refuse: str = "unreachable"):
        self.inner = httpx.HTTPTransport()
        self.keys: set[str] = set()
        self.refuse = refuse
        self.refused = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if any(key in request.url.path for key in self.keys):
            self.refused += 1
            if self.refuse == "unreachable":
                raise httpx.ConnectError("connection refused", request=request)
            body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            return httpx.Response(403, content=body, request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("refuse", ["unreachable", "403"])
def test_a_daemon_outlives_a_failed_argument_download_and_runs_the_job_behind_it(
    local_gateway, refuse
):
    # Given a daemon whose S3 downloads of one job's arguments fail through every retry, and
    # a second job queued behind that one
    client, _ = clients(local_gateway)
    broken = BrokenKeys(refuse)
    worker = Client(
        local_gateway.url,
        local_gateway.token("dev", "daemon"),
        "dev",
        s3_http=httpx.Client(transport=broken),
        retry=FAST_RETRY,
    )
    queue = client.queue(unique_queue("survive"))
    first = queue.add(b"a" * LARGE)
    broken.keys.add(first.status().payload_ref["key"])
    second = queue.add(b"b" * LARGE)
    daemon = Daemon(worker, [queue.name], wait_s=1, install_signal_handlers=False)
    # When the daemon runs until its queue is idle
    stats = daemon.run(lambda value: len(value), stop_when_idle=True)
    # Then run() returned (no exception), the job behind ran, and the failed download is
    # counted as abandoned: the first job is left running for redelivery, nothing posted
    assert broken.refused >= 1
    assert second.result(timeout=30) == LARGE
    assert stats == {"abandoned": 1, "succeeded": 1}
    assert first.status().state == "running"


def test_a_daemon_sends_a_small_result_through_s3_once_its_namespace_keeps_nothing_inline(
    local_gateway, ssm_client
):
    # Given a daemon that read its namespace's config while inline was allowed
    ns = f"dnever-{uuid.uuid4().hex[:8]}"
    store = TokenStore(ssm_client, local_gateway.token_path, cache_s=0)
    tokens = {role: store.mint(ns, role)[0] for role in ("client", "daemon")}
    worker = Client(local_gateway.url, tokens["daemon"], ns)
    assert worker.config.policy.inline == "allowed"
    # When the namespace turns inline `never`, and a job with a small result runs
    store.set_policy(ns, inline="never")
    client = Client(local_gateway.url, tokens["client"], ns)
    queue = unique_queue("dnever")
    job = client.queue(queue).add(b"x" * LARGE)
    daemon = Daemon(worker, [queue], wait_s=1, install_signal_handlers=False)
    done = threading.Event()

    def fn(value):
        done.set()
        return b"small result"

    stats = daemon.run(fn, max_jobs=1)
    # Then the result was refused inline (409 inline_never) and went through S3: the job
    # succeeded on its first delivery, with an S3 reference for its result
    assert done.is_set()
    assert stats == {"succeeded": 1}
    assert job.result(timeout=30) == b"small result"
    status = job.status()
    assert status.state == "succeeded" and status.attempts == 1
    assert status.result_ref is not None
