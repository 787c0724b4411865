"""Many jobs per call (client): batch enqueue and the state of many jobs; served by the jobs
function."""

from __future__ import annotations

from ..logic.batch import enqueue_batch, jobs_status
from ..models.wire import BatchEnqueueResponse, JobsStatusRequest, JobsStatusResponse
from ._common import get_deps, json_body, json_response, principal, roles_for

BATCH = "/v1/namespaces/<ns>/queues/<queue>/jobs:batch"
STATUSES = "/v1/namespaces/<ns>/jobs:status"


def register(app) -> None:
    batch_roles, status_roles = roles_for("POST", BATCH), roles_for("POST", STATUSES)

    @app.post(
        BATCH,
        summary="Enqueue up to BATCH_MAX_JOBS jobs: one answer per job, in order; one bad job "
        "fails only itself",
    )
    def post_batch(ns: str, queue: str) -> BatchEnqueueResponse:
        p = principal(app, batch_roles, ns)
        return json_response(200, enqueue_batch(p, queue, json_body(app), get_deps()))

    @app.post(
        STATUSES,
        summary="The state of up to BATCH_MAX_JOBS jobs; waits up to wait_s for one to finish",
    )
    def post_statuses(ns: str) -> JobsStatusResponse:
        p = principal(app, status_roles, ns)
        req = JobsStatusRequest.model_validate(json_body(app))
        return json_response(200, jobs_status(p, req, get_deps()))
