"""Queue observability routes (client and daemon tokens): served by the jobs function."""

from __future__ import annotations

from ..logic.queues import list_queues, queue_stats
from ..models.wire import QueueListResponse, QueueStats
from ._common import get_deps, json_response, principal, roles_for

QUEUES = "/v1/namespaces/<ns>/queues"
QUEUE = "/v1/namespaces/<ns>/queues/<queue>"


def register(app) -> None:
    list_roles, one_roles = roles_for("GET", QUEUES), roles_for("GET", QUEUE)

    @app.get(QUEUES, summary="Every queue of the namespace: queued, in flight, oldest queued age")
    def get_queues(ns: str) -> QueueListResponse:
        p = principal(app, list_roles, ns)
        return json_response(200, list_queues(p, get_deps()))

    @app.get(QUEUE, summary="One queue: queued, in flight, oldest queued age (404 if never used)")
    def get_queue(ns: str, queue: str) -> QueueStats:
        p = principal(app, one_roles, ns)
        return json_response(200, queue_stats(p, queue, get_deps()))
