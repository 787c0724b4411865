"""API models of a client's jobs: enqueue (one, or many per call), status and cancel, with the
error and the presigned downloads their answers carry."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Annotated

from pydantic import Field

from .api_common import Base64Bytes, BlobList, ErrorBody, StrictModel, b64_bytes
from .domain import JobStatus, OmitsNull, PayloadRef, Tier, WireModel

# -- enqueue / status ----------------------------------------------------------------------


class EnqueueRequest(StrictModel):
    payloadRef: PayloadRef | None = None
    payloadInline: Base64Bytes | None = None
    blobs: BlobList = Field(default_factory=list)

    def inline_bytes(self) -> bytes | None:
        return None if self.payloadInline is None else b64_bytes(self.payloadInline)


class JobError(OmitsNull):
    type: str
    message: str = ""
    traceback: str | None = None
    expected_sha256: str | None = None
    actual_sha256: str | None = None
    expected_crc64nvme: str | None = None
    actual_crc64nvme: str | None = None


class DownloadUrl(WireModel):
    """A presigned GET handed out beside an S3 reference, so the reader downloads without a
    presign call first (`POST .../payloads/presign?op=get` stays for expired URLs)."""

    url: str
    expires_at: str


class BlobDownload(WireModel):
    """A presigned GET of one blob a job or a result references."""

    sha256: str
    url: str
    expires_at: str


class EnqueueResponse(OmitsNull):
    """The job; with `?wait=S`, when the job ended within S, also its result exactly as
    `GET .../result` answers it (`state` is present only then)."""

    job_id: str
    tier: Tier
    state: JobStatus | None = Field(
        None, description="with ?wait: the job's terminal state (absent: not ended in time)"
    )
    resultRef: PayloadRef | None = None
    resultInline: str | None = None
    error: JobError | None = None
    download: DownloadUrl | None = Field(
        None, description="presigned GET of resultRef (an S3 result only)"
    )
    blobs: list[BlobDownload] | None = Field(
        None, description="a presigned GET of each blob the result references (none: absent)"
    )
    waited: bool | None = Field(
        None,
        description="with ?wait: false when the job is queued but the wait for its result "
        "failed (e.g. Redis unreachable): wait for the result as usual (GET .../result); "
        "absent otherwise",
    )


class JobStatusResponse(OmitsNull):
    job_id: str
    queue: str
    state: JobStatus
    attempts: int
    tier: Tier
    payloadRef: PayloadRef | None = None
    resultRef: PayloadRef | None = None
    error: JobError | None = None
    created_at: float | None = None
    updated_at: float | None = None
    cancel_requested: bool = False
    retries: int | None = Field(
        None, description="times retried (POST .../retry, redrive); absent: never"
    )
    args_size: int | None = Field(
        None, description="the arguments' size in bytes (absent when not known)"
    )
    result_size: int | None = Field(None, description="an S3 result's size in bytes")


class CancelResponse(WireModel):
    """DELETE .../jobs/{job_id}: 200 cancelled (it was queued), 202 running + cancel requested."""

    job_id: str
    state: JobStatus
    cancel_requested: bool = False


# -- many jobs per call --------------------------------------------------------------------


class BatchJobIn(StrictModel):
    """One job of a batch: exactly as a single enqueue's body, plus its own Idempotency-Key."""

    payloadRef: PayloadRef | None = None
    payloadInline: Base64Bytes | None = None
    idempotency_key: str | None = Field(
        None, description="as the Idempotency-Key header of a single enqueue (inline jobs)"
    )
    blobs: BlobList = Field(default_factory=list)

    def inline_bytes(self) -> bytes | None:
        return None if self.payloadInline is None else b64_bytes(self.payloadInline)


class BatchEnqueueRequest(StrictModel):
    jobs: list[BatchJobIn] = Field(
        min_length=1, description="at most BATCH_MAX_JOBS; inline bytes at most BATCH_MAX_BYTES"
    )


class BatchItemError(WireModel):
    error: ErrorBody


class BatchEnqueueResponse(WireModel):
    jobs: list[EnqueueResponse | BatchItemError] = Field(
        description="one answer per job, in request order: the job, or why it was refused"
    )


# A job id is 26 characters; an id longer than this is refused (422) rather than echoed: each
# unknown id comes back twice in its answer, plus once in `unanswered`, and unbounded ids would
# take the answer past Lambda's 6 MB however the statuses are budgeted.
STATUS_JOB_ID_MAX = 64


class JobsStatusRequest(StrictModel):
    job_ids: list[Annotated[str, Field(max_length=STATUS_JOB_ID_MAX)]] = Field(
        min_length=1, description="at most BATCH_MAX_JOBS job ids, each at most 64 characters"
    )
    wait_s: float = Field(
        0.0,
        ge=0,
        le=60,
        description="wait up to this long (capped by RESULT_MAX_WAIT_S) until one of the jobs "
        "is terminal; 0 answers at once",
    )


class JobStatusError(WireModel):
    job_id: str
    error: ErrorBody


class JobsStatusResponse(OmitsNull):
    jobs: list[JobStatusResponse | JobStatusError] = Field(
        description="one answer per job id, in request order, up to the first that would take "
        "the answer past Lambda's 6 MB (large errors): those are listed in `unanswered`"
    )
    unanswered: list[str] | None = Field(
        None,
        description="the job ids, in request order, this answer leaves out to stay under "
        "Lambda's 6 MB: ask again for them (absent: every job is answered)",
    )
