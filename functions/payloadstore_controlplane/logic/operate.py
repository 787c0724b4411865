"""Operating the queues (client role): list a queue's jobs by state, retry a job that failed or
was cancelled, redrive a queue's failed jobs, purge its queued jobs.

Listing costs no copy of a job: queued and running jobs are read from the queue stream and its
consumer group, jobs that ended from the queue's ended-jobs index (a few tens of bytes per job,
see docs/design.md, "The ended-jobs index"); each listed job is then read from its own hash.

A retry keeps the job's id, its created time and its attempt count (the next delivery's
`attempt` goes on from there), and starts the delivery cap again (MAX_DELIVERIES counts the
deliveries since the retry). Its inline args were kept when it ended; an S3-tier job's args
object lives for the retention, counted from the job's creation. The blobs it references (its
blob list, kept with its args) must still be in the namespace: a retry records that the retried
job needs them, as an enqueue does, and is refused (`blob_expired`) when one has expired."""

from __future__ import annotations

import re

from ..models.api import (
    LIST_MAX_JOBS,
    JobListResponse,
    JobStatusResponse,
    PurgeResponse,
    RedriveRequest,
    RedriveResponse,
    RetryResponse,
)
from ..models.domain import JobStatus, PayloadKind, Tier, job_id_time_s
from ..models.errors import NotFound, NotRetryable, RedisMemoryFull, Unprocessable
from ..models.limits import DELIVERIES_BUDGET, delivery_bytes
from ..models.policy import RETENTION_DAYS, NamespacePolicy
from ..observability import bind_job, logger, metrics_count
from ..store.records import (
    GROUP_OF_STATE,
    STATE_GROUPS,
    CancelledQueued,
    Ended,
    JobRecord,
    Missing,
    RetryRefused,
    ScannedEntry,
    Started,
)
from .blobs import lifecycle_days, referenced, unpacked
from .context import Deps, Principal, find_job
from .daemon import RETRYABLE_STATES
from .enqueue import validate_queue_name
from .lifecycle import cancelled_error
from .payload_keys import key_for
from .policy import keep_for_class
from .results import status_of

CURSOR_RE = re.compile(r"^\d{1,20}-\d{1,20}$")
DAY_S = 86_400
SHORTEST_DAYS = min(RETENTION_DAYS.values())
# A listing of ended jobs reads at most this many pages of the index to fill its page (entries
# of jobs retried since are skipped).
ENDED_READS = 3
# Redrive and purge work at most this long per call (API Gateway answers within 29 s); purge
# answers what remains, redrive is called again for the rest.
PURGE_BUDGET_S = 10.0
REDRIVE_BUDGET_S = 10.0
# Retry-After of a redrive that left jobs with blobs for lack of Redis memory.
REDRIVE_RETRY_AFTER_S = 2


def list_jobs(
    p: Principal, queue: str, state: str, limit: int, cursor: str | None, deps: Deps
) -> JobListResponse:
    validate_queue_name(queue)
    if not 1 <= limit <= LIST_MAX_JOBS:
        raise Unprocessable(f"limit must be 1..{LIST_MAX_JOBS}")
    if cursor and not CURSOR_RE.match(cursor):
        raise Unprocessable("cursor is not one this API handed out (next_cursor)")
    if state in ("queued", "running"):
        jobs, next_cursor = _live(p.namespace, queue, state, limit, cursor or "", deps)
    elif state in STATE_GROUPS:
        jobs, next_cursor = _ended(p.namespace, queue, state, limit, cursor or "", deps)
    else:
        raise Unprocessable(f"state must be one of queued, running, {', '.join(STATE_GROUPS)}")
    return JobListResponse(jobs=jobs, next_cursor=next_cursor or None)


def _live_record(
    namespace: str, queue: str, entry: ScannedEntry, job: JobRecord | None
) -> JobRecord | None:
    """The job an entry of the queue stream stands for, if the entry is the job's own."""
    if job is None:
        if entry.inline_size is None:
            return None
        # A queued inline job has no hash before its first delivery: its entry says it all.
        created_ms = round(job_id_time_s(entry.job_id) * 1000)
        return JobRecord(
            job_id=entry.job_id,
            namespace=namespace,
            state=JobStatus.QUEUED,
            queue=queue,
            tier=Tier.INLINE,
            attempts=0,
            stream_id=entry.stream_id,
            created_ms=created_ms,
            updated_ms=created_ms,
            args=None,
            result_issue=None,
            result_kind=None,
            stored=False,
            args_size=entry.inline_size,
        )
    if job.namespace != namespace or job.stream_id not in (entry.stream_id, "*"):
        return None  # a stale double of the job's entry, or not this namespace's
    return job


