"""The dashboard's JSON routes in front of the local gateway (no browser): what the page reads
and changes is the control plane's, and the token never leaves the serving process."""

from __future__ import annotations

import pytest

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
