"""API models (v1): the request and response bodies the control plane validates with pydantic
and publishes as OpenAPI. (The SDK's own HTTP client is `payloadstore._wire`.)"""

# Annotations are not postponed (no `from __future__ import annotations`) in the pydantic model
# modules: pydantic would otherwise compile and evaluate every field's annotation string when
# the class is created, on every cold start.

import base64
import binascii
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from .domain import (
    JOB_ID_RE,
    NAME_RE,
    JobStatus,
    OmitsNull,
    PayloadKind,
    PayloadRef,
    Tier,
    WireModel,
)

Sha256Hex = Annotated[
    str, Field(pattern=r"^[0-9a-fA-F]{64}$", description="sha256 of the bytes, hex")
]
# CRC64NVME as S3 shows it (x-amz-checksum-crc64nvme): base64 of its 8 big-endian bytes.
Crc64Nvme = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9+/]{10}[AEIMQUYcgkosw048]=$",
        description="CRC64NVME of the bytes: base64 of its 8 big-endian bytes, as S3 shows it",
    ),
]
ChecksumAlgorithm = Literal["CRC64NVME", "SHA256"]
# RFC 6838 type/subtype (restricted-name characters), optional `; name=value` parameters (value a
# token or a quoted string); nothing else, so no CR/LF can reach a signed header.
_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"
MIME_TYPE_PATTERN = (
    rf"^{_RESTRICTED_NAME}/{_RESTRICTED_NAME}"
    rf"(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\\r\n]*\"))*$"
)
Lease = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description="the delivery's lease, from the poll answer: only its holder may finish, "
        "fail or heartbeat the job (409 lease_mismatch otherwise)",
    ),
]

MimeType = Annotated[
    str,
    Field(
        max_length=255,
        pattern=MIME_TYPE_PATTERN,
        description="a MIME type (RFC 6838), e.g. application/msgpack",
    ),
]
Name = Annotated[str, Field(pattern=NAME_RE.pattern, description="[A-Za-z0-9_.-], 1-63 chars")]
# A blob is at most what one S3 PUT and one CopyObject (its renewal) take: 5 GiB.
MAX_BLOB_BYTES = 5 * 1024**3
# The most blobs one job (or one result) may reference.
MAX_BLOBS_PER_JOB = 16
BlobList = Annotated[
    list[Sha256Hex],
    Field(
        max_length=MAX_BLOBS_PER_JOB,
        description="sha256 (hex) of every blob the value references (the SDK fills it): "
        "409 unknown_blob when the namespace has no such blob",
    ),
]


