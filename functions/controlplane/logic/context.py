"""What every logic function receives: who is calling and the stores to act through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..models.settings import Settings
    from ..store.redis_jobs import RedisJobStore
    from ..store.s3_objects import S3Objects


@dataclass(frozen=True)
class Principal:
    namespace: str
    role: str
    token_id: str = ""


@dataclass(frozen=True)
class Deps:
    settings: "Settings"
    jobs: "RedisJobStore"
    objects: "S3Objects"
    clock: Callable[[], float]
