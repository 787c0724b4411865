"""Queue observability: depth, in flight, oldest queued age and failed count per queue of a
namespace, and its jobs' ends per minute over the last hour (the dashboard's chart)."""

from __future__ import annotations

from ..models.api import QueueListResponse, QueueStats, ThroughputResponse
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
        failed=counts.failed,
    )


def _failed_since_ms(deps: Deps) -> int:
    """The failed count's window: the retention (the failed-jobs set is pruned to it too)."""
    return max(int((deps.clock() - deps.settings.result_ttl_s) * 1000), 0)


def namespace_queues(namespace: str, deps: Deps) -> list[QueueStats]:
    """Every queue the namespace has used, in name order."""
    names = deps.queues.queue_names(namespace)
    now = deps.clock()
    counts = deps.queues.counts(namespace, names, _failed_since_ms(deps))
    return [_stats(c, now) for c in counts]


# The most queues one listing answers: each QueueStats weighs at most ~250 B escaped (a 63-char
# name, four 20-digit figures), so a page stays far inside the answer's byte budget
# (models/limits.py); a namespace may use any number of queues.
QUEUE_LIST_PAGE = 10_000


def list_queues(p: Principal, deps: Deps, after: str | None = None) -> QueueListResponse:
    """The namespace's queues in name order, from the first after `after`, a page at a time."""
    if after is not None:
        validate_queue_name(after)
    names = deps.queues.queue_names(p.namespace)
    if after is not None:
        names = [n for n in names if n > after]
    page = names[:QUEUE_LIST_PAGE]
    counts = deps.queues.counts(p.namespace, page, _failed_since_ms(deps))
    now = deps.clock()
    return QueueListResponse(
        queues=[_stats(c, now) for c in counts],
        next_after=page[-1] if len(names) > len(page) else None,
    )


def queue_stats(p: Principal, queue: str, deps: Deps) -> QueueStats:
    validate_queue_name(queue)
    [counts] = deps.queues.counts(p.namespace, [queue], _failed_since_ms(deps))
    if not counts.exists and queue not in deps.queues.queue_names(p.namespace):
        raise NotFound(f"queue {queue} not found in namespace {p.namespace}")
    return _stats(counts, deps.clock())


def throughput(p: Principal, queue: str | None, deps: Deps) -> ThroughputResponse:
    """Succeeded and failed jobs per minute over the last hour: of one queue, or of every
    queue of the namespace summed (`queue` None). A queue never used answers zeros."""
    if queue is not None:
        validate_queue_name(queue)
        names = [queue]
    else:
        names = deps.queues.queue_names(p.namespace)
    figures = deps.queues.throughput(p.namespace, names, deps.clock())
    return ThroughputResponse(
        queue=queue,
        start=figures.start_s,
        succeeded=figures.succeeded,
        failed=figures.failed,
    )