def _live(
    namespace: str, queue: str, state: str, limit: int, cursor: str, deps: Deps
) -> tuple[list[JobStatusResponse], str]:
    entries, next_cursor = deps.jobs.scan_queue(namespace, queue, state, cursor, limit)
    records = deps.jobs.read_jobs([e.job_id for e in entries if e.job_id], errors=False)
    out: list[JobStatusResponse] = []
    seen: set[str] = set()
    for entry in entries:
        job = _live_record(namespace, queue, entry, records.get(entry.job_id))
        if job is None or job.state != state or job.job_id in seen:
            continue
        seen.add(job.job_id)
        out.append(status_of(job, deps, traceback=False))
    return out, next_cursor


def _ended(
    namespace: str, queue: str, group: str, limit: int, cursor: str, deps: Deps
) -> tuple[list[JobStatusResponse], str]:
    out: list[JobStatusResponse] = []
    seen: set[str] = set()
    # The answer's byte budget (models/limits.py): 100 failed jobs' error messages of 16 KiB
    # each, in any characters, could take 23 MB. The page ends before the first job that
    # would not fit, and its cursor resumes there.
    left = DELIVERIES_BUDGET
    for _ in range(ENDED_READS):
        start = cursor
        entries, cursor = deps.jobs.ended_entries(namespace, queue, group, cursor, limit - len(out))
        records = deps.jobs.read_jobs([e.job_id for e in entries], errors=True)
        for n, entry in enumerate(entries):
            job = records.get(entry.job_id)
            # An entry of a job retried since (its retries moved on), or gone: skipped.
            if (
                job is None
                or job.namespace != namespace
                or GROUP_OF_STATE.get(job.state) != group
                or job.retries != entry.retries
                or job.job_id in seen
            ):
                continue
            status = status_of(job, deps, traceback=False)
            left -= delivery_bytes(status)
            if left < 0 and out:
                # The next page starts below the entry read before this one: at this one.
                logger.info("job list page full", extra={"listed": len(out)})
                return out, entries[n - 1].stream_id if n else start
            seen.add(job.job_id)
            out.append(status)
        if not cursor or len(out) >= limit:
            break
    return out, cursor


# -- retry ---------------------------------------------------------------------------------


def _refusal(job_id: str, state: str) -> NotRetryable:
    reason = state if state in ("succeeded", "queued", "running") else "state"
    return NotRetryable(
        f"job {job_id} is {state}: only a failed or cancelled job is retried",
        reason=reason,
        state=state,
    )


def _args_stored(namespace: str, job: JobRecord, policy: NamespacePolicy, deps: Deps) -> bool:
    """Whether the job's arguments are still there to run it again."""
    age_s = deps.clock() - job_id_time_s(job.job_id)
    if job.tier is Tier.S3:
        # The args object lives for its class from the job's creation (the lifecycle rule of
        # its tag: a day for `1d`, seven for `7d`), within the window the namespace's class
        # serves it now (presign-get). Every class keeps an object a day; past that its own
        # tag decides (uploaded before a policy change, it may be of another class).
        if age_s >= policy.read_window_s(deps.settings.retention_s):
            return False
        return age_s < DAY_S * SHORTEST_DAYS or age_s < _args_object_life_s(job, deps)
    if deps.jobs.args_kept(namespace, job.job_id):
        return True
    if _previous_entry(namespace, job, deps) is not None:
        # Its end is not settled yet: the bytes are still in its entry (the retry relies on it).
        return True
    # Cancelled while queued with no entry id of its own (before any delivery, or after a
    # retry): its entry is still in the stream (it is dropped, and its args kept, when a poll
    # finds the job cancelled).
    return (
        job.state is JobStatus.CANCELLED
        and job.stream_id in (None, "*")
        and age_s < deps.settings.retention_s
    )


def _args_object_life_s(job: JobRecord, deps: Deps) -> float:
    """How long after its upload the job's args object lives: its retention tag's class (0:
    the object is gone)."""
    key = key_for(job.job_id, PayloadKind.ARGS)
    if deps.objects.head(key) is None:
        return 0
    return lifecycle_days(deps.objects.tags(key)) * DAY_S


def _previous_entry(namespace: str, job: JobRecord, deps: Deps):
    """The job's own entry, if it is still in the stream (an end not settled yet), or None."""
    if job.stream_id in (None, "", "*") or not job.queue:
        return None
    return deps.jobs.read_entry(namespace, job.queue, job.stream_id)


