"""What every logic function receives: who is calling and the stores to act through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models.errors import NotFound
from ..observability import bind_job

if TYPE_CHECKING:
    from ..models.settings import Settings
    from ..store.redis_jobs import RedisJobStore
    from ..store.redis_queues import RedisQueueStats
    from ..store.s3_objects import S3Objects


@dataclass(frozen=True)
class Principal:
    namespace: str
    role: str
    token_id: str = ""


@dataclass(frozen=True)
class Deps:
    settings: Settings
    jobs: RedisJobStore
    objects: S3Objects
    clock: Callable[[], float]
    queues: RedisQueueStats | None = None


def load_job(p: Principal, job_id: str, deps: Deps) -> dict:
    """The job, if it belongs to the caller's namespace; 404 otherwise (never a hint it exists)."""
    job = deps.jobs.get_job(job_id)
    if job is None or job.get("namespace") != p.namespace:
        raise NotFound(f"job {job_id} not found")
    bind_job(job_id)
    return job
