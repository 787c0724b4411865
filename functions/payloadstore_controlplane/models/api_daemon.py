"""API models of the daemon side: poll, result post, failure report, heartbeat, the leases
long-poll, and the result as a client reads it."""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

from typing import Literal

from pydantic import Field

from .api_common import (
    Base64Bytes,
    BlobList,
    Crc64Nvme,
    Lease,
    Name,
    Sha256Hex,
    StrictModel,
    b64_bytes,
)
from .api_jobs import BlobDownload, DownloadUrl, JobError
from .domain import JOB_ID_RE, JobStatus, OmitsNull, PayloadRef, WireModel

# -- daemon side ---------------------------------------------------------------------------


class PollRequest(StrictModel):
    namespace: str
    queues: list[Name] = Field(min_length=1, max_length=16)
    wait_s: float = Field(10.0, ge=0, le=60, description="capped by POLL_MAX_WAIT_S")
    daemon_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    max_jobs: int | None = Field(
        None,
        ge=1,
        le=16,
        description='given: answer 200 {"jobs": [...]} with up to this many deliveries; '
        "absent: one delivery, as before",
    )


class PollResponse(OmitsNull):
    job_id: str
    namespace: str
    queue: str
    attempt: int
    lease: str = Field(description="opaque; send it with the result, failure and heartbeats")
    lease_expires_at: float = Field(
        description="epoch seconds: redelivered after this unless a heartbeat extends it"
    )
    lease_expires_in_s: float = Field(
        description="the lease's remaining seconds as the control plane answers "
        "(VISIBILITY_TIMEOUT_S): schedule heartbeats from when this answer arrived, on a "
        "monotonic clock, not from lease_expires_at against the daemon's own clock"
    )
    payloadRef: PayloadRef | None = None
    payloadInline: str | None = None
    download: DownloadUrl | None = Field(
        None, description="presigned GET of payloadRef (S3 tier only)"
    )
    blobs: list[BlobDownload] | None = Field(
        None, description="a presigned GET of each blob the job references (none: absent)"
    )


class PollManyResponse(WireModel):
    """A poll with `max_jobs`: one to max_jobs deliveries, each with its own lease."""

    jobs: list[PollResponse]


class ResultErrorIn(StrictModel):
    type: str = Field(max_length=256)
    message: str = Field("", max_length=16_384)
    traceback: str | None = Field(None, max_length=65_536)


class NextPoll(StrictModel):
    """`next` on a result post or failure report: after the post's own outcome is stored, take
    the daemon's next deliveries exactly as `POST /v1/daemon/poll` with max_jobs would."""

    queues: list[Name] = Field(min_length=1, max_length=16)
    max_jobs: int = Field(1, ge=1, le=16, description="at most this many deliveries")
    wait_s: float = Field(
        0.0,
        ge=0,
        le=60,
        description="block up to this long while none is found (capped by POLL_MAX_WAIT_S and "
        "the invocation's remaining time); 0 answers at once",
    )
    daemon_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
        description="the consumer name, as in a poll (absent: one named after the token)",
    )


class ResultPost(StrictModel):
    lease: Lease
    resultRef: PayloadRef | None = None
    resultInline: Base64Bytes | None = None
    error: ResultErrorIn | None = None
    blobs: BlobList = Field(default_factory=list)
    next: NextPoll | None = Field(
        None,
        description='given: answer 200 {"jobs": [...]} (the next deliveries, maybe none) '
        "instead of 204, once the result is stored",
    )

    def inline_bytes(self) -> bytes | None:
        return None if self.resultInline is None else b64_bytes(self.resultInline)


class FailureReport(StrictModel):
    lease: Lease
    state: Literal["payload_lost", "payload_corrupt"]
    detail: str = Field("", max_length=4096)
    expected_sha256: Sha256Hex | None = None
    actual_sha256: Sha256Hex | None = None
    expected_crc64nvme: Crc64Nvme | None = None
    actual_crc64nvme: Crc64Nvme | None = None
    next: NextPoll | None = Field(
        None,
        description='given: answer 200 {"jobs": [...]} (the next deliveries, maybe none) '
        "instead of 204, once the report is recorded",
    )


class HeartbeatRequest(StrictModel):
    lease: Lease


class HeartbeatResponse(WireModel):
    lease_expires_at: float = Field(description="epoch seconds; heartbeat again well before it")
    lease_expires_in_s: float = Field(
        description="the lease's remaining seconds as the control plane answers "
        "(VISIBILITY_TIMEOUT_S): heartbeat again well before that many seconds from now"
    )
    cancel_requested: bool = Field(
        description="a client asked to cancel: stop, and post the error type Cancelled"
    )


# The most leases one leases long-poll renews (a daemon holding more sends several, one waiting).
MAX_LEASES = 256


class HeldLease(StrictModel):
    job_id: str = Field(pattern=JOB_ID_RE.pattern)
    lease: Lease


class LeasesRequest(StrictModel):
    """POST /v1/daemon/leases: one long-poll per busy daemon in place of a heartbeat per job."""

    namespace: str
    daemon_id: str = Field(
        pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
        description="the daemon_id its polls gave (the jobs' consumer): its cancels wake this",
    )
    leases: list[HeldLease] = Field(min_length=1, max_length=MAX_LEASES)
    wait_s: float = Field(
        20.0,
        ge=0,
        le=60,
        description="how long to wait for a cancel of one of the daemon's jobs after renewing "
        "them (capped by POLL_MAX_WAIT_S and the invocation's time left)",
    )


class LeasesResponse(WireModel):
    lease_expires_at: float = Field(
        description="epoch seconds of the renewed leases' expiry; renew well before it"
    )
    lease_expires_in_s: float = Field(
        description="the renewed leases' remaining seconds (VISIBILITY_TIMEOUT_S) when renewed"
    )
    cancel_requested: list[str] = Field(
        description="jobs of the request a client asked to cancel: stop, post the error type "
        "Cancelled"
    )
    lost: list[str] = Field(
        description="jobs of the request whose lease is not current (delivered again, ended or "
        "gone): stop, post nothing"
    )
    woken: bool = Field(
        description="answered before wait_s because a cancel of one of the daemon's jobs was "
        "requested (maybe of a job not in this request: renew again with all of them)"
    )


class ResultResponse(OmitsNull):
    job_id: str
    state: JobStatus
    resultRef: PayloadRef | None = None
    resultInline: str | None = None
    error: JobError | None = None
    download: DownloadUrl | None = Field(
        None, description="presigned GET of resultRef (an S3 result only)"
    )
    blobs: list[BlobDownload] | None = Field(
        None, description="a presigned GET of each blob the result references (none: absent)"
    )