def _check_blobs(namespace: str, job: JobRecord, policy: NamespacePolicy, deps: Deps) -> None:
    """409 blob_expired when a blob the job references is gone from the namespace (its record
    expired: the daemon would end the job payload_lost); the others are needed for the retried
    job's life, recorded for the renewer as an enqueue records them."""
    blob_list = deps.jobs.kept_blob_list(namespace, job.job_id)
    if not blob_list:
        entry = _previous_entry(namespace, job, deps)
        blob_list = entry.blobs if entry is not None else b""
    missing = referenced(namespace, unpacked(blob_list), deps, policy=policy, any_encryption=True)
    if missing:
        names = sorted(missing)
        raise NotRetryable(
            f"job {job.job_id} can no longer be retried: its blob {', '.join(names)} expired "
            "from the namespace (enqueue it again with the blob uploaded again)",
            reason="blob_expired",
            state=job.state.value,
            blobs=names,
        )


def retry_job(p: Principal, job_id: str, deps: Deps) -> RetryResponse:
    job = find_job(p.namespace, job_id, deps)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    bind_job(job_id)
    return _retry(p.namespace, job, RETRYABLE_STATES, deps, p.policy)


def _retry(
    namespace: str,
    job: JobRecord,
    states: frozenset[JobStatus],
    deps: Deps,
    policy: NamespacePolicy,
) -> RetryResponse:
    """Retry one job; its arguments and blobs are judged by the namespace's class (`policy`)."""
    job_id = job.job_id
    if job.state not in states and not (job.state is JobStatus.QUEUED and job.stored):
        raise _refusal(job_id, job.state)
    if job.state in states and not _args_stored(namespace, job, policy, deps):
        raise NotRetryable(
            f"job {job_id} can no longer be retried: its arguments are past the retention",
            reason="arguments_expired",
            state=job.state.value,
        )
    if job.state in states:
        _check_blobs(namespace, job, policy, deps)
    now_ms = int(deps.clock() * 1000)
    started = deps.jobs.retry(job_id, namespace, now_ms, tuple(s.value for s in states))
    if isinstance(started, Missing):
        raise NotFound(f"job {job_id} not found")
    if isinstance(started, RetryRefused):
        raise _refusal(job_id, started.state)
    min_id = max(now_ms - deps.settings.retention_s * 1000, 0)
    appended = deps.jobs.requeue(
        namespace,
        started.queue,
        job_id,
        started.tier,
        min_id_ms=min_id,
        retries=started.retries,
        previous_entry=started.previous_entry,
    )
    # The entry the retry runs on becomes the job's: until then (`x` = '*') a poll could take
    # another of its entries, and never the one before the retry, which the settle step of its
    # end may still drop (docs/design.md "Under races").
    if appended or started.previous_entry:
        deps.jobs.record_requeue(
            job_id, appended or started.previous_entry, retries=started.retries
        )
    if not started.resumed:
        metrics_count("JobsRetried", previous=job.state.value)
    logger.info(
        "job retried",
        extra={"queue": started.queue, "retries": started.retries, "was": job.state.value},
    )
    return RetryResponse(
        job_id=job_id,
        state=JobStatus.QUEUED,
        attempt=started.attempts + 1,
        retries=started.retries,
    )


def redrive(p: Principal, queue: str, body: RedriveRequest, deps: Deps) -> RedriveResponse:
    """Retry up to body.limit jobs of the queue that ended in body.states, newest first."""
    validate_queue_name(queue)
    states = frozenset(JobStatus(s) for s in body.states)
    deadline = deps.clock() + REDRIVE_BUDGET_S
    retried = skipped = waiting = 0
    for group in dict.fromkeys(GROUP_OF_STATE[s] for s in states):
        cursor = ""
        while retried < body.limit and deps.clock() < deadline:
            entries, cursor = deps.jobs.ended_entries(p.namespace, queue, group, cursor, 100)
            records = deps.jobs.read_jobs([e.job_id for e in entries], errors=False)
            for entry in entries:
                job = records.get(entry.job_id)
                if (
                    job is None
                    or job.namespace != p.namespace
                    or (job.state not in states or job.retries != entry.retries)
                    and not _retry_half_done(job, entry.retries)
                ):
                    continue
                if retried >= body.limit or deps.clock() >= deadline:
                    break
                try:
                    _retry(p.namespace, job, states, deps, p.policy)
                    retried += 1
                except NotRetryable:
                    skipped += 1
                except RedisMemoryFull:
                    # Redis full: the need of the job's blobs was refused before its retry
                    # changed anything. The others go on (they need no byte more); the job
                    # stays in its state for the redrive sent again.
                    waiting += 1
            if not cursor:
                break
    logger.info(
        "queue redriven",
        extra={"queue": queue, "retried": retried, "skipped": skipped, "waiting": waiting},
    )
    if waiting:
        raise RedisMemoryFull(
            f"redis is out of memory: {retried} jobs retried, {waiting} that reference blobs "
            "wait for room; send the redrive again shortly",
            retry_after_s=REDRIVE_RETRY_AFTER_S,
        )
    return RedriveResponse(retried=retried, skipped=skipped)


