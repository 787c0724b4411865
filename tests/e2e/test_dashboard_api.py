"""The dashboard's JSON routes in front of the local gateway (no browser): what the page reads
and changes is the control plane's, and the token never leaves the serving process."""

from __future__ import annotations

import pytest

from payloadstore import codec
from payloadstore.dashboard import ClientBackend, Dashboard
from tests.e2e.sdk_helpers import clients, unique_queue
from tests.support.dashboard import post, request

pytestmark = pytest.mark.e2e


@pytest.fixture
def served(local_gateway):
    client, _ = clients(local_gateway)
    with Dashboard(
        ClientBackend(client), "127.0.0.1", 0, secrets_to_hide=ClientBackend.secrets(client)
    ) as dashboard:
        dashboard.start()
        yield dashboard, client
    client.close()


def test_given_a_queued_job_when_cancelled_from_the_dashboard_then_the_control_plane_cancelled_it(
    served, local_gateway
):
    dashboard, client = served
    token = local_gateway.token("dev", "client")
    # Given: a job no daemon takes
    queue = unique_queue("dashboard-api")
    job = client.queue(queue).add(1)

    # When: the page reads the queues and the job
    queues = request(dashboard, "GET", "/api/queues")
    detail = request(dashboard, "GET", f"/api/jobs/{job.job_id}")

    # Then: the queue shows one queued job; the job is queued, with its queue and tier
    assert queues.status == 200
    (row,) = [q for q in queues.json()["queues"] if q["name"] == queue]
    assert (row["queued"], row["in_flight"]) == (1, 0)
    assert detail.status == 200
    assert detail.json()["state"] == "queued" and detail.json()["queue"] == queue
    assert detail.json()["tier"] == "inline"

    # When: it is cancelled through the dashboard
    cancelled = post(dashboard, f"/api/jobs/{job.job_id}/cancel")
    # Then: the control plane has it cancelled; a second cancel is the control plane's 409
    assert cancelled.status == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert client.job(job.job_id).status().state == "cancelled"
    again = post(dashboard, f"/api/jobs/{job.job_id}/cancel")
    assert again.status == 409 and again.json()["error"]["message"]

    # And: a job the namespace does not have is a 404; no answer ever held the token
    unknown = request(dashboard, "GET", "/api/jobs/01JD0000000000000000000000")
    assert unknown.status == 404
    for answer in (queues, detail, cancelled, again, unknown, request(dashboard, "GET", "/")):
        assert token not in answer.text


def test_a_cross_site_cancel_never_reaches_the_control_plane(served):
    dashboard, client = served
    job = client.queue(unique_queue("dashboard-api")).add(1)
    refused = post(
        dashboard, f"/api/jobs/{job.job_id}/cancel", Origin="http://evil.example", X_CSRF_Token=""
    )
    assert refused.status == 403
    assert client.job(job.job_id).status().state == "queued"


def test_a_retry_of_a_queued_job_is_a_409_saying_why(served):
    dashboard, client = served
    job = client.queue(unique_queue("dashboard-api")).add(1)
    refused = post(dashboard, f"/api/jobs/{job.job_id}/retry")
    assert refused.status == 409
    error = refused.json()["error"]
    assert error["code"] == "not_retryable"
    assert error["reason"] == "queued"
    assert "only a failed or cancelled job is retried" in error["message"]


def test_given_jobs_that_ended_when_the_page_reads_then_counts_chart_and_arguments_are_the_control_planes(
    served, local_gateway
):
    from payloadstore.errors import JobFailed
    from tests.e2e.sdk_helpers import daemon_thread

    dashboard, client = served
    _, daemon_client = clients(local_gateway)
    queue = unique_queue("dashboard-views")

    def work(value):
        if value == "boom":
            raise ValueError("no boom allowed")
        return {"doubled": value * 2}

    # Given: two jobs that succeeded and one that failed, all within the last minute
    with daemon_thread(daemon_client, queue, work):
        ok = [client.queue(queue).add(n) for n in (1, 2)]
        bad = client.queue(queue).add("boom")
        assert [j.result(timeout=60) for j in ok] == [{"doubled": 2}, {"doubled": 4}]
        with pytest.raises(JobFailed):
            bad.result(timeout=60)

    # When: the page reads the queues, the queue's throughput and the failed job's payloads
    (row,) = [
        q for q in request(dashboard, "GET", "/api/queues").json()["queues"] if q["name"] == queue
    ]
    chart = request(dashboard, "GET", f"/api/throughput?queue={queue}").json()
    failed = request(dashboard, "GET", f"/api/jobs/{bad.job_id}/payloads").json()
    done = request(dashboard, "GET", f"/api/jobs/{ok[0].job_id}/payloads").json()

    # Then: one failed, nothing queued or running; the chart's last minutes hold the three ends
    assert (row["queued"], row["in_flight"], row["failed"]) == (0, 0, 1)
    assert (sum(chart["succeeded"]), sum(chart["failed"])) == (2, 1)
    assert len(chart["succeeded"]) == 60
    # And: the failed job's arguments read as text; the succeeded one's result too (its inline
    # arguments were freed at its end, and the page says so)
    assert failed["args"]["preview"] == "{'args': ['boom'], 'kwargs': {}}"
    assert failed["result"] is None
    assert done["args"]["gone"] == "not_kept"
    assert done["result"]["preview"] == "{'doubled': 2}"
    # And: a download of the arguments is the stored bytes
    raw = request(dashboard, "GET", f"/api/jobs/{bad.job_id}/args/download")
    assert raw.status == 200
    assert codec.decode(raw.content) == {"args": ["boom"], "kwargs": {}}
