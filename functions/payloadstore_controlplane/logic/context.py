"""What every logic function receives: who is calling and the stores to act through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..models.domain import (
    JOB_ID_RE,
    IssueRecord,
    JobStatus,
    MultipartRef,
    PayloadKind,
    PayloadRef,
    Tier,
    job_id_time_s,
)
from ..models.errors import NotFound
from ..models.policy import NamespacePolicy
from ..observability import bind_job
from ..store.records import IssuedKey, JobRecord
from .payload_keys import key_for

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
    # The namespace's policy, as the authorizer read it (the defaults without one).
    policy: NamespacePolicy = field(default_factory=NamespacePolicy)


@dataclass(frozen=True)
class Deps:
    settings: Settings
    jobs: RedisJobStore
    objects: S3Objects
    clock: Callable[[], float]
    queues: RedisQueueStats


def find_job(
    namespace: str, job_id: str, deps: Deps, *, with_done: bool = False
) -> JobRecord | None:
    """The job as a client may see it: in a queue, running or finished, in this namespace.

    A job still awaiting its upload, or an S3-tier job whose queue entry was never confirmed,
    is not a job yet. An inline job has no hash until its first delivery: the namespace's
    inline index answers for it (for as long as its queue entry can exist). with_done reads the
    done list's element along with the hash (one round trip)."""
    if not JOB_ID_RE.match(job_id or ""):
        return None
    job = deps.jobs.get_job(job_id, with_done=True) if with_done else deps.jobs.get_job(job_id)
    if job is not None and job.namespace == namespace:
        if job.state is JobStatus.AWAITING_UPLOAD or (
            job.tier is Tier.S3 and job.state is JobStatus.QUEUED and not job.stream_id
        ):
            return None
        return job
    created_s = job_id_time_s(job_id)
    if job is not None or deps.clock() - created_s > deps.settings.retention_s:
        return None
    queue = deps.jobs.queued_inline(namespace, job_id, round(created_s * 1000))
    if queue is None:
        return None
    return JobRecord(
        job_id=job_id,
        namespace=namespace,
        state=JobStatus.QUEUED,
        queue=queue,
        tier=Tier.INLINE,
        attempts=0,
        stream_id=None,
        created_ms=round(created_s * 1000),
        updated_ms=round(created_s * 1000),
        args=None,
        result_issue=None,
        result_kind=None,
        stored=False,
    )


def load_job(p: Principal, job_id: str, deps: Deps, *, with_done: bool = False) -> JobRecord:
    """The job, if it belongs to the caller's namespace; 404 otherwise (never a hint it exists)."""
    job = find_job(p.namespace, job_id, deps, with_done=with_done)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    bind_job(job_id)
    return job


def issue_record(job: JobRecord, kind: PayloadKind, deps: Deps) -> IssueRecord | None:
    """What was issued for the job's args or result key, with its key and bucket rebuilt."""
    issued: IssuedKey | None = job.args if kind is PayloadKind.ARGS else job.result_issue
    if issued is None:
        return None
    if kind is PayloadKind.ARGS or issued.issued_ms is None:
        issued_at = job_id_time_s(job.job_id)
    else:
        issued_at = issued.issued_ms / 1000
    return IssueRecord(
        namespace=job.namespace,
        job_id=job.job_id,
        kind=kind,
        key=key_for(job.job_id, kind, issued.attempt),
        bucket=deps.objects.bucket,
        size=issued.size,
        content_type=issued.content_type,
        sha256=issued.sha256,
        crc64nvme=issued.crc64nvme,
        presigns=issued.presigns,
        issued_at=issued_at,
        part_bytes=issued.part_bytes,
        composite_sha256=issued.composite_sha256,
        attempt=issued.attempt,
    )


def payload_ref(job_id: str, kind: PayloadKind, issued: IssuedKey | None, deps: Deps):
    """The wire reference of an S3 payload, rebuilt from the job id and what was issued."""
    if issued is None:
        return None
    return PayloadRef(
        kind="s3",
        bucket=deps.objects.bucket,
        key=key_for(job_id, kind, issued.attempt),
        size=issued.size,
        contentType=issued.content_type,
        crc64nvme=issued.crc64nvme,
        sha256=issued.sha256,
        multipart=multipart_ref(issued.size, issued.part_bytes, issued.composite_sha256),
    )


def multipart_ref(size: int, part_bytes: int | None, composite: str | None) -> MultipartRef | None:
    """The reference's `multipart` facts (None for a single PUT)."""
    if not part_bytes:
        return None
    return MultipartRef(
        part_bytes=part_bytes, part_count=-(-size // part_bytes), composite_sha256=composite
    )
