"""Every call the SDK retries is safe to retry (issue 46): redrive, purge, retry and cancel
carry an Idempotency-Key, so the retry of a request whose answer was lost (performed by the
control plane, then turned into a 502 or a cut connection on the way back) gets the first
answer and does nothing twice. Through the local gateway, with an injected transport."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from payloadstore import Client, JobFailed, RetryPolicy
from payloadstore._wire import PolledJob
from tests.e2e.sdk_helpers import clients, unique_queue

pytestmark = pytest.mark.e2e


class LoseFirstAnswer(httpx.BaseTransport):
    """Performs every request; the answer of the first one whose path ends with `suffix` (and
    method matches) is lost: a 502 (`lose="502"`) or a cut connection (`lose="cut"`). `meanwhile`
    runs after the first request landed, before its answer is lost (what happens in between)."""

    def __init__(
        self,
        method: str,
        suffix: str,
        lose: str = "502",
        meanwhile: Callable[[], None] = lambda: None,
    ):
        self.inner = httpx.HTTPTransport()
        self.method, self.suffix, self.lose, self.meanwhile = method, suffix, lose, meanwhile
        self.sent: list[httpx.Request] = []
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method != self.method or not request.url.path.endswith(self.suffix):
            return response
        self.sent.append(request)
        if self.lost:
            return response
        response.read()
        response.close()
        self.lost += 1
        self.meanwhile()
        if self.lose == "cut":
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(502, json={"message": "Internal server error"}, request=request)

    def close(self) -> None:
        self.inner.close()


def lossy_client(gateway, transport: LoseFirstAnswer) -> Client:
    return Client(
        gateway.url,
        gateway.token("dev", "client"),
        "dev",
        http=httpx.Client(transport=transport),
        retry=RetryPolicy(max_attempts=4, base_s=0.01, max_backoff_s=0.05),
    )


def fail_jobs(daemon_client: Client, queue: str, n: int) -> None:
    """Take n jobs of the queue as a daemon would and end each failed."""
    for _ in range(n):
        job = daemon_client.wire.poll([queue], wait_s=2, daemon_id="ops-test")
        assert isinstance(job, PolledJob)
        daemon_client.wire.post_result(
            job.job_id, error={"type": "ValueError", "message": "broken"}, lease=job.lease
        )


def queued_ids(client: Client, queue: str) -> set[str]:
    return {info.job_id for page in client.queue(queue).jobs(state="queued") for info in page}


@pytest.mark.parametrize("lose", ["502", "cut"])
def test_redrive_limit_2_with_its_first_answer_lost_queues_2(local_gateway, lose):
    # Given four failed jobs
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("ops-lost-redrive")
    jobs = [client.queue(queue).add(i) for i in range(4)]
    fail_jobs(daemon_client, queue, 4)
    for job in jobs:
        with pytest.raises(JobFailed):
            job.result(timeout=10)
    # When redrive(limit=2) is sent and its first answer is lost
    transport = LoseFirstAnswer("POST", "/redrive", lose)
    answer = lossy_client(local_gateway, transport).queue(queue).redrive(limit=2)
    # Then the retry answered the first request's figures and two jobs are queued, not four
    assert transport.lost == 1 and len(transport.sent) == 2
    assert len(queued_ids(client, queue)) == 2
    assert (answer.retried, answer.skipped) == (2, 0)
    first, again = (r.headers.get("Idempotency-Key") for r in transport.sent)
    assert first and first == again


def test_purge_with_its_first_answer_lost_answers_what_it_cancelled(local_gateway):
    client, _ = clients(local_gateway)
    queue = unique_queue("ops-lost-purge")
    waiting = [client.queue(queue).add(i) for i in range(3)]
    transport = LoseFirstAnswer("POST", "/purge")
    # When the purge's first answer is lost
    answer = lossy_client(local_gateway, transport).queue(queue).purge()
    # Then the retry answers the three the first one cancelled (not 0), and none remain
    assert transport.lost == 1
    assert (answer.cancelled, answer.remaining) == (3, 0)
    assert {j.status().state for j in waiting} == {"cancelled"}


def test_a_retry_with_its_first_answer_lost_is_not_retried_twice(local_gateway):
    # Given a failed job
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("ops-lost-retry")
    job = client.queue(queue).add(1)
    fail_jobs(daemon_client, queue, 1)
    # When its retry lands, the job runs and fails again before the answer is lost
    transport = LoseFirstAnswer(
        "POST", "/retry", meanwhile=lambda: fail_jobs(daemon_client, queue, 1)
    )
    answer = lossy_client(local_gateway, transport).job(job.job_id).retry()
    # Then the retry's retry answered the first one (retried once) and did not queue it again
    assert transport.lost == 1
    assert (answer.state, answer.retries, answer.attempt) == ("queued", 1, 2)
    status = job.status()
    assert (status.state, status.retries) == ("failed", 1)


def test_a_cancel_with_its_first_answer_lost_answers_the_first_cancel(local_gateway):
    # Given a running job
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("ops-lost-cancel")
    job = client.queue(queue).add(1)
    held = daemon_client.wire.poll([queue], wait_s=2, daemon_id="ops-test")
    assert isinstance(held, PolledJob)

    def finish() -> None:
        daemon_client.wire.post_result(held.job_id, inline=b"\x01", lease=held.lease)

    # When its cancel is asked, the job then finishes, and the cancel's answer is lost
    transport = LoseFirstAnswer("DELETE", f"/jobs/{job.job_id}", meanwhile=finish)
    answer = lossy_client(local_gateway, transport).job(job.job_id).cancel()
    # Then the retry answers what the first cancel did (a cancel requested of a running job),
    # not a 409 for the job that ended since
    assert transport.lost == 1
    assert (answer.state, answer.cancel_requested) == ("running", True)
    assert job.status().state == "succeeded"


def test_a_key_sent_with_another_request_is_refused_and_a_bad_key_too(local_gateway):
    queue = unique_queue("ops-key-reused")
    url = f"{local_gateway.url}/v1/namespaces/dev/queues/{queue}"
    auth = local_gateway.auth("dev", "client")
    first = httpx.post(
        f"{url}/redrive", json={"limit": 2}, headers={**auth, "Idempotency-Key": "k-1"}
    )
    assert first.status_code == 200
    # When the same key comes with another body, or on another route
    other_body = httpx.post(
        f"{url}/redrive", json={"limit": 3}, headers={**auth, "Idempotency-Key": "k-1"}
    )
    other_route = httpx.post(f"{url}/purge", headers={**auth, "Idempotency-Key": "k-1"})
    bad = httpx.post(f"{url}/purge", headers={**auth, "Idempotency-Key": "no spaces"})
    # Then each is refused with the reason, and the key's own repeat still answers
    for refused in (other_body, other_route):
        assert refused.status_code == 422
        assert refused.json()["error"]["reason"] == "idempotency_key_reused"
    assert bad.status_code == 422
    again = httpx.post(
        f"{url}/redrive", json={"limit": 2}, headers={**auth, "Idempotency-Key": "k-1"}
    )
    assert (again.status_code, again.json()) == (200, first.json())


def lossy_daemon_client(gateway, transport: LoseFirstAnswer) -> Client:
    return Client(
        gateway.url,
        gateway.token("dev", "daemon"),
        "dev",
        http=httpx.Client(transport=transport),
        retry=RetryPolicy(max_attempts=4, base_s=0.01, max_backoff_s=0.05),
    )


@pytest.mark.parametrize("lose", ["502", "cut"])
def test_a_result_post_with_next_sent_again_gets_the_delivery_the_first_took(local_gateway, lose):
    from payloadstore._wire import NextJobs

    # Given two queued jobs, the first in a daemon's hand
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("ops-lost-next")
    first, second = client.queue(queue).add(1), client.queue(queue).add(2)
    held = daemon_client.wire.poll([queue], wait_s=2, daemon_id="ops-test")
    assert isinstance(held, PolledJob) and held.job_id == first.job_id
    # When its result post, asking for the next job, lands but its answer is lost
    transport = LoseFirstAnswer("POST", f"/jobs/{first.job_id}/result", lose)
    worker = lossy_daemon_client(local_gateway, transport)
    answer = worker.wire.post_result(
        first.job_id,
        inline=b"\x01",
        lease=held.lease,
        next=NextJobs((queue,), max_jobs=1, wait_s=0, daemon_id="ops-test"),
    )
    # Then the post sent again answers the delivery the first one took (same job, same
    # lease, its first attempt), not nothing while that one waits out the visibility timeout
    assert transport.lost == 1 and len(transport.sent) == 2
    assert answer is not None and [j.job_id for j in answer] == [second.job_id]
    (taken,) = answer
    assert taken.attempt == 1 and taken.lease and taken.payload_inline is not None
    assert 0 < (taken.lease_expires_in_s or 0) <= 300
    # and that delivery is the job's current one: its result is taken
    daemon_client.wire.post_result(second.job_id, inline=b"\x02", lease=taken.lease)
    assert second.result(timeout=10) == 2
    assert second.status().attempts == 1


class CutWhileWaiting(httpx.BaseTransport):
    """The first request whose path ends with `suffix` is sent, and its connection cut after
    `cut_s` while the control plane still long-polls for its next jobs (the request runs on,
    its answer goes nowhere); every other request goes through."""

    def __init__(self, suffix: str, cut_s: float):
        self.inner = httpx.HTTPTransport()
        self.suffix, self.cut_s = suffix, cut_s
        self.sent: list[httpx.Request] = []
        self.first: threading.Thread | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith(self.suffix):
            return self.inner.handle_request(request)
        self.sent.append(request)
        if self.first is not None:
            return self.inner.handle_request(request)
        request.read()
        orphan = httpx.HTTPTransport()
        self.first = threading.Thread(
            target=lambda: orphan.handle_request(request).read(), daemon=True
        )
        self.first.start()
        time.sleep(self.cut_s)
        raise httpx.ReadError("connection reset by peer", request=request)

    def close(self) -> None:
        self.inner.close()


def test_a_result_post_with_next_sent_again_while_the_first_still_waits_gets_its_job(
    local_gateway,
):
    from payloadstore._wire import NextJobs

    # Given a job in a daemon's hand, its queue otherwise empty
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("ops-cut-next")
    first = client.queue(queue).add(1)
    held = daemon_client.wire.poll([queue], wait_s=2, daemon_id="ops-test")
    assert isinstance(held, PolledJob) and held.job_id == first.job_id
    # When its result post, asking for the next job (waiting up to 4 s), has its connection cut
    # while the control plane still waits, the SDK sends it again, and a job arrives meanwhile
    transport = CutWhileWaiting(f"/jobs/{first.job_id}/result", cut_s=0.5)
    worker = lossy_daemon_client(local_gateway, transport)
    threading.Timer(1.5, lambda: client.queue(queue).add(2)).start()
    answer = worker.wire.post_result(
        first.job_id,
        inline=b"\x01",
        lease=held.lease,
        next=NextJobs((queue,), max_jobs=1, wait_s=4, daemon_id="ops-test"),
    )
    assert transport.first is not None
    transport.first.join(timeout=30)
    # Then the answer the daemon gets carries that job: whichever of the two requests took it,
    # it is not left leased to nobody until the visibility timeout
    assert len(transport.sent) == 2
    assert answer is not None and len(answer) == 1, answer
    (taken,) = answer
    daemon_client.wire.post_result(taken.job_id, inline=b"\x02", lease=taken.lease)
    assert client.job(taken.job_id).result(timeout=10) == 2


def test_a_repeat_while_a_long_redrive_still_runs_gets_its_answer_within_the_sdks_retries(
    local_gateway,
):
    from payloadstore._wire import redrive as redrive_call
    from payloadstore_controlplane.logic.once import fingerprint
    from payloadstore_controlplane.models.api import RedriveRequest
    from payloadstore_controlplane.store import keys

    # Given a redrive whose first request still runs (a redrive may take up to 10 s): its key
    # claimed as operate_once.lua does, its answer kept 9 s later
    client, _ = clients(local_gateway)
    queue = unique_queue("ops-long-redrive")
    key = "long-redrive-1"
    record = keys.operation("dev", key)
    body = RedriveRequest.model_validate({"limit": 2}).model_dump(mode="json")
    print_ = fingerprint("redrive", {"queue": queue, "body": body})
    r = local_gateway.redis_client()
    r.hset(record, "f", print_)
    r.pexpire(record, 60_000)
    answered = threading.Timer(9.0, lambda: r.hset(record, "a", '200 {"retried":2,"skipped":0}'))
    answered.start()
    try:
        # When the SDK sends its repeat (default retry policy), Then it gets the first answer,
        # not ServiceUnavailable for an operation that was done (a new call, with a new key,
        # would redrive 2 more)
        answer = client.wire.send(redrive_call("dev", queue, limit=2, idempotency_key=key))
    finally:
        answered.cancel()
    assert answer.retried == 2
