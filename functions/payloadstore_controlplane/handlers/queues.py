"""Queue observability routes (client and daemon tokens): served by the jobs function."""

from __future__ import annotations

from .. import routes
from ..logic.context import Principal
from ..logic.queues import list_queues, queue_stats
from ..models.api import QueueListResponse, QueueStats
from ._deps import get_deps
from ._responses import json_response
from ._routing import route


def register(app) -> None:
    @route(
        app,
        routes.QUEUE_LIST,
        summary="Every queue of the namespace: queued, in flight, oldest queued age",
    )
    def get_queues(p: Principal, ns: str) -> QueueListResponse:
        return json_response(200, list_queues(p, get_deps()))

    @route(
        app,
        routes.QUEUE_STATS,
        summary="One queue: queued, in flight, oldest queued age (404 if never used)",
    )
    def get_queue(p: Principal, ns: str, queue: str) -> QueueStats:
        return json_response(200, queue_stats(p, queue, get_deps()))
