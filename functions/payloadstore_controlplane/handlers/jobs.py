"""Client API: enqueue, job status, result long-poll."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from .. import routes
from ..logic.context import Principal
from ..logic.enqueue import enqueue
from ..logic.lifecycle import cancel
from ..logic.once import REPEAT_WAIT_S, once
from ..logic.results import get_result, job_status, with_result
from ..models.api import (
    CancelResponse,
    EnqueueRequest,
    EnqueueResponse,
    JobStatusResponse,
    ResultResponse,
)
from ..models.domain import PayloadRef
from ..observability import lambda_entry
from . import batch, operate, queues
from ._budget import capped_wait
from ._deps import get_deps
from ._requests import idempotency_key, json_body, media_type, raw_body
from ._resolver import new_resolver
from ._responses import json_response
from ._routing import route

# The enqueue body types other than JSON: the payload itself, sent as it is (inline).
RAW_BODY_TYPES = tuple(m for m in routes.ENQUEUE.body if m != "application/json")


def register(app) -> None:
    @route(
        app,
        routes.ENQUEUE,
        summary="Enqueue a job: JSON {payloadRef} | {payloadInline: base64}, or a raw "
        "application/msgpack body (inline). Honours Idempotency-Key for inline jobs. With "
        "?wait=S, the answer carries the result too when the job ends within S.",
        responses={201: {"description": "created"}, 200: {"description": "the same job again"}},
    )
    def enqueue_job(
        p: Principal, ns: str, queue: str, wait: Annotated[float, Query(ge=0, le=60)] = 0.0
    ) -> EnqueueResponse:
        headers = app.current_event.headers
        payload_ref: PayloadRef | None
        payload_inline: bytes | None
        blobs: list[str] = []
        if media_type(headers) in RAW_BODY_TYPES:
            payload_ref, payload_inline = None, raw_body(app)
        else:
            req = EnqueueRequest.model_validate(json_body(app))
            payload_ref, payload_inline, blobs = req.payloadRef, req.inline_bytes(), req.blobs
        result = enqueue(
            p,
            queue,
            payload_ref=payload_ref,
            payload_inline=payload_inline,
            idempotency_key=idempotency_key(app),
            deps=get_deps(),
            blobs=blobs,
        )
        response = result.response
        if wait > 0:
            # Enqueue-and-wait: the job is queued; its result joins the answer if it ends in
            # time. The wait ends in time to answer, as GET .../result?wait does (_budget.py).
            response = with_result(p, response, capped_wait(app, wait), get_deps())
        return json_response(201 if result.created else 200, response)

    @route(app, routes.JOB_STATUS, summary="Job status: state, attempts, tier, refs, error")
    def get_job(p: Principal, ns: str, job_id: str) -> JobStatusResponse:
        return json_response(200, job_status(p, job_id, get_deps()))

    @route(
        app,
        routes.RESULT_GET,
        summary="Long-poll the result: 200 with the result or terminal error, 202 while pending",
        responses={202: {"description": "still queued or running after the wait"}},
    )
    def result(
        p: Principal, ns: str, job_id: str, wait: Annotated[float, Query(ge=0, le=60)] = 0.0
    ) -> ResultResponse:
        # The wait ends in time to answer, whatever the cold start took (_budget.py).
        response = get_result(p, job_id, capped_wait(app, wait), get_deps())
        return json_response(200 if response.state.terminal else 202, response)

    @route(
        app,
        routes.CANCEL,
        summary="Cancel: a queued job ends cancelled (200); a running one gets a cancel request "
        "its daemon sees on its next heartbeat (202); a finished one is 409. Honours "
        "Idempotency-Key (a repeat gets the first answer)",
    )
    def cancel_job(p: Principal, ns: str, job_id: str) -> CancelResponse:
        deps = get_deps()

        def run() -> tuple[int, CancelResponse]:
            response = cancel(p, job_id, deps)
            return (202 if response.cancel_requested else 200), response

        key = idempotency_key(app)
        wait_s = capped_wait(app, REPEAT_WAIT_S)
        status, answer = once(
            p, key, "cancel", {"job_id": job_id}, CancelResponse, deps, run, wait_s
        )
        return json_response(status, answer)

    queues.register(app)
    batch.register(app)
    operate.register(app)


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