class _Strict(WireModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def b64_bytes(value: str) -> bytes:
    """Strict base64 (the alphabet and padding only) -> bytes; ValueError otherwise."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("not valid base64") from e


def _checked_b64(value: str) -> str:
    b64_bytes(value)
    return value


Base64Bytes = Annotated[
    str, AfterValidator(_checked_b64), Field(description="base64 of the msgpack bytes")
]


# -- presign -------------------------------------------------------------------------------


class PresignRequest(_Strict):
    """Query parameters and/or JSON body of POST .../payloads/presign (query wins)."""

    op: Literal["put", "get"]
    size: int | None = Field(None, ge=1, description="exact byte size of the upload (op=put)")
    kind: PayloadKind = PayloadKind.ARGS
    job_id: str | None = Field(None, description="re-presign the key of this job (op=put)")
    content_type: MimeType = "application/msgpack"
    checksum_algorithm: ChecksumAlgorithm | None = Field(
        None,
        description="the upload's checksum (op=put): CRC64NVME (S3 verifies a multipart "
        "upload whole, FULL_OBJECT) or SHA256 (a multipart upload's parts each signed with "
        "their sha256, COMPOSITE). Absent: CRC64NVME when `crc64nvme` is given, else SHA256 "
        "(clients before CRC64NVME)",
    )
    crc64nvme: Crc64Nvme | None = Field(
        None,
        description="CRC64NVME of the upload (op=put, checksum_algorithm=CRC64NVME, required up "
        "to MULTIPART_THRESHOLD): signed into the URL, so S3 refuses other bytes. Above the "
        "threshold it is given with the reference instead, and S3 checks the whole object at "
        "completion",
    )
    sha256: Sha256Hex | None = Field(
        None,
        description="hex sha256 of the upload (op=put, checksum_algorithm=SHA256, required up "
        "to MULTIPART_THRESHOLD): signed into the URL, so S3 refuses other bytes, and checked "
        "again before the key is accepted. Not used above the threshold: each part's sha256 is "
        "signed into its URL",
    )
    lease: Lease | None = Field(
        None, description="kind=result: the lease of the delivery whose result this is"
    )
    key: str | None = Field(None, max_length=512, description="an issued key (op=get)")

    @model_validator(mode="after")
    def _fields_for_op(self):
        if self.op == "put" and self.size is None:
            raise ValueError("op=put needs size")
        # op=put without a checksum is refused by the logic up to MULTIPART_THRESHOLD (a setting).
        if self.op == "get" and not self.key:
            raise ValueError("op=get needs key")
        if self.sha256:
            self.sha256 = self.sha256.lower()
        if self.sha256 and self.crc64nvme:
            raise ValueError("give one checksum: sha256 or crc64nvme")
        if self.checksum_algorithm is None:
            self.checksum_algorithm = "CRC64NVME" if self.crc64nvme else "SHA256"
        if self.checksum_algorithm == "CRC64NVME" and self.sha256:
            raise ValueError("checksum_algorithm=CRC64NVME takes crc64nvme, not sha256")
        if self.checksum_algorithm == "SHA256" and self.crc64nvme:
            raise ValueError("checksum_algorithm=SHA256 takes sha256, not crc64nvme")
        return self


class PartUrl(WireModel):
    number: int
    url: str
    headers: dict[str, str] = Field(description="send exactly these headers with the part's PUT")


class PresignMultipart(OmitsNull):
    """A multipart upload created at presign. A CRC64NVME upload comes with the URLs of its
    first parts (`parts`, up to FIRST_PART_URLS): an upload of that many parts needs no
    `POST .../payloads/parts` call. A SHA256 upload asks for each part's URL with its sha256."""

    upload_id: str
    part_bytes: int = Field(description="every part but the last has exactly this many bytes")
    part_count: int
    checksum_type: Literal["FULL_OBJECT"] | None = Field(
        None,
        description="FULL_OBJECT (CRC64NVME: S3 checks the whole object against the "
        "reference's crc64nvme at completion); absent for a SHA256 upload (COMPOSITE)",
    )
    parts: list[PartUrl] | None = Field(
        None, description="CRC64NVME: the URLs of the first parts, their size signed in"
    )
    parts_expire_at: str | None = Field(None, description="ISO 8601 UTC, with `parts`")


class PresignPutResponse(OmitsNull):
    url: str | None = Field(None, description="the single PUT's URL (absent for a multipart)")
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="send exactly these headers with the PUT")
    bucket: str
    key: str
    job_id: str
    expires_at: str = Field(description="ISO 8601 UTC")
    multipart: PresignMultipart | None = Field(
        None, description="above MULTIPART_THRESHOLD: the multipart upload, instead of `url`"
    )
    checksum_algorithm: ChecksumAlgorithm = Field(
        "SHA256", description="the checksum the upload is verified with"
    )


# -- multipart parts -----------------------------------------------------------------------


class PartSpec(_Strict):
    number: int = Field(ge=1, le=10_000, description="part number, 1..part_count")
    size: int = Field(ge=1, description="part_bytes, or what is left for the last part")
    sha256: Sha256Hex | None = Field(
        None, description="a SHA256 upload's part: required, signed into its URL"
    )
    crc64nvme: Crc64Nvme | None = Field(
        None, description="a CRC64NVME upload's part: optional; when given, signed into its URL"
    )

    @model_validator(mode="after")
    def _lower(self):
        if self.sha256:
            self.sha256 = self.sha256.lower()
        if self.sha256 and self.crc64nvme:
            raise ValueError("a part takes one checksum: sha256 or crc64nvme")
        return self


