"""Queue observability: depth, in flight and oldest queued age, per queue of a namespace."""

from __future__ import annotations

from ..models.api import QueueListResponse, QueueStats
from ..models.errors import NotFound
from ..store.records import QueueCounts
from .context import Deps, Principal
from .enqueue import validate_queue_name


def _stats(counts: QueueCounts, now: float) -> QueueStats:
    age = None
    if counts.oldest_queued_ms is not None:
        age = round(max(now - counts.oldest_queued_ms / 1000.0, 0.0), 3)
    return QueueStats(
        name=counts.name,
        queued=counts.queued,
        in_flight=counts.in_flight,
        oldest_queued_age_s=age,
    )


def namespace_queues(namespace: str, deps: Deps) -> list[QueueStats]:
    """Every queue the namespace has used, in name order."""
    names = deps.queues.queue_names(namespace)
    now = deps.clock()
    return [_stats(c, now) for c in deps.queues.counts(namespace, names)]


def list_queues(p: Principal, deps: Deps) -> QueueListResponse:
    return QueueListResponse(queues=namespace_queues(p.namespace, deps))


def queue_stats(p: Principal, queue: str, deps: Deps) -> QueueStats:
    validate_queue_name(queue)
    [counts] = deps.queues.counts(p.namespace, [queue])
    if not counts.exists and queue not in deps.queues.queue_names(p.namespace):
        raise NotFound(f"queue {queue} not found in namespace {p.namespace}")
    return _stats(counts, deps.clock())
