"""What the job store hands to logic: job records, queue entries, and one small type per answer
a script can give. Together with `RedisJobStore`'s methods this is the store's public interface:
logic matches on these types and never reads a raw hash field, a Lua status string or a key.

No Redis import here (the authorizer's cold start never pays for it)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, overload

from ..models.domain import JobStatus, Tier
from . import keys

DEFAULT_CONTENT_TYPE = "application/msgpack"
# How a job ended: inline result bytes, an S3 result, or an error (all three kept by the store).
ResultForm = Literal["inline", "s3", "error"]


# -- records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedKey:
    """What the CP issued for one S3 key of a job (args or result)."""

    size: int
    content_type: str
    sha256: str | None  # hex
    presigns: int
    issued_ms: int | None
    # The delivery (attempt) that presigned a result key; None for args and older issues.
    attempt: int | None = None
    # A multipart upload: its part size, and its composite sha256 (hex) once completed.
    part_bytes: int | None = None
    composite_sha256: str | None = None
    # CRC64NVME (base64): signed into a single PUT, or a multipart upload's whole object once
    # completed (FULL_OBJECT).
    crc64nvme: str | None = None


@dataclass(frozen=True)
class JobRecord:
    """A job as stored, decoded."""

    job_id: str
    namespace: str
    state: JobStatus
    queue: str | None
    tier: Tier
    attempts: int
    stream_id: str | None
    created_ms: int | None
    updated_ms: int | None
    args: IssuedKey | None
    result_issue: IssuedKey | None
    result_kind: str | None  # "i" inline | "s" S3 | "e" error
    # The current (or last) delivery's lease; None before any delivery or for jobs delivered
    # before leases existed.
    lease: str | None = None
    # What the accepted result post is remembered by (`post_digest`), once the job ended.
    accepted_post: bytes | None = field(default=None, repr=False)
    cancel_requested: bool = False
    # False for a queued inline job, which has no hash yet (its index answered for it).
    stored: bool = True
    # The done list's element when it was read with the hash (`get_job(..., with_done=True)`).
    done: bytes | None = field(default=None, repr=False)
    done_read: bool = field(default=False, repr=False)
    # Times retried (POST .../retry, redrive).
    retries: int = 0
    # Queued by a retry no delivery has started yet (`rq`, operate_retry.lua): its job step
    # ran; a retry sent again is answered 'resume'. False for a payload_lost requeue.
    retry_queued: bool = False
    # The args' size in bytes (both tiers; unknown for an inline job cancelled before its
    # first delivery).
    args_size: int | None = None
    # The blobs the accepted result references (hash fields rb0, rb1, ...), hex.
    result_blobs: tuple[str, ...] = ()
    # Retention `consume`: when the arguments (`pd`) and the result (`rd`) object are deleted,
    # ms since epoch (None: not scheduled).
    args_deleted_ms: int | None = None
    result_deleted_ms: int | None = None
    # While awaiting_upload: S3-tier enqueues of the job refused so far (`xr`).
    enqueue_refusals: int = 0


@dataclass(frozen=True)
class InlineJob:
    """An inline job to append: its id and the ms its id carries, its bytes, when its inline
    index hash may expire, and for a job enqueued with an Idempotency-Key the key (layout-1
    lookup) and the 16-char tail every candidate id of that key ends with."""

    job_id: str
    job_ms: int
    data: bytes
    index_until_ms: int
    idempotency_key: str | None = None
    candidate_tail: str = ""
    blobs: bytes = b""  # raw sha256s of the blobs it references, concatenated


@dataclass(frozen=True)
class QueueEntry:
    """One queue stream entry as read by a daemon's poll (both layouts' field names)."""

    queue: str
    stream_id: str
    job_id: str
    inline: bytes | None
    blobs: bytes = b""  # raw sha256s of the blobs the job references (field `B`)
    # An S3-tier job's refused enqueues the request that appended it saw (field `r`).
    refusals: int = 0

    @classmethod
    def parse(cls, queue: str, stream_id: str, fields: dict) -> QueueEntry:
        job = fields.get(b"j", fields.get(b"job", b""))
        inline = fields.get(b"b", fields.get(b"inline"))
        refusals = int(fields.get(b"r") or 0)
        return cls(queue, stream_id, text(job) or "", inline, fields.get(b"B") or b"", refusals)


@dataclass(frozen=True)
class QueueCounts:
    """A queue as its stream and group say (store.redis_queues)."""

    name: str
    exists: bool
    queued: int  # entries no daemon has received yet
    in_flight: int  # delivered, not yet acknowledged by a result (the group's pending list)
    oldest_queued_ms: int | None  # creation time of the oldest entry not yet delivered
    failed: int = 0  # jobs that ended failed within the retention, not retried since


@dataclass(frozen=True)
class Throughput:
    """Jobs of a queue (or summed over queues) that ended per minute, oldest minute first."""

    start_s: int  # the first minute's start (epoch seconds)
    succeeded: list[int]
    failed: list[int]


# -- answers: one type per thing a script can say --------------------------------------------
# Shared by several scripts.


@dataclass(frozen=True)
class Missing:
    """No such job (in this namespace)."""


@dataclass(frozen=True)
class LeaseMismatch:
    """The lease is not the current delivery's; nothing changed."""

    state: str