class PartsRequest(_Strict):
    """POST .../payloads/parts: presigned UploadPart URLs for parts of a multipart upload: of a
    job's payload (`job_id`, `kind`, `lease`) or of a blob (`blob`: its sha256); exactly one."""

    job_id: str | None = Field(None, max_length=64, description="the job whose payload this is")
    blob: Sha256Hex | None = Field(
        None,
        description="instead of job_id: the sha256 of a blob whose multipart upload POST "
        ".../blobs opened (kind and lease are not read)",
    )
    kind: PayloadKind = PayloadKind.ARGS
    lease: Lease | None = Field(
        None, description="kind=result: the lease of the delivery (checked when given)"
    )
    parts: list[PartSpec] = Field(min_length=1, max_length=100, description="at most 100")

    @model_validator(mode="after")
    def _distinct(self):
        if (self.job_id is None) == (self.blob is None):
            raise ValueError("exactly one of job_id and blob")
        if self.blob is not None:
            if self.lease is not None:
                raise ValueError("a blob's parts take no lease")
            self.blob = self.blob.lower()
        numbers = [p.number for p in self.parts]
        if len(set(numbers)) != len(numbers):
            raise ValueError("each part number at most once per call")
        return self


class PartsResponse(OmitsNull):
    job_id: str | None = Field(None, description="the job asked for (absent for a blob)")
    blob: str | None = Field(None, description="the blob asked for (absent for a job)")
    key: str
    upload_id: str
    parts: list[PartUrl]
    expires_at: str = Field(description="ISO 8601 UTC")


class PresignGetResponse(WireModel):
    url: str
    method: Literal["GET"] = "GET"
    expires_at: str


# -- enqueue / status ----------------------------------------------------------------------


class EnqueueRequest(_Strict):
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


# -- daemon side ---------------------------------------------------------------------------


class PollRequest(_Strict):
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


class ResultErrorIn(_Strict):
    type: str = Field(max_length=256)
    message: str = Field("", max_length=16_384)
    traceback: str | None = Field(None, max_length=65_536)


class NextPoll(_Strict):
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


class ResultPost(_Strict):
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


class FailureReport(_Strict):
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


class HeartbeatRequest(_Strict):
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


class HeldLease(_Strict):
    job_id: str = Field(pattern=JOB_ID_RE.pattern)
    lease: Lease


class LeasesRequest(_Strict):
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


# -- blobs ---------------------------------------------------------------------------------


class BlobRequest(_Strict):
    """POST .../blobs: does the namespace have this content? If not, where to upload it."""

    sha256: Sha256Hex
    size: int = Field(ge=1, le=MAX_BLOB_BYTES, description="exact byte size (at most 5 GiB)")
    checksum_algorithm: ChecksumAlgorithm | None = Field(
        None,
        description="above MULTIPART_THRESHOLD, the transfer checksum of a new upload in parts: "
        "CRC64NVME (FULL_OBJECT, its first part URLs in the answer) or SHA256 (COMPOSITE, the "
        "default: clients before CRC64NVME). The blob is named and verified by its sha256 "
        "either way; a single PUT always signs the sha256",
    )
    crc64nvme: Crc64Nvme | None = Field(
        None,
        description="the POST that completes a CRC64NVME upload in parts: the whole blob's "
        "CRC64NVME, which S3 checks against the parts at completion",
    )

    @model_validator(mode="after")
    def _lower(self):
        self.sha256 = self.sha256.lower()
        return self


class BlobUpload(WireModel):
    """A presigned PUT of the blob: size and sha256 are signed in (S3 refuses other bytes)."""

    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="send exactly these headers with the PUT")
    expires_at: str = Field(description="ISO 8601 UTC")


