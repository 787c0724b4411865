"""Client API: enqueue, job status, result long-poll."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from ..logic.enqueue import enqueue
from ..logic.lifecycle import cancel
from ..logic.results import get_result, job_status
from ..models.domain import PayloadRef
from ..models.wire import (
    CancelResponse,
    EnqueueRequest,
    EnqueueResponse,
    JobStatusResponse,
    ResultResponse,
)
from ..observability import lambda_entry
from . import batch, queues
from ._common import (
    get_deps,
    json_body,
    json_response,
    new_resolver,
    principal,
    raw_body,
    roles_for,
)

ENQUEUE = "/v1/namespaces/<ns>/queues/<queue>/jobs"
STATUS = "/v1/namespaces/<ns>/jobs/<job_id>"
RESULT = "/v1/namespaces/<ns>/jobs/<job_id>/result"
RAW_BODY_TYPES = ("application/msgpack", "application/octet-stream")


def register(app) -> None:
    enqueue_roles, status_roles, result_roles = (
        roles_for("POST", ENQUEUE),
        roles_for("GET", STATUS),
        roles_for("GET", RESULT),
    )
    cancel_roles = roles_for("DELETE", STATUS)

    @app.post(
        ENQUEUE,
        summary="Enqueue a job: JSON {payloadRef} | {payloadInline: base64}, or a raw "
        "application/msgpack body (inline). Honours Idempotency-Key for inline jobs.",
        responses={201: {"description": "created"}, 200: {"description": "the same job again"}},
    )
    def enqueue_job(ns: str, queue: str) -> EnqueueResponse:
        p = principal(app, enqueue_roles, ns)
        headers = app.current_event.headers
        content_type = (
            (headers.get("content-type") or headers.get("Content-Type") or "").split(";")[0].strip()
        )
        payload_ref: PayloadRef | None
        payload_inline: bytes | None
        if content_type in RAW_BODY_TYPES:
            payload_ref, payload_inline = None, raw_body(app)
        else:
            req = EnqueueRequest.model_validate(json_body(app))
            payload_ref, payload_inline = req.payloadRef, req.inline_bytes()
        result = enqueue(
            p,
            queue,
            payload_ref=payload_ref,
            payload_inline=payload_inline,
            idempotency_key=headers.get("idempotency-key") or headers.get("Idempotency-Key"),
            deps=get_deps(),
        )
        return json_response(201 if result.created else 200, result.response)

    @app.get(STATUS, summary="Job status: state, attempts, tier, refs, error")
    def get_job(ns: str, job_id: str) -> JobStatusResponse:
        p = principal(app, status_roles, ns)
        return json_response(200, job_status(p, job_id, get_deps()))

    @app.get(
        RESULT,
        summary="Long-poll the result: 200 with the result or terminal error, 202 while pending",
        responses={202: {"description": "still queued or running after the wait"}},
    )
    def result(
        ns: str, job_id: str, wait: Annotated[float, Query(ge=0, le=60)] = 0.0
    ) -> ResultResponse:
        p = principal(app, result_roles, ns)
        response = get_result(p, job_id, wait, get_deps())
        return json_response(200 if response.state.terminal else 202, response)

    @app.delete(
        STATUS,
        summary="Cancel: a queued job ends cancelled (200); a running one gets a cancel request "
        "its daemon sees on its next heartbeat (202); a finished one is 409",
    )
    def cancel_job(ns: str, job_id: str) -> CancelResponse:
        p = principal(app, cancel_roles, ns)
        response = cancel(p, job_id, get_deps())
        return json_response(202 if response.cancel_requested else 200, response)

    queues.register(app)
    batch.register(app)


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
