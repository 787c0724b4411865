"""Operating the queues (client): list a queue's jobs by state, retry a job, redrive a queue's
failed jobs, purge its queued jobs; served by the jobs function."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from .. import routes
from ..logic.context import Principal
from ..logic.once import REPEAT_WAIT_S, once
from ..logic.operate import list_jobs, purge, redrive, retry_job
from ..models.api import (
    LIST_MAX_JOBS,
    JobListResponse,
    ListState,
    PurgeResponse,
    RedriveRequest,
    RedriveResponse,
    RetryResponse,
)
from ._budget import capped_wait
from ._deps import get_deps
from ._requests import idempotency_key, json_body
from ._responses import json_response
from ._routing import route

DEFAULT_LIST_LIMIT = 50


def register(app) -> None:
    @route(
        app,
        routes.JOBS_LIST,
        summary="A page of the queue's jobs in one state, newest first (failed: every terminal "
        "state but succeeded and cancelled); follow next_cursor for the next page",
    )
    def get_jobs(
        p: Principal,
        ns: str,
        queue: str,
        state: Annotated[ListState, Query()] = "queued",
        limit: Annotated[int, Query(ge=1, le=LIST_MAX_JOBS)] = DEFAULT_LIST_LIMIT,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> JobListResponse:
        return json_response(200, list_jobs(p, queue, state, limit, cursor, get_deps()))

    @route(
        app,
        routes.JOB_RETRY,
        summary="Queue a failed or cancelled job again (same id); 409 not_retryable with the "
        "reason otherwise. Honours Idempotency-Key (a repeat gets the first answer)",
    )
    def post_retry(p: Principal, ns: str, job_id: str) -> RetryResponse:
        deps = get_deps()
        status, answer = once(
            p,
            idempotency_key(app),
            "retry",
            {"job_id": job_id},
            RetryResponse,
            deps,
            lambda: (200, retry_job(p, job_id, deps)),
            capped_wait(app, REPEAT_WAIT_S),
        )
        return json_response(status, answer)

    @route(
        app,
        routes.QUEUE_REDRIVE,
        summary="Retry up to `limit` jobs of the queue that ended in `states` (default: every "
        "failed state). Honours Idempotency-Key (a repeat gets the first answer)",
    )
    def post_redrive(p: Principal, ns: str, queue: str) -> RedriveResponse:
        body = RedriveRequest.model_validate(json_body(app))
        deps = get_deps()
        status, answer = once(
            p,
            idempotency_key(app),
            "redrive",
            {"queue": queue, "body": body.model_dump(mode="json")},
            RedriveResponse,
            deps,
            lambda: (200, redrive(p, queue, body, deps)),
            capped_wait(app, REPEAT_WAIT_S),
        )
        return json_response(status, answer)

    @route(
        app,
        routes.QUEUE_PURGE,
        summary="Cancel every queued job of the queue; answers how many, and how many remain. "
        "Honours Idempotency-Key (a repeat gets the first answer)",
    )
    def post_purge(p: Principal, ns: str, queue: str) -> PurgeResponse:
        deps = get_deps()
        status, answer = once(
            p,
            idempotency_key(app),
            "purge",
            {"queue": queue},
            PurgeResponse,
            deps,
            lambda: (200, purge(p, queue, deps)),
            capped_wait(app, REPEAT_WAIT_S),
        )
        return json_response(status, answer)