class BlobResponse(OmitsNull):
    sha256: str
    size: int
    exists: bool = Field(
        description="true: the namespace has the blob, verified; jobs may reference it now. "
        "false: upload it with `upload`, then POST again to have it verified"
    )
    key: str = Field(description="the blob's key: blobs/<namespace>/<sha256>")
    expires_at: str | None = Field(
        None, description="exists: when the blob expires unless a new job references it"
    )
    upload: BlobUpload | None = Field(None, description="a single PUT (up to MULTIPART_THRESHOLD)")
    multipart: PresignMultipart | None = Field(
        None,
        description="above MULTIPART_THRESHOLD, instead of upload: ask POST .../payloads/parts "
        '{"blob": sha256, "parts": [...]} for part URLs, upload them, then POST again to have '
        "the upload completed and verified",
    )


# -- public --------------------------------------------------------------------------------


class PolicyModel(WireModel):
    """A namespace's policy (docs/operations.md, "Namespace policies")."""

    retention: Literal["consume", "1d", "2d", "7d", "30d"] = Field(
        "2d", description="how long payloads and results are kept"
    )
    kms_key: str = Field(
        "none", description="none (SSE-S3), stack (the stack's key) or a KMS key ARN"
    )
    inline: Literal["allowed", "never"] = Field(
        "allowed", description="never: every payload and result goes to S3"
    )


def _both_algorithms() -> list[ChecksumAlgorithm]:
    return ["CRC64NVME", "SHA256"]


class ConfigResponse(WireModel):
    inline_threshold: int
    max_payload_bytes: int
    presign_ttl_s: int
    result_ttl_s: int
    max_presigns_per_job: int
    multipart_threshold: int = Field(description="uploads above this size are multipart")
    multipart_part_bytes: int = Field(description="part size (grown for > 10,000 parts)")
    batch_max_jobs: int = Field(description="jobs per batch enqueue or status call")
    batch_max_bytes: int = Field(description="inline payload bytes per batch enqueue (decoded)")
    checksum_algorithms: list[ChecksumAlgorithm] = Field(
        default_factory=_both_algorithms,
        description="the upload checksums this control plane takes (presign `checksum_algorithm`)",
    )
    policy: PolicyModel = Field(
        default_factory=PolicyModel, description="the caller's namespace policy"
    )


class HealthCheck(WireModel):
    ok: bool
    detail: str


class HealthResponse(WireModel):
    """GET /v1/health/details (any token): each check with its detail."""

    status: Literal["ok", "failing"]
    failing: list[str]
    checks: dict[str, HealthCheck]


class PublicHealthResponse(WireModel):
    """GET /v1/health (no token): overall status and only ok/failing per check."""

    status: Literal["ok", "failing"]
    failing: list[str]
    checks: dict[str, Literal["ok", "failing"]]


class ErrorBody(WireModel):
    """More fields may follow `code` and `message` (e.g. `reason`, `details`; `state`, the job's
    state, on a cancel's 409)."""

    code: str
    message: str


class ErrorResponse(WireModel):
    error: ErrorBody


class GatewayErrorResponse(WireModel):
    """What API Gateway itself answers (no token, unknown token, body over 10 MB)."""

    message: str | None


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


class RedriveRequest(_Strict):
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


# -- many jobs per call --------------------------------------------------------------------


class BatchJobIn(_Strict):
    """One job of a batch: exactly as a single enqueue's body, plus its own Idempotency-Key."""

    payloadRef: PayloadRef | None = None
    payloadInline: Base64Bytes | None = None
    idempotency_key: str | None = Field(
        None, description="as the Idempotency-Key header of a single enqueue (inline jobs)"
    )
    blobs: BlobList = Field(default_factory=list)

    def inline_bytes(self) -> bytes | None:
        return None if self.payloadInline is None else b64_bytes(self.payloadInline)


class BatchEnqueueRequest(_Strict):
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


class JobsStatusRequest(_Strict):
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
