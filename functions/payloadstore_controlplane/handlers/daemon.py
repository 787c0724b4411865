"""Daemon API: poll, result post, failure report, heartbeat."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from .. import routes
from ..logic.context import Principal
from ..logic.daemon import poll, poll_many, post_result, report_failure
from ..logic.lifecycle import heartbeat, renew_leases
from ..logic.once import next_once
from ..models.api import (
    FailureReport,
    HeartbeatRequest,
    HeartbeatResponse,
    LeasesRequest,
    LeasesResponse,
    NextPoll,
    PollManyResponse,
    PollRequest,
    PollResponse,
    ResultPost,
)
from ..observability import lambda_entry
from ._budget import capped_wait
from ._deps import get_deps
from ._requests import idempotency_key
from ._resolver import new_resolver
from ._responses import empty_response, json_response, json_text_response
from ._routing import route


def register(app) -> None:
    @route(
        app,
        routes.POLL,
        summary="Take the next job of the named queues (blocking up to wait_s), or with max_jobs "
        "up to that many; 204 when idle",
        responses={
            200: {
                "description": 'a job; with max_jobs, {"jobs": [...]}',
                "content": {"application/json": {"model": PollResponse | PollManyResponse}},
            },
            204: {"description": "nothing to do"},
        },
    )
    def poll_job(p: Principal, body: Annotated[PollRequest, Body()]):
        # The wait ends in time to answer, whatever the cold start took (_budget.py).
        body = body.model_copy(update={"wait_s": capped_wait(app, body.wait_s)})
        if body.max_jobs is not None:
            jobs = poll_many(p, body, get_deps())
            return (
                empty_response(204)
                if not jobs
                else json_text_response(200, PollManyResponse(jobs=jobs))
            )
        delivery = poll(p, body, get_deps())
        return empty_response(204) if delivery is None else json_text_response(200, delivery)

    def then_next(p: Principal, nxt: NextPoll | None):
        """204 without `next`; with it, the next deliveries (maybe none) as a poll with max_jobs
        answers them. Called only once the post's own outcome is stored: a post that fails
        raised before this, so it leased nothing."""
        if nxt is None:
            return empty_response(204)
        # The wait ends in time to answer, whatever the post and the cold start took. With an
        # Idempotency-Key, the post sent again gets the deliveries the first one took.
        wait_s = capped_wait(app, nxt.wait_s)
        jobs = next_once(p, idempotency_key(app), nxt, wait_s, get_deps())
        return json_text_response(200, PollManyResponse(jobs=jobs))

    @route(
        app,
        routes.RESULT_POST,
        summary="Post a job's result or error; with `next`, also take the daemon's next jobs "
        "(with an Idempotency-Key, the post sent again gets the same ones)",
        responses={
            200: {
                "description": 'with next: {"jobs": [...]}, the next deliveries (maybe none)',
                "content": {"application/json": {"model": PollManyResponse}},
            },
            204: {"description": "stored"},
        },
    )
    def result(p: Principal, ns: str, job_id: str, body: Annotated[ResultPost, Body()]):
        post_result(p, job_id, body, get_deps())
        return then_next(p, body.next)

    @route(
        app,
        routes.FAILURE,
        summary="Report payload_lost (requeued once by default) or payload_corrupt (terminal); "
        "with `next`, also take the daemon's next jobs",
        responses={
            200: {
                "description": 'with next: {"jobs": [...]}, the next deliveries (maybe none)',
                "content": {"application/json": {"model": PollManyResponse}},
            },
            204: {"description": "recorded"},
        },
    )
    def failure(p: Principal, ns: str, job_id: str, body: Annotated[FailureReport, Body()]):
        report_failure(p, job_id, body, get_deps())
        return then_next(p, body.next)

    @route(
        app,
        routes.HEARTBEAT,
        summary="Extend the delivery's lease (restarts its visibility clock); says whether a "
        "client asked to cancel",
    )
    def heartbeat_job(
        p: Principal, ns: str, job_id: str, body: Annotated[HeartbeatRequest, Body()]
    ) -> HeartbeatResponse:
        return json_response(200, heartbeat(p, job_id, body, get_deps()))

    @route(
        app,
        routes.LEASES,
        summary="Renew every lease the daemon holds, then wait up to wait_s; answers at once "
        "when a client cancels one of its jobs (one long-poll per busy daemon, in place of a "
        "heartbeat per job)",
    )
    def leases(p: Principal, body: Annotated[LeasesRequest, Body()]) -> LeasesResponse:
        # The wait ends in time to answer, whatever the renewals and the cold start took.
        return json_response(200, renew_leases(p, body, capped_wait(app, body.wait_s), get_deps()))


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
