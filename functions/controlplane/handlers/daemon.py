"""Daemon API: poll, result post, failure report, heartbeat."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from ..logic.daemon import poll, post_result, report_failure
from ..logic.lifecycle import heartbeat
from ..models.wire import (
    FailureReport,
    HeartbeatRequest,
    HeartbeatResponse,
    PollRequest,
    PollResponse,
    ResultPost,
)
from ..observability import lambda_entry
from ._common import (
    empty_response,
    get_deps,
    json_response,
    json_text_response,
    new_resolver,
    principal,
    roles_for,
)

POLL = "/v1/daemon/poll"
RESULT = "/v1/namespaces/<ns>/jobs/<job_id>/result"
FAILURE = "/v1/namespaces/<ns>/jobs/<job_id>/failure"
HEARTBEAT = "/v1/namespaces/<ns>/jobs/<job_id>/heartbeat"


def register(app) -> None:
    poll_roles, result_roles, failure_roles = (
        roles_for("POST", POLL),
        roles_for("POST", RESULT),
        roles_for("POST", FAILURE),
    )
    heartbeat_roles = roles_for("POST", HEARTBEAT)

    @app.post(
        POLL,
        summary="Take the next job of the named queues (blocking up to wait_s); 204 when idle",
        responses={
            200: {"description": "a job", "content": {"application/json": {"model": PollResponse}}},
            204: {"description": "nothing to do"},
        },
    )
    def poll_job(body: Annotated[PollRequest, Body()]):
        p = principal(app, poll_roles)
        delivery = poll(p, body, get_deps())
        return empty_response(204) if delivery is None else json_text_response(200, delivery)

    @app.post(
        RESULT, summary="Post a job's result or error", responses={204: {"description": "stored"}}
    )
    def result(ns: str, job_id: str, body: Annotated[ResultPost, Body()]):
        p = principal(app, result_roles, ns)
        post_result(p, job_id, body, get_deps())
        return empty_response(204)

    @app.post(
        FAILURE,
        summary="Report payload_lost (requeued once by default) or payload_corrupt (terminal)",
        responses={204: {"description": "recorded"}},
    )
    def failure(ns: str, job_id: str, body: Annotated[FailureReport, Body()]):
        p = principal(app, failure_roles, ns)
        report_failure(p, job_id, body, get_deps())
        return empty_response(204)

    @app.post(
        HEARTBEAT,
        summary="Extend the delivery's lease (restarts its visibility clock); says whether a "
        "client asked to cancel",
    )
    def heartbeat_job(
        ns: str, job_id: str, body: Annotated[HeartbeatRequest, Body()]
    ) -> HeartbeatResponse:
        p = principal(app, heartbeat_roles, ns)
        return json_response(200, heartbeat(p, job_id, body, get_deps()))


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