@dataclass(frozen=True)
class NotRunning:
    """The job is not running (queued, awaiting its upload, …); nothing changed."""

    state: str


@dataclass(frozen=True)
class Ended:
    """The job is in a terminal state already; nothing changed."""

    state: str
    retries: int = 0


@dataclass(frozen=True)
class SamePost:
    """A repeat of the post the job ended with (an SDK retry or a re-sent script): nothing
    changed; its queue entry, if named, is still to be dropped (and the job indexed, if the
    first post's namespace step never ran)."""

    entry_id: str
    queue: str
    state: str = ""
    retries: int = 0


# Presign.


@dataclass(frozen=True)
class ResultIssued:
    """This delivery's result key is recorded (new, or replacing an earlier delivery's)."""

    attempt: int


@dataclass(frozen=True)
class ResultIssuedBefore:
    """This delivery presigned its result before: a re-presign."""


# Enqueue.


@dataclass(frozen=True)
class RefQueued:
    """An S3-tier job went awaiting_upload -> queued on the entry its enqueue appended."""


@dataclass(frozen=True)
class RefResume:
    """Queued by an older control plane's request that never recorded its entry: the entry this
    enqueue appended is the job's now."""


@dataclass(frozen=True)
class RefRefusedMeanwhile:
    """An enqueue of the job was refused after this request read the job, before its job step:
    the entry it appended is dropped (a poll may drop it already) and the job left as it was."""


@dataclass(frozen=True)
class RefEnqueued:
    """Queued and its entry recorded by an earlier request: a repeat (the entry this one
    appended is not the job's)."""


@dataclass(frozen=True)
class OtherQueue:
    queue: str


@dataclass(frozen=True)
class InlineCreated:
    job_id: str


@dataclass(frozen=True)
class InlineExists:
    """A job of the Idempotency-Key exists already."""

    job_id: str
    queue: str


@dataclass(frozen=True)
class LegacyIdempotency:
    """A layout-1 idempotency record names the key's job."""

    job_id: str


# Delivery.


@dataclass(frozen=True)
class Delivered:
    attempt: int
    tier: Tier
    args: IssuedKey | None


@dataclass(frozen=True)
class StaleEntry:
    """The entry is not the job's current one: drop it."""


@dataclass(frozen=True)
class Started:
    """The job is running (a daemon took it) or its args are being uploaded: left alone."""


@dataclass(frozen=True)
class Leased:
    """Another delivery's lease is alive (heartbeats): not ours, not stale."""


@dataclass(frozen=True)
class CancelledAtDelivery:
    """A cancel was requested: the job ended cancelled instead of running again."""

    retries: int = 0


@dataclass(frozen=True)
class DeliveryLimit:
    """Delivered max_deliveries times already: the job ended failed."""

    deliveries: int
    retries: int = 0


@dataclass(frozen=True)
class EntryExpired:
    """The entry is older than the retention, or names no job."""


# Multipart parts.


@dataclass(frozen=True)
class PartsIssued:
    """The parts' checksums are recorded; the upload to sign them for."""

    upload_id: str


@dataclass(frozen=True)
class NotMultipart:
    """The key was issued for a single PUT (or its multipart upload is gone)."""


@dataclass(frozen=True)
class PartDiffers:
    """A part was issued before with another sha256."""

    number: int


@dataclass(frozen=True)
class PresignCapReached:
    """MAX_PRESIGNS_PER_JOB presigns of this key already."""


@dataclass(frozen=True)
class MultipartUpload:
    """What the CP issued for a multipart upload in progress: the upload and each issued
    part's sha256 (32 raw bytes; empty for a CRC64NVME upload's part) by part number."""

    upload_id: str
    parts: dict[int, bytes]
    # CRC64NVME (FULL_OBJECT: S3 checks the whole object at completion) or SHA256 (COMPOSITE).
    algorithm: str = "SHA256"


@dataclass(frozen=True)
class BlobUploadRecord:
    """A blob's multipart upload in progress (keys.blob_upload): what the CP issued for it."""

    upload_id: str
    size: int
    part_bytes: int
    parts: dict[int, bytes]  # part number -> the sha256 (32 raw bytes) signed into its URL
    algorithm: str = "SHA256"  # CRC64NVME: FULL_OBJECT, S3 checks the whole blob at completion


# Completion.


@dataclass(frozen=True)
class Completed:
    entry_id: str
    queue: str
    state: JobStatus
    retries: int = 0
    # The consumer whose pending list held the entry (`d`): the settle step's owner check.
    consumer: str = ""


@dataclass(frozen=True)
class OtherResult:
    """The job ended with another post: it accepts no other result."""

    state: str


@dataclass(frozen=True)
class Requeued:
    """payload_lost: queued again; append a new entry, drop `entry_id`."""

    entry_id: str
    queue: str


@dataclass(frozen=True)
class LostForGood:
    """payload_lost: the job ended payload_lost; drop its entry."""

    entry_id: str
    queue: str
    retries: int = 0
    consumer: str = ""


