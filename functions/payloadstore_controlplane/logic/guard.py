"""The Redis memory guard: refuse inline bytes before Redis is full, and everything that adds
jobs a little later, so a full Redis never turns into 500s or jobs that are in no queue.

Memory is read from `INFO memory` of the node that would take the write (cluster mode: the node
of the key's slot), at most once a second per container (`RedisJobStore.memory`). Without a
`maxmemory` there is no wall to guard against and nothing is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.errors import InlineUnavailable, RedisMemoryFull
from ..observability import logger, metrics_count
from .context import Deps

RETRY_AFTER_S = 5


@dataclass(frozen=True)
class MemoryState:
    used: int
    limit: int  # 0: no maxmemory
    high_water_pct: int
    hard_pct: int

    @property
    def pct(self) -> float:
        return 100.0 * self.used / self.limit if self.limit else 0.0

    @property
    def inline_refused(self) -> bool:
        return bool(self.limit) and self.pct >= self.high_water_pct

    @property
    def enqueue_refused(self) -> bool:
        return bool(self.limit) and self.pct >= self.hard_pct


def memory_state(
    deps: Deps, *, job_id: str | None = None, namespace: str | None = None
) -> MemoryState:
    """The memory of the node that takes the write: the job's keys, or the namespace's queues
    (cluster mode: the node of that slot); any node without either."""
    if job_id is not None:
        used, limit = deps.jobs.job_memory(job_id)
    elif namespace is not None:
        used, limit = deps.jobs.namespace_memory(namespace)
    else:
        used, limit = deps.jobs.memory()
    s = deps.settings
    return MemoryState(used, limit, s.redis_memory_high_water_pct, s.redis_memory_hard_pct)


def refuse_inline(
    deps: Deps, what: str, *, job_id: str | None = None, namespace: str | None = None
) -> None:
    """503 inline_unavailable past the high-water mark; `what` is 'payload' or 'result'."""
    state = memory_state(deps, job_id=job_id, namespace=namespace)
    if state.inline_refused:
        metrics_count("InlineRefused", kind=what)
        logger.warning(
            "inline refused: redis past its high-water mark",
            extra={"redis_used": state.used, "redis_max": state.limit, "kind": what},
        )
        raise InlineUnavailable(
            f"redis is {state.pct:.0f}% full (high-water mark {state.high_water_pct}%): inline "
            f"{what}s are refused for now; upload the bytes with presign and send the reference",
            retry_after_s=RETRY_AFTER_S,
        )


def refuse_enqueue(deps: Deps, *, job_id: str | None = None, namespace: str | None = None) -> None:
    """503 redis_memory_full past the hard mark: no new jobs until daemons drain some."""
    state = memory_state(deps, job_id=job_id, namespace=namespace)
    if state.enqueue_refused:
        metrics_count("EnqueueRefused")
        raise RedisMemoryFull(
            f"redis is {state.pct:.0f}% full (hard mark {state.hard_pct}%): no new jobs for now",
            retry_after_s=RETRY_AFTER_S,
        )
