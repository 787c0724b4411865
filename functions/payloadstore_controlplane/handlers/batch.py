"""Many jobs per call (client): batch enqueue and the state of many jobs; served by the jobs
function."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from .. import routes
from ..logic.batch import enqueue_batch, jobs_status
from ..logic.context import Principal
from ..logic.results import with_results
from ..models.api import BatchEnqueueResponse, JobsStatusRequest, JobsStatusResponse
from ._budget import capped_wait
from ._deps import get_deps
from ._requests import json_body
from ._responses import json_response
from ._routing import route


def register(app) -> None:
    @route(
        app,
        routes.ENQUEUE_BATCH,
        summary="Enqueue up to BATCH_MAX_JOBS jobs: one answer per job, in order; one bad job "
        "fails only itself. With ?wait=S, each job that ends within S carries its result.",
    )
    def post_batch(
        p: Principal, ns: str, queue: str, wait: Annotated[float, Query(ge=0, le=60)] = 0.0
    ) -> BatchEnqueueResponse:
        deps = get_deps()
        answer = enqueue_batch(p, queue, json_body(app), deps)
        if wait > 0:
            # One deadline for the whole batch, capped as every long-poll is (_budget.py).
            jobs = with_results(p, answer.jobs, capped_wait(app, wait), deps)
            answer = BatchEnqueueResponse(jobs=jobs)
        return json_response(200, answer)

    @route(
        app,
        routes.JOBS_STATUS,
        summary="The state of up to BATCH_MAX_JOBS jobs; waits up to wait_s for one to finish",
    )
    def post_statuses(p: Principal, ns: str) -> JobsStatusResponse:
        req = JobsStatusRequest.model_validate(json_body(app))
        # The wait ends in time to answer, whatever the cold start took (_budget.py).
        req = req.model_copy(update={"wait_s": capped_wait(app, req.wait_s)})
        return json_response(200, jobs_status(p, req, get_deps()))