# Life cycle.


@dataclass(frozen=True)
class HeartbeatTaken:
    cancel_requested: bool
    entry_id: str
    queue: str
    consumer: str


@dataclass(frozen=True)
class CancelledQueued:
    """A queued job ended cancelled: drop its entry (if named)."""

    entry_id: str
    queue: str
    retries: int = 0


# Operating the queues (listing, retry).


@dataclass(frozen=True)
class RetryStarted:
    """A failed or cancelled job is queued again (or was already, by a retry not yet
    delivered: `resumed`): append its entry."""

    attempts: int
    retries: int
    tier: Tier
    queue: str
    resumed: bool = False
    # The job's entry before the retry ('' none known): it may still be in the stream.
    previous_entry: str = ""


@dataclass(frozen=True)
class RetryRefused:
    """The job is in a state a retry does not leave."""

    state: str


@dataclass(frozen=True)
class ScannedEntry:
    """A queue entry listed by operate_scan.lua: its id, job, and inline size (None: S3)."""

    stream_id: str
    job_id: str
    inline_size: int | None


@dataclass(frozen=True)
class EndedEntry:
    """An entry of a queue's ended-jobs index: the job and its retries when it ended."""

    stream_id: str
    job_id: str
    retries: int


@dataclass(frozen=True)
class CancelRequested:
    """The job is running: its holder (`consumer`, the daemon's id) is woken to stop it."""

    consumer: str = ""


# -- encoding helpers shared by the store's modules ---------------------------------------

# The ended-jobs index groups the terminal states as a listing asks for them.
STATE_GROUPS: dict[str, tuple[JobStatus, ...]] = {
    "succeeded": (JobStatus.SUCCEEDED,),
    "failed": (JobStatus.FAILED, JobStatus.PAYLOAD_LOST, JobStatus.PAYLOAD_CORRUPT),
    "cancelled": (JobStatus.CANCELLED,),
}
GROUP_OF_STATE = {state: group for group, states in STATE_GROUPS.items() for state in states}

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_VALUE = {c: i for i, c in enumerate(_CROCKFORD)}


def job_id_bytes(job_id: str) -> bytes:
    """A job id (26 Crockford base32 characters, 128 bits) as 16 raw bytes: the ended-jobs
    index stores these, 10 bytes less per entry than the text."""
    value = 0
    for c in job_id:
        value = (value << 5) | _CROCKFORD_VALUE[c]
    return value.to_bytes(16, "big")


def job_id_from_bytes(raw: bytes) -> str:
    value = int.from_bytes(raw, "big")
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


# Only a missing value decodes to None: a reply's ids, keys and statuses are never None.
@overload
def text(value: None) -> None: ...
@overload
def text(value: bytes | str) -> str: ...
def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def number(value: Any, default: int = 0) -> int:
    return default if value in (None, b"", "") else int(value)


def sha_raw(hex_digest: str | None) -> bytes | None:
    return bytes.fromhex(hex_digest) if hex_digest else None


def sha_hex(raw: bytes | None) -> str | None:
    return raw.hex() if raw else None


def checksum_raw(sha256: str | None = None, crc64nvme: str | None = None) -> bytes | None:
    """What a job hash keeps of an issued checksum (`ph`/`rh`, `pm`/`rm`): 32 raw bytes of a
    sha256 or 8 of a CRC64NVME; the length tells which."""
    if crc64nvme:
        return base64.b64decode(crc64nvme)
    return sha_raw(sha256)


def checksum_of(raw: bytes | None) -> tuple[str | None, str | None]:
    """(sha256 hex, CRC64NVME base64) of a stored checksum (one of them, or neither)."""
    if not raw:
        return None, None
    if len(raw) == 8:
        return None, base64.b64encode(raw).decode("ascii")
    return raw.hex(), None


def checksum_of_hex(value: str | None) -> tuple[str | None, str | None]:
    """checksum_of() for a value a script answered in hex."""
    return checksum_of(bytes.fromhex(value)) if value else (None, None)


def sha256_hex_to_b64(hex_digest: str) -> str:
    """A hex sha256 as S3 stores and answers it (x-amz-checksum-sha256: base64)."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def post_digest(kind: str, data: bytes | str) -> bytes:
    """What a result post is remembered by (16 bytes): its kind and sha256 of its content."""
    raw = data.encode() if isinstance(data, str) else data
    return kind[0].encode() + hashlib.sha256(raw).digest()[:15]


@lru_cache(maxsize=64)
def fixed_error_digest(error_json: str) -> bytes:
    """post_digest() of the few fixed error bodies a delivery may write (limit, cancelled)."""
    return post_digest("error", error_json)


def inline_index_expiry_ms(job_ms: int, retention_s: int) -> int:
    """When the inline index hash that holds a job of `job_ms` may expire: the end of its hour
    plus the retention (the job can be queued that long)."""
    span = keys.INLINE_INDEX_SPAN_MS
    return (job_ms // span + 1) * span + retention_s * 1000


def dumps(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): error bodies and references stored or hashed."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
