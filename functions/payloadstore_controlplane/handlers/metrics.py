"""Scheduled (EventBridge, every minute): publish queue depth, in flight, failed jobs and oldest
queued age per namespace and queue, and Redis memory, as EMF metrics. The elasticity controller and the dashboard
read these; the OldestJobAgeSeconds alarm watches the stack-wide maximum.

Namespaces come from Redis: the set of namespaces that enqueued or polled (keys.namespaces, added
by those paths once per container every few minutes), so this function never lists the token
store (SSM's Get* rate is the authorizer's; a listing every minute took ~N/10 calls). A namespace
with a token that never enqueued nor polled has no queue to publish anyway; after an upgrade a
namespace appears at its first enqueue or poll. Queues come from each namespace's queue-name
set. It also deletes the payloads of retention `consume` namespaces that are due (a
succeeded job's arguments, a read result: logic/policy.py). It changes no job; it removes a queue that is empty, has nothing in
flight and had no job for STALE_CONSUMER_IDLE_S (its stream and name: the next enqueue creates
it again), so queues nobody uses any more do not stay in Redis even when no daemon polls them.
"""

from __future__ import annotations

from ..logic.policy import drain_consumed
from ..logic.queues import namespace_queues
from ..observability import (
    FAILED_JOBS,
    IN_FLIGHT,
    OLDEST_JOB_AGE,
    QUEUE_DEPTH,
    REDIS_MEMORY_MAX,
    REDIS_MEMORY_USED,
    emit_metric_set,
    lambda_entry,
    logger,
)
from ._deps import get_deps


def publish(namespaces: list[str]) -> dict:
    """Emit one EMF document per queue plus the stack-wide figures; return what was published."""
    deps = get_deps()
    oldest = 0.0
    published: list[dict] = []
    now_ms = int(deps.clock() * 1000)
    idle_ms = deps.settings.stale_consumer_idle_s * 1000
    for ns in namespaces:
        queues = namespace_queues(ns, deps)
        unused = [q.name for q in queues if not q.queued and not q.in_flight]
        if unused:
            deps.jobs.collect_queues(ns, unused, now_ms, idle_ms, every_s=0)
        for q in queues:
            age = q.oldest_queued_age_s or 0.0
            oldest = max(oldest, age)
            emit_metric_set(
                {"namespace": ns, "queue": q.name},
                {
                    QUEUE_DEPTH: ("Count", q.queued),
                    IN_FLIGHT: ("Count", q.in_flight),
                    FAILED_JOBS: ("Count", q.failed),
                    OLDEST_JOB_AGE: ("Seconds", age),
                },
            )
            published.append({"namespace": ns, **q.model_dump()})
    used, maximum = deps.queues.memory()
    stack_wide: dict[str, tuple[str, float]] = {
        OLDEST_JOB_AGE: ("Seconds", oldest),
        REDIS_MEMORY_USED: ("Bytes", used),
    }
    if maximum:
        stack_wide[REDIS_MEMORY_MAX] = ("Bytes", maximum)
    emit_metric_set({}, stack_wide)
    logger.info(
        "queue metrics published",
        extra={"namespaces": len(namespaces), "queues": len(published), "oldest_s": oldest},
    )
    return {
        "queues": published,
        "oldest_queued_age_s": oldest,
        "redis_memory": {"used": used, "max": maximum},
    }


@lambda_entry
def lambda_handler(event, context):
    namespaces = get_deps().queues.namespaces()
    published = publish(namespaces)
    # Retention `consume`: delete the payloads that are due (logic/policy.py); lifecycle rules
    # stay the backstop should a run be missed.
    published["consumed_deleted"] = drain_consumed(namespaces, get_deps())
    return published