def _retry_half_done(job: JobRecord, ended_retries: int) -> bool:
    """A retry of this ended entry's job ran its job step (the job `queued` for one retry more,
    `x` = '*', `rq` set) and not its queue step (a lost connection, or Redis full): a redrive
    sent again, or any later one, finishes it (`_retry` resumes it), or the job would read
    `queued` with no entry to deliver it, and no redrive would take it again. A job requeued by
    a payload_lost report since (`x` = '*' too, no `rq`: its old entry runs it) is not one: its
    retry would be refused `queued`, and the redrive would count it skipped."""
    return (
        job.state is JobStatus.QUEUED
        and job.retry_queued
        and job.retries == ended_retries + 1
        and job.stream_id == "*"
    )


# -- purge ---------------------------------------------------------------------------------


def purge(p: Principal, queue: str, deps: Deps) -> PurgeResponse:
    """Cancel every queued job of the queue (as DELETE .../jobs/{job_id} would: each ends
    `cancelled`, its args kept for a retry), for at most PURGE_BUDGET_S.

    Each scanned entry is decided in one step on its job's slot against the job's current
    state (operate_purge.lua): a daemon may take the entry at any moment after the scan, and a
    job that started is left alone (no cancel requested). The entry is then dropped only if no
    daemon took it since (completion_settle.lua in purge's mode): a taken entry is its
    delivery's, which finds the job cancelled, or runs it."""
    validate_queue_name(queue)
    deadline = deps.clock() + PURGE_BUDGET_S
    cancelled = 0
    cursor = ""
    while deps.clock() < deadline:
        entries, cursor = deps.jobs.scan_queue(p.namespace, queue, "queued", cursor, 100)
        for entry in entries:
            if deps.clock() >= deadline:
                break
            cancelled += _purge_entry(p, queue, entry, deps)
        if not cursor:
            break
    [counts] = deps.queues.counts(p.namespace, [queue])
    if cancelled:
        metrics_count("JobsCancelled", was="queued")
    logger.info("queue purged", extra={"queue": queue, "cancelled": cancelled})
    return PurgeResponse(cancelled=cancelled, remaining=counts.queued)


def _purge_entry(p: Principal, queue: str, entry: ScannedEntry, deps: Deps) -> int:
    namespace = p.namespace
    if not entry.job_id:
        deps.jobs.drop_entry(namespace, queue, entry.stream_id)
        return 0
    now_ms = int(deps.clock() * 1000)
    outcome = deps.jobs.purge_job(
        entry.job_id,
        namespace,
        queue,
        entry.stream_id,
        inline=entry.inline_size is not None,
        now_ms=now_ms,
        error_json=cancelled_error(),
        created_ms=round(job_id_time_s(entry.job_id) * 1000),
    )
    match outcome:
        case Started():
            return 0
        case CancelledQueued(retries=retries):
            state: JobStatus | None = JobStatus.CANCELLED
        case Ended(state=ended, retries=retries):
            # Its own entry, of a job that ended (its end's settle, or a poll, drops it too).
            state = None
            if JobStatus(ended) not in RETRYABLE_STATES:
                deps.jobs.drop_entry(namespace, queue, entry.stream_id)
                return 0
        case _:
            # Not the job's entry (a stale double), or no job: it is never delivered as one.
            deps.jobs.drop_entry(namespace, queue, entry.stream_id)
            return 0
    deps.jobs.settle(
        namespace,
        queue,
        entry.job_id,
        entry.stream_id,
        state=state,
        retries=retries,
        now_ms=now_ms,
        keep_args=True,
        undelivered_only=True,
    )
    if state is not None:
        keep_for_class(p, entry.job_id, deps)
    return 1 if state is not None else 0
