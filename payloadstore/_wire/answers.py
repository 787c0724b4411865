"""The v1 wire's answers: one frozen dataclass per answer of the control plane (and the
references and batch items the SDK sends), with their `from_wire`/`to_wire` where the shape
is the class's own. Nothing here does I/O."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("payloadstore")

MSGPACK = "application/msgpack"
TERMINAL_STATES = frozenset({"succeeded", "failed", "payload_lost", "payload_corrupt", "cancelled"})
# The most jobs one poll (or a result post's `next`) may take.
MAX_POLL_JOBS = 16

# -- answers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamespacePolicy:
    """The caller's namespace policy (`/v1/config` `policy`): retention `consume`|`1d`|`2d`|
    `7d`|`30d`, kms_key `none`|`stack`|an ARN, inline `allowed`|`never`."""

    retention: str = "2d"
    kms_key: str = "none"
    inline: str = "allowed"


@dataclass(frozen=True)
class ServerConfig:
    inline_threshold: int
    max_payload_bytes: int
    presign_ttl_s: int
    result_ttl_s: int | None = None
    max_presigns_per_job: int | None = None
    # Many jobs per call (jobs:batch, jobs:status); older servers do not say: the defaults.
    batch_max_jobs: int = 100
    batch_max_bytes: int = 4 * 1024 * 1024
    # Uploads above this size are multipart; None: a server before multipart (single PUTs).
    multipart_threshold: int | None = None
    # The server takes CRC64NVME uploads (FULL_OBJECT multipart, part URLs with the presign);
    # False: a server before them, which gets sha256 as it always did.
    crc64nvme: bool = False
    # The namespace's policy; a server before policies: the defaults.
    policy: NamespacePolicy = NamespacePolicy()

    @property
    def inline_limit(self) -> int:
        """The largest encoded payload or result sent inline: INLINE_THRESHOLD, or -1 (none at
        all) for a namespace whose policy is inline `never` (every byte goes to S3)."""
        return -1 if self.policy.inline == "never" else self.inline_threshold


@dataclass(frozen=True)
class PayloadRef:
    """A payload (args or result) stored in S3, as `payloadRef`/`resultRef` on the wire."""

    bucket: str
    key: str
    size: int | None = None
    content_type: str | None = None
    sha256: str | None = None
    kind: str = "s3"
    #: a multipart object: {part_bytes, part_count} (and composite_sha256, hex, for a SHA256
    #: upload)
    multipart: dict | None = None
    #: CRC64NVME of the whole object (S3's base64): the checksum readers verify
    crc64nvme: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "bucket": self.bucket, "key": self.key}
        if self.size is not None:
            out["size"] = self.size
        if self.content_type is not None:
            out["contentType"] = self.content_type
        if self.crc64nvme is not None:
            out["crc64nvme"] = self.crc64nvme
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        if self.multipart is not None:
            out["multipart"] = dict(self.multipart)
        return out

    def to_request(self) -> dict[str, Any]:
        """The reference as an enqueue or a result post sends it: only what the control plane
        checks against what it issued (bucket, key, size). It already knows the content type
        and the sha256 (signed at presign, checked against the object's own checksum), and
        `kind` defaults to s3."""
        out: dict[str, Any] = {"bucket": self.bucket, "key": self.key}
        if self.kind != "s3":
            out["kind"] = self.kind
        if self.size is not None:
            out["size"] = self.size
        if self.multipart is not None and self.crc64nvme:
            # A CRC64NVME upload is completed with the whole object's CRC (S3 checks it).
            out["crc64nvme"] = self.crc64nvme
        elif self.multipart is not None:
            # The control plane checks the composite the uploader computed against the object's.
            out["multipart"] = dict(self.multipart)
        return out

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> PayloadRef:
        size = body.get("size")
        return cls(
            bucket=str(body.get("bucket") or ""),
            key=str(body["key"]),
            size=None if size is None else int(size),
            content_type=body.get("contentType"),
            sha256=body.get("sha256"),
            kind=str(body.get("kind") or "s3"),
            multipart=dict(body["multipart"]) if body.get("multipart") else None,
            crc64nvme=body.get("crc64nvme"),
        )


@dataclass(frozen=True)
class UploadGrant:
    """A presigned PUT. `raw` is the grant as the server sent it (what `_transfer` speaks)."""

    url: str
    method: str
    headers: dict[str, str]
    bucket: str
    key: str
    job_id: str | None
    expires_at: str | None
    raw: dict = field(default_factory=dict, repr=False)
    #: above MULTIPART_THRESHOLD: {upload_id, part_bytes, part_count} (and no url)
    multipart: dict | None = None


@dataclass(frozen=True)
class DownloadGrant:
    url: str
    method: str
    expires_at: str | None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    tier: str
    created: bool  # 201: this call created the job; 200: an earlier call with the same key did
    #: an enqueue with `wait`: the job's result answer when it ended within the wait, else None
    result: ResultAnswer | None = None
    #: an enqueue with `wait`: False when the job is queued but the control plane's wait for it
    #: failed (`waited: false`); its result is then waited for as usual (`Job.result`)
    waited: bool = True


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    queue: str | None = None
    attempts: int | None = None
    tier: str | None = None
    payload_ref: dict | None = None
    result_ref: dict | None = None
    error: dict | None = None
    raw: dict = field(default_factory=dict, repr=False)
    cancel_requested: bool = False
    #: epoch seconds: enqueued, and last changed
    created_at: float | None = None
    updated_at: float | None = None
    #: times retried (Job.retry, Queue.redrive)
    retries: int = 0
    args_size: int | None = None
    result_size: int | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_wire(cls, body: Mapping[str, Any], job_id: str | None = None) -> JobInfo:
        return cls(
            job_id=str(body.get("job_id") or job_id),
            state=body.get("state", "unknown"),
            queue=body.get("queue"),
            attempts=body.get("attempts"),
            tier=body.get("tier"),
            payload_ref=body.get("payloadRef"),
            result_ref=body.get("resultRef"),
            error=body.get("error"),
            raw=dict(body),
            cancel_requested=bool(body.get("cancel_requested")),
            created_at=body.get("created_at"),
            updated_at=body.get("updated_at"),
            retries=int(body.get("retries") or 0),
            args_size=body.get("args_size"),
            result_size=body.get("result_size"),
        )


@dataclass(frozen=True)
class JobPage:
    """One page of `GET .../queues/{queue}/jobs`: jobs newest first, and the next page's cursor
    (None at the end). Iterating a page iterates its jobs."""

    jobs: list[JobInfo]
    next_cursor: str | None

    def __iter__(self) -> Iterator[JobInfo]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


@dataclass(frozen=True)
class RetryAnswer:
    """`POST .../jobs/{job_id}/retry`: queued again, same id; `attempt` is the number its next
    delivery carries, `retries` how often it was retried, this time included."""

    job_id: str
    state: str
    attempt: int
    retries: int


@dataclass(frozen=True)
class RedriveAnswer:
    retried: int
    skipped: int


@dataclass(frozen=True)
class PurgeAnswer:
    cancelled: int
    remaining: int


# The name before JobInfo (the control plane's JobStatus is the enum of job states).
JobStatus = JobInfo


@dataclass(frozen=True)
class ResultAnswer:
    """`GET .../result?wait=`: `done` is False for a 202 (still queued or running)."""

    job_id: str
    state: str | None
    done: bool
    result_inline: bytes | None = None
    result_ref: PayloadRef | None = None
    error: dict | None = None
    raw: dict = field(default_factory=dict, repr=False)
    #: a presigned GET of `result_ref`, handed out with it (no presign-get call needed)
    download: DownloadGrant | None = None


@dataclass(frozen=True)
class PolledJob:
    """One delivery from `POST /v1/daemon/poll`: exactly one of the payload forms is set."""

    job_id: str
    namespace: str | None
    queue: str | None
    attempt: int | None
    payload_inline: bytes | None = None
    payload_ref: PayloadRef | None = None
    raw: dict = field(default_factory=dict, repr=False)
    #: a presigned GET of `payload_ref`, handed out with it (no presign-get call needed)
    download: DownloadGrant | None = None
    # The delivery's lease: result posts, failure reports and heartbeats carry it.
    lease: str | None = None
    lease_expires_at: float | None = None  # epoch seconds, on the control plane's clock
    #: the lease's remaining seconds when the control plane answered (servers before it: None)
    lease_expires_in_s: float | None = None
    #: time.monotonic() when this answer was read: heartbeats are scheduled from it
    received_at: float | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class NextJobs:
    """`next` of a result post or failure report: once the post is stored, take up to
    `max_jobs` next deliveries of `queues` (blocking up to `wait_s` while none is found)."""

    queues: tuple[str, ...]
    max_jobs: int = 1
    wait_s: float = 0.0
    daemon_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if not 1 <= self.max_jobs <= MAX_POLL_JOBS:
            raise ValueError(f"max_jobs must be 1..{MAX_POLL_JOBS} (got {self.max_jobs})")
        out: dict[str, Any] = {
            "queues": list(self.queues),
            "max_jobs": self.max_jobs,
            "wait_s": self.wait_s,
        }
        if self.daemon_id:
            out["daemon_id"] = self.daemon_id
        return out


@dataclass(frozen=True)
class HeartbeatAnswer:
    """`POST .../jobs/{job_id}/heartbeat`: the lease's new expiry, and whether to stop."""

    lease_expires_at: float  # epoch seconds, on the control plane's clock
    cancel_requested: bool
    #: the lease's remaining seconds when the control plane answered (servers before it: None)
    lease_expires_in_s: float | None = None
    #: time.monotonic() when this answer was read: the next heartbeat is scheduled from it
    received_at: float | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class LeasesAnswer:
    """`POST /v1/daemon/leases`: the renewed leases' expiry, and which jobs to stop."""

    lease_expires_in_s: float
    cancel_requested: tuple[str, ...] = ()
    #: jobs whose lease is not current (delivered again, ended, gone): stop, post nothing
    lost: tuple[str, ...] = ()
    #: answered early for a cancel of a job the request did not name: renew again with all
    woken: bool = False
    #: time.monotonic() when this answer was read
    received_at: float | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CancelAnswer:
    """`DELETE .../jobs/{job_id}`: `cancelled` (it was queued) or `running` + cancel requested."""

    job_id: str
    state: str
    cancel_requested: bool


@dataclass(frozen=True)
class QueueInfo:
    """A queue's figures from the control plane (GET .../queues[/{queue}])."""

    name: str
    queued: int
    in_flight: int
    oldest_queued_age_s: float | None
    # Jobs that ended failed within the retention and were not retried since (0 from a server
    # before the count).
    failed: int = 0

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> QueueInfo:
        return cls(
            name=body["name"],
            queued=int(body["queued"]),
            in_flight=int(body["in_flight"]),
            oldest_queued_age_s=body.get("oldest_queued_age_s"),
            failed=int(body.get("failed") or 0),
        )


@dataclass(frozen=True)
class Throughput:
    """`GET .../throughput`: jobs that ended per minute over the last hour, oldest minute first
    (the current minute last); `queue` None: every queue of the namespace summed."""

    queue: str | None
    start: int  # the first minute's start, epoch seconds
    bucket_s: int
    succeeded: list[int]
    failed: list[int]

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> Throughput:
        return cls(
            queue=body.get("queue"),
            start=int(body["start"]),
            bucket_s=int(body.get("bucket_s") or 60),
            succeeded=[int(n) for n in body["succeeded"]],
            failed=[int(n) for n in body["failed"]],
        )


@dataclass(frozen=True)
class StoredPayload:
    """A job's arguments or result as stored: `inline` bytes, or an S3 `ref` (the wire's
    reference, a dict) with a presigned GET (`download_url`), or `gone` saying why neither is
    there (`not_kept`: a succeeded inline job's arguments are freed at its end)."""

    tier: str | None
    inline: bytes | None = field(default=None, repr=False)
    size: int | None = None
    content_type: str | None = None
    ref: Mapping[str, Any] | None = None
    download_url: str | None = field(default=None, repr=False)
    download_expires_at: str | None = None
    gone: str | None = None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> StoredPayload:
        download = body.get("download") or {}
        inline = body.get("inline")
        return cls(
            tier=body.get("tier"),
            inline=base64.b64decode(inline) if inline is not None else None,
            size=body.get("size"),
            content_type=body.get("contentType"),
            ref=body.get("ref"),
            download_url=download.get("url"),
            download_expires_at=download.get("expires_at"),
            gone=body.get("gone"),
        )


@dataclass(frozen=True)
class JobPayloads:
    """`GET .../jobs/{job_id}/payloads`: what a job carried, for operators (reading it never
    schedules a retention `consume` deletion)."""

    job_id: str
    queue: str
    state: str
    args: StoredPayload
    result: StoredPayload | None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> JobPayloads:
        result = body.get("result")
        return cls(
            job_id=body["job_id"],
            queue=body.get("queue") or "",
            state=body["state"],
            args=StoredPayload.from_wire(body.get("args") or {}),
            result=StoredPayload.from_wire(result) if result else None,
        )


@dataclass(frozen=True)
class BatchItem:
    """One inline payload or one S3 reference of a batch enqueue (exactly one is set)."""

    inline: bytes | None = None
    ref: PayloadRef | None = None
    idempotency_key: str | None = None
    #: sha256 of each blob the payload references (the control plane checks them)
    blobs: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = (
            {"payloadInline": base64.b64encode(self.inline).decode("ascii")}
            if self.inline is not None
            else {"payloadRef": self.ref.to_request() if self.ref else None}
        )
        if self.idempotency_key:
            out["idempotency_key"] = self.idempotency_key
        if self.blobs:
            out["blobs"] = list(self.blobs)
        return out


@dataclass(frozen=True)
class ItemRefused:
    """A batch item (or a job id of a status call) the control plane refused, and why."""

    code: str | None
    message: str
    job_id: str | None = None


@dataclass(frozen=True)
class Health:
    healthy: bool
    body: dict
