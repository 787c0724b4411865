"""Observability routes: queue figures and throughput (client and daemon tokens), and what a job
carried (client tokens, for operators); served by the jobs function."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from .. import routes
from ..logic.context import Principal
from ..logic.payload_view import job_payloads
from ..logic.queues import list_queues, queue_stats, throughput
from ..models.api import JobPayloadsResponse, QueueListResponse, QueueStats, ThroughputResponse
from ._deps import get_deps
from ._responses import json_response
from ._routing import route


def register(app) -> None:
    @route(
        app,
        routes.QUEUE_LIST,
        summary="Every queue of the namespace: queued, in flight, oldest queued age, failed; "
        "10,000 a page in name order (?after=the previous page's next_after)",
    )
    def get_queues(
        p: Principal,
        ns: str,
        after: Annotated[str | None, Query(max_length=63)] = None,
    ) -> QueueListResponse:
        return json_response(200, list_queues(p, get_deps(), after))

    @route(
        app,
        routes.QUEUE_STATS,
        summary="One queue: queued, in flight, oldest queued age, failed (404 if never used)",
    )
    def get_queue(p: Principal, ns: str, queue: str) -> QueueStats:
        return json_response(200, queue_stats(p, queue, get_deps()))

    @route(
        app,
        routes.QUEUE_THROUGHPUT,
        summary="Succeeded and failed jobs per minute over the last hour, of every queue of "
        "the namespace or of ?queue=Q",
    )
    def get_throughput(
        p: Principal,
        ns: str,
        queue: Annotated[str | None, Query(max_length=63)] = None,
    ) -> ThroughputResponse:
        return json_response(200, throughput(p, queue, get_deps()))

    @route(
        app,
        routes.JOB_PAYLOADS,
        summary="The job's arguments and result as stored: inline bytes (base64), or the S3 "
        "reference with a presigned GET; never schedules a consume deletion",
    )
    def get_job_payloads(p: Principal, ns: str, job_id: str) -> JobPayloadsResponse:
        return json_response(200, job_payloads(p, job_id, get_deps()))
