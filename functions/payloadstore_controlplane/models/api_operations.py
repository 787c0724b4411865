"""API models of operating the queues: queue stats and throughput, a job's payloads as an
operator reads them, and listing, retrying, redriving and purging jobs."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Literal

from pydantic import Field

from .api_common import StrictModel
from .api_jobs import DownloadUrl, JobStatusResponse
from .domain import JobStatus, OmitsNull, PayloadRef, WireModel

# -- queues --------------------------------------------------------------------------------


class QueueStats(WireModel):
    name: str
    queued: int = Field(description="jobs waiting for a daemon (never delivered yet)")
    in_flight: int = Field(description="jobs delivered to a daemon and not finished yet")
    oldest_queued_age_s: float | None = Field(
        None, description="age of the oldest job waiting for a daemon; null when none waits"
    )
    failed: int = Field(
        0,
        description=(
            "jobs that ended failed (failed, payload_lost, payload_corrupt) within the "
            "retention and were not retried since"
        ),
    )


class QueueListResponse(OmitsNull):
    queues: list[QueueStats] = Field(
        description="in name order, at most QUEUE_LIST_PAGE (10,000) queues per answer"
    )
    next_after: str | None = Field(
        None,
        description="more queues follow: pass as `after` for the next page (absent: the last)",
    )


class ThroughputResponse(WireModel):
    """Jobs that ended per minute over the last hour (the current minute last)."""

    queue: str | None = Field(None, description="the queue asked for; null: every queue summed")
    start: int = Field(description="the first minute's start, epoch seconds")
    bucket_s: int = Field(60, description="seconds per bucket")
    succeeded: list[int] = Field(description="jobs that succeeded, one count per minute")
    failed: list[int] = Field(
        description="jobs that ended failed, payload_lost or payload_corrupt, per minute"
    )


class PayloadView(OmitsNull):
    """A job's arguments or result as an operator reads them: the inline bytes (base64), or the
    S3 reference with a presigned GET, or why neither is there (`gone`)."""

    tier: Literal["inline", "s3"] | None = None
    inline: str | None = Field(
        None, description="the inline bytes, base64 (at most INLINE_THRESHOLD)"
    )
    size: int | None = None
    contentType: str | None = None
    ref: PayloadRef | None = None
    download: DownloadUrl | None = None
    gone: str | None = Field(
        None,
        description=(
            "why nothing is there: not_kept (a succeeded inline job's arguments are freed at "
            "its end), not_uploaded, expired, consumed (retention consume deleted the object: "
            "the reference is shown, no download), answer_limit (inline arguments left out: "
            "beside the inline result they would take the answer past Lambda's 6 MB)"
        ),
    )


class JobPayloadsResponse(OmitsNull):
    """`GET .../jobs/{job_id}/payloads`: what the job carried, for operators (the dashboard,
    `payloadstore status --show-args`). Reading it is not the result's read under retention
    `consume` (no deletion is scheduled)."""

    job_id: str
    queue: str
    state: JobStatus
    args: PayloadView
    result: PayloadView | None = Field(None, description="null until the job ended with a result")


# -- operating the queues: list, retry, redrive, purge ---------------------------------------

# The states a queue's jobs are listed by; `failed` is every terminal state but succeeded and
# cancelled (failed, DeliveryLimitExceeded, payload_lost, payload_corrupt).
ListState = Literal["queued", "running", "failed", "cancelled", "succeeded"]
# The states a redrive retries.
RedriveState = Literal["failed", "payload_lost", "payload_corrupt", "cancelled"]
LIST_MAX_JOBS = 100
REDRIVE_MAX_JOBS = 1000


class JobListResponse(WireModel):
    """GET .../queues/{queue}/jobs: a page of a queue's jobs in one state, newest first."""

    jobs: list[JobStatusResponse] = Field(
        description="each as the job status answer, its error without the traceback (the job's "
        "own status has it); a page may hold fewer than `limit` jobs while next_cursor is set"
    )
    next_cursor: str | None = Field(
        description="pass as `cursor` for the next page; null when there is no more"
    )


class RetryResponse(WireModel):
    """POST .../jobs/{job_id}/retry: the job is queued again, with the same id."""

    job_id: str
    state: JobStatus
    attempt: int = Field(description="the attempt number its next delivery will carry")
    retries: int = Field(description="times the job has been retried, this one included")


def _failed_states() -> list[RedriveState]:
    return ["failed", "payload_lost", "payload_corrupt"]


class RedriveRequest(StrictModel):
    states: list[RedriveState] = Field(
        default_factory=_failed_states,
        min_length=1,
        description="retry the jobs that ended in these states (default: every failed state)",
    )
    limit: int = Field(
        100, ge=1, le=REDRIVE_MAX_JOBS, description="retry at most this many jobs, newest first"
    )


class RedriveResponse(WireModel):
    retried: int = Field(description="jobs queued again")
    skipped: int = Field(
        description="jobs found in those states whose arguments are no longer stored"
    )


class PurgeResponse(WireModel):
    cancelled: int = Field(description="queued jobs cancelled by this call")
    remaining: int = Field(
        description="jobs still queued when the call stopped (it works for at most "
        "PURGE_BUDGET_S seconds): call again while this is above 0"
    )
