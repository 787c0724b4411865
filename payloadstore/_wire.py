"""The v1 wire of the control plane, in one module: every route the SDK, the daemon helper and
the CLI call, with typed answers.

Three pure parts and one transport, so a sync and an asyncio client share everything but the
socket:

1. **Calls.** One builder function per route (`enqueue_inline(...)`, `poll(...)`, ...) returns a
   `Call`: method, path, a short `what` for messages, query/JSON/raw body and headers, the
   statuses that are answers (`ok`), the route's own error mapping (`errors`) and `parse`, which
   turns the `httpx.Response` into a dataclass (`Enqueued`, `PolledJob`, `ResultAnswer`, ...).
   Nothing here does I/O.
2. **Error mapping.** `error_for(call, response)` picks the typed error from the server's
   `error.code`, then the route's mapping (`Call.errors`, e.g. `not_found` on a job route is
   `JobNotFound`, on presign-get it is `PayloadLost`), then the HTTP status. Never from the
   message text.
3. **Retry decision.** `retry_delay(policy, attempt, ...)` (in `_http`) says how long to wait
   before trying again, or that the answer is final.
4. **Transport.** `Wire.send(call)` runs a call over `httpx.Client` with those three.
   `_async_wire.AsyncWire` over `httpx.AsyncClient` is the same ~30-line loop with `await` (it
   calls only `http_kwargs`, `retry_delay`, `retried_answer`, `error_for`, `call.parse` and a
   sleep) plus one `async def` one-liner per route method.

Adding a route (e.g. heartbeat, cancel, jobs:batch):
    1. a frozen dataclass for its answer, if it has one, and a `parse_...` function for it;
    2. a builder function in the "routes" section returning `Call(...)` (path, what, ok,
       errors for route-specific codes, parse);
    3. a one-line method on `Wire`, `return self.send(route(self.namespace, ...))`, and its
       twin on `_async_wire.AsyncWire`, `return await self.send(_wire.route(...))` (a test
       checks both transports offer the same routes with the same arguments);
    4. a case in tests/unit/test_sdk_wire.py.
A new field in an existing answer is one line in its dataclass and its `parse_...`; a new field in
a request body is a keyword argument of the builder.

Every SDK write is safe to retry: inline enqueues carry an Idempotency-Key, S3-tier enqueues an
issued key, and result posts are idempotent on the server. Retry, redrive, purge and cancel
carry an Idempotency-Key too (one per call, the same on each of its retries): a repeat gets the
first answer. So does a result post or failure report with `next`: its repeat gets the
deliveries the first one took. From a control plane before those keys, a cancel's retry that answers `409` with
`state: cancelled` (the first attempt cancelled the job and its answer was lost) is the cancel
done (`Call.retried`).
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar, overload

import httpx

from ._http import RetryPolicy, error_body, error_details, retry_delay
from .errors import (
    ApiError,
    AuthError,
    ConflictError,
    InlineNever,
    InlineUnavailable,
    InvalidRequest,
    JobNotFound,
    LeaseMismatch,
    NotRetryable,
    PayloadConsumed,
    PayloadLost,
    PayloadTooLarge,
    PolicyMismatch,
    QueueNotFound,
    ServiceUnavailable,
)

log = logging.getLogger("payloadstore")

T = TypeVar("T")
MSGPACK = "application/msgpack"
TERMINAL_STATES = frozenset({"succeeded", "failed", "payload_lost", "payload_corrupt", "cancelled"})
# The connect timeout of every control-plane request; read timeouts are per call.
CONNECT_TIMEOUT_S = 10.0

# An error factory is called as factory(text, status=..., code=...).
ErrorFactory = Callable[..., Exception]

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


# -- calls -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request of the wire, described; `parse` turns an `ok` response into its answer."""

    method: str
    path: str
    what: str
    parse: Callable[[httpx.Response], T]
    ok: frozenset[int] = frozenset({200})
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: bool = True
    timeout_s: float | None = None
    # The route's own meaning of error codes (str) or statuses without a code (int).
    errors: Mapping[str | int, ErrorFactory] = field(default_factory=dict)
    # An error answer to a retry, when an earlier attempt may have landed (its answer was lost or
    # a retryable error): the answer that earlier attempt would have given, or None for the
    # usual error (e.g. a retried cancel's `409, the job is cancelled` is the cancel done).
    retried: Callable[[httpx.Response], T | None] | None = None


def http_kwargs(call: Call[Any], endpoint: str, token: str) -> dict[str, Any]:
    """Arguments of `httpx.(Async)Client.request` for a call: shared by both transports."""
    headers = dict(call.headers)
    if call.auth:
        headers["Authorization"] = f"Bearer {token}"
    kwargs: dict[str, Any] = {
        "method": call.method,
        "url": endpoint + call.path,
        "headers": headers,
        "params": dict(call.params) if call.params else None,
    }
    if call.json is not None:
        kwargs["json"] = call.json
    if call.content is not None:
        kwargs["content"] = call.content
    if call.timeout_s is not None:
        kwargs["timeout"] = httpx.Timeout(call.timeout_s, connect=CONNECT_TIMEOUT_S)
    return kwargs


# -- error mapping -----------------------------------------------------------------------------

# The server's `error.code` -> class, for every route (functions/payloadstore_controlplane/models/errors.py).
CODE_ERRORS: dict[str, ErrorFactory] = {
    "unauthorized": AuthError,
    "forbidden": AuthError,
    "conflict": ConflictError,
    "lease_mismatch": LeaseMismatch,
    "payload_too_large": PayloadTooLarge,
    "bad_request": InvalidRequest,
    "invalid_request": InvalidRequest,
    "too_many_presigns": ServiceUnavailable,
    "service_unavailable": ServiceUnavailable,
    "redis_memory_full": ServiceUnavailable,
    "inline_unavailable": InlineUnavailable,
    "inline_never": InlineNever,
    "policy_mismatch": PolicyMismatch,
    # retention `consume`: a result read past its grace, a succeeded job's arguments (410)
    "result_consumed": PayloadConsumed,
    "arguments_consumed": PayloadConsumed,
    "storage_error": ServiceUnavailable,
    "internal_error": ServiceUnavailable,
}


def status_error(status: int) -> ErrorFactory:
    """The class for an answer without a known code (API Gateway's own answers, proxies)."""
    if status in (401, 403):
        return AuthError
    if status == 409:
        return ConflictError
    if status == 413:
        return PayloadTooLarge
    if status in (400, 422):
        return InvalidRequest
    if status == 429 or status >= 500:
        return ServiceUnavailable
    return ApiError


def error_for(call: Call[Any], response: httpx.Response) -> Exception:
    """The typed error for an error answer: route's code, common code, route's status, status."""
    status = response.status_code
    code, message = error_body(response)
    text = f"{call.what}: {message} (HTTP {status})"
    factory = (
        (call.errors.get(code) if code else None)
        or (CODE_ERRORS.get(code) if code else None)
        or call.errors.get(status)
        or status_error(status)
    )
    error = factory(text, status=status, code=code)
    if isinstance(error, (ApiError, PayloadConsumed)):
        error.details = error_details(response)
    return error


# Refusals on a limit or a policy that `/v1/config` tells: after one, the client reads the
# config again (the stack's settings may have changed since it was read).
LIMIT_CODES = frozenset({"payload_too_large", "inline_never", "policy_mismatch"})


def refused_on_a_limit(response: httpx.Response) -> bool:
    """413 (a size over a cap), or a refusal that names a setting or policy of the config."""
    if response.status_code == 413:
        return True
    code, _ = error_body(response)
    return code in LIMIT_CODES


def raise_error(call: Call[Any], response: httpx.Response) -> NoReturn:
    """Raise `error_for(...)`, chained from httpx's own HTTPStatusError for the response."""
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as http_error:
        raise error_for(call, response) from http_error
    # A status outside `ok` that is not an error (e.g. an unexpected 3xx).
    raise ApiError(
        f"{call.what}: unexpected HTTP {response.status_code}", status=response.status_code
    )


def retried_answer(call: Call[T], attempt: int, response: httpx.Response) -> T | None:
    """The answer a final error stands for on a retry (`Call.retried`), else None."""
    if attempt == 0 or call.retried is None:
        return None
    answer = call.retried(response)
    if answer is not None:
        log.info(
            "retry answered status=%d what=%s: taken as the earlier attempt's answer",
            response.status_code,
            call.what,
        )
    return answer


def unreachable(call: Call[Any], endpoint: str, error: Exception) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"{call.what}: cannot reach the control plane at {endpoint}: {error!r}"
    )


# -- parsers (pure) ----------------------------------------------------------------------------


def _json(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError as e:
        raise ApiError(
            f"unreadable answer from the control plane: {response.text[:200]!r}",
            status=response.status_code,
        ) from e
    if not isinstance(body, dict):
        raise ApiError(f"unexpected answer from the control plane: {body!r:.200}")
    return body


def _b64(value: Any) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _ref(value: Any) -> PayloadRef | None:
    return PayloadRef.from_wire(value) if isinstance(value, Mapping) and value.get("key") else None


def _download(value: Any) -> DownloadGrant | None:
    """`download: {url, expires_at}` beside an S3 reference (servers before it: None)."""
    if not isinstance(value, Mapping) or not value.get("url"):
        return None
    return DownloadGrant(
        url=str(value["url"]),
        method="GET",
        expires_at=value.get("expires_at"),
        raw=dict(value),
    )


def parse_none(response: httpx.Response) -> None:
    return None


def parse_config(response: httpx.Response) -> ServerConfig:
    body = _json(response)
    ttl = body.get("result_ttl_s")
    cap = body.get("max_presigns_per_job")
    return ServerConfig(
        inline_threshold=int(body["inline_threshold"]),
        max_payload_bytes=int(body["max_payload_bytes"]),
        presign_ttl_s=int(body.get("presign_ttl_s") or 900),
        result_ttl_s=None if ttl is None else int(ttl),
        max_presigns_per_job=None if cap is None else int(cap),
        batch_max_jobs=int(body.get("batch_max_jobs") or 100),
        batch_max_bytes=int(body.get("batch_max_bytes") or 4 * 1024 * 1024),
        multipart_threshold=(
            int(body["multipart_threshold"]) if body.get("multipart_threshold") else None
        ),
        crc64nvme="CRC64NVME" in (body.get("checksum_algorithms") or ()),
        policy=_policy(body.get("policy")),
    )


def _policy(raw: Any) -> NamespacePolicy:
    if not isinstance(raw, dict):
        return NamespacePolicy()
    return NamespacePolicy(
        retention=str(raw.get("retention") or "2d"),
        kms_key=str(raw.get("kms_key") or "none"),
        inline=str(raw.get("inline") or "allowed"),
    )


def parse_health(response: httpx.Response) -> Health:
    try:
        body = response.json()
    except ValueError:
        body = {"status": "unreadable", "body": response.text[:300]}
    if not isinstance(body, dict):
        body = {"status": "unreadable", "body": repr(body)[:300]}
    status = str(body.get("status", "ok")).lower()
    return Health(response.status_code == 200 and status in ("ok", "healthy", "pass"), body)


def parse_upload_grant(response: httpx.Response) -> UploadGrant:
    body = _json(response)
    return UploadGrant(
        url=str(body.get("url") or ""),
        method=body.get("method", "PUT"),
        headers={str(k): str(v) for k, v in (body.get("headers") or {}).items()},
        bucket=body.get("bucket", ""),
        key=body["key"],
        job_id=body.get("job_id"),
        expires_at=body.get("expires_at"),
        raw=body,
        multipart=dict(body["multipart"]) if body.get("multipart") else None,
    )


def parse_json_object(response: httpx.Response) -> dict:
    return dict(_json(response))


def parse_download_grant(response: httpx.Response) -> DownloadGrant:
    body = _json(response)
    return DownloadGrant(
        url=body["url"],
        method=body.get("method", "GET"),
        expires_at=body.get("expires_at"),
        raw=body,
    )


def ended_result(body: Mapping[str, Any]) -> ResultAnswer | None:
    """The result an enqueue-and-wait answer carries (`state` terminal), else None."""
    if body.get("state") not in TERMINAL_STATES:
        return None
    return result_answer(body, str(body.get("job_id") or ""), done=True)


def parse_enqueued(default_tier: str) -> Callable[[httpx.Response], Enqueued]:
    def parse(response: httpx.Response) -> Enqueued:
        body = _json(response)
        job_id = body.get("job_id")
        if not job_id:
            raise ApiError(
                f"enqueue answer without a job id (HTTP {response.status_code}): {body!r:.200}",
                status=response.status_code,
            )
        return Enqueued(
            job_id=str(job_id),
            tier=str(body.get("tier") or default_tier),
            created=response.status_code == 201,
            result=ended_result(body),
            waited=body.get("waited") is not False,
        )

    return parse


def parse_job_status(job_id: str) -> Callable[[httpx.Response], JobStatus]:
    def parse(response: httpx.Response) -> JobStatus:
        return JobInfo.from_wire(_json(response), job_id)

    return parse


def result_answer(body: Mapping[str, Any], job_id: str, *, done: bool) -> ResultAnswer:
    error = body.get("error")
    return ResultAnswer(
        job_id=body.get("job_id", job_id),
        state=body.get("state"),
        done=done,
        result_inline=_b64(body.get("resultInline")),
        result_ref=_ref(body.get("resultRef")),
        error=error if isinstance(error, dict) else ({"message": str(error)} if error else None),
        raw=dict(body),
        download=_download(body.get("download")),
    )


def parse_result(job_id: str) -> Callable[[httpx.Response], ResultAnswer]:
    def parse(response: httpx.Response) -> ResultAnswer:
        return result_answer(_json(response), job_id, done=response.status_code == 200)

    return parse


class QueuePage(list):
    """One page of a queue listing (a list of QueueInfo); `next_after`: more follow, from the
    first after this name (None: the last page)."""

    next_after: str | None = None


def parse_queue_list(response: httpx.Response) -> QueuePage:
    body = _json(response)
    page = QueuePage(QueueInfo.from_wire(q) for q in body["queues"])
    page.next_after = body.get("next_after")
    return page


def all_pages(first: QueuePage, more: Callable[[str], QueuePage]) -> list[QueueInfo]:
    """Every queue: `first`, then the pages `more(after)` answers until the last."""
    found = list(first)
    after = first.next_after
    while after:
        page = more(after)
        found += page
        after = page.next_after
    return found


def parse_queue_stats(response: httpx.Response) -> QueueInfo:
    return QueueInfo.from_wire(_json(response))


def parse_throughput(response: httpx.Response) -> Throughput:
    return Throughput.from_wire(_json(response))


def parse_job_payloads(response: httpx.Response) -> JobPayloads:
    return JobPayloads.from_wire(_json(response))


def _refused(answer: Mapping[str, Any]) -> ItemRefused:
    raw_error = answer.get("error")
    error: Mapping[str, Any] = raw_error if isinstance(raw_error, Mapping) else {}
    return ItemRefused(
        code=error.get("code"), message=str(error.get("message") or ""), job_id=answer.get("job_id")
    )


def parse_batch(response: httpx.Response) -> list[Enqueued | ItemRefused]:
    out: list[Enqueued | ItemRefused] = []
    for answer in _json(response)["jobs"]:
        if answer.get("job_id") and ("error" not in answer or "state" in answer):
            out.append(
                Enqueued(
                    str(answer["job_id"]),
                    str(answer.get("tier") or ""),
                    True,
                    result=ended_result(answer),
                    waited=answer.get("waited") is not False,
                )
            )
        else:
            out.append(_refused(answer))
    return out


def parse_statuses(response: httpx.Response) -> list[JobStatus | ItemRefused]:
    """The statuses answered, in request order. An answer over its byte budget leaves the ids
    from some point on out (listed in `unanswered`): callers match answers by job id, so what
    is left out simply stays pending and is asked for again (Watch.apply)."""
    out: list[JobStatus | ItemRefused] = []
    for answer in _json(response)["jobs"]:
        if "error" in answer and "state" not in answer:
            out.append(_refused(answer))
            continue
        out.append(JobInfo.from_wire(answer))
    return out


def parse_job_page(response: httpx.Response) -> JobPage:
    body = _json(response)
    return JobPage(
        jobs=[JobInfo.from_wire(j) for j in body.get("jobs") or []],
        next_cursor=body.get("next_cursor") or None,
    )


def parse_retry(response: httpx.Response) -> RetryAnswer:
    body = _json(response)
    return RetryAnswer(
        job_id=str(body["job_id"]),
        state=str(body.get("state") or "queued"),
        attempt=int(body.get("attempt") or 0),
        retries=int(body.get("retries") or 0),
    )


def parse_redrive(response: httpx.Response) -> RedriveAnswer:
    body = _json(response)
    return RedriveAnswer(retried=int(body["retried"]), skipped=int(body.get("skipped") or 0))


def parse_purge(response: httpx.Response) -> PurgeAnswer:
    body = _json(response)
    return PurgeAnswer(cancelled=int(body["cancelled"]), remaining=int(body.get("remaining") or 0))


def parse_polled(response: httpx.Response) -> PolledJob | None:
    if response.status_code == 204 or not response.content:
        return None
    return polled_job(_json(response))


def parse_polled_many(response: httpx.Response) -> list[PolledJob]:
    """A poll with max_jobs: `200 {"jobs": [...]}` (each a single poll's answer), [] on 204."""
    if response.status_code == 204 or not response.content:
        return []
    jobs = _json(response).get("jobs")
    if not isinstance(jobs, list):
        raise ApiError(
            "poll with max_jobs answered without a jobs list", status=response.status_code
        )
    return [polled_job(body) for body in jobs]


def parse_next_jobs(response: httpx.Response) -> list[PolledJob] | None:
    """A result post or failure report with `next`: `200 {"jobs": [...]}` (maybe empty); None
    for a 204, a control plane that took the post but not `next` (before it)."""
    if response.status_code == 204 or not response.content:
        return None
    jobs = _json(response).get("jobs")
    if not isinstance(jobs, list):
        return None
    return [polled_job(body) for body in jobs]


def polled_job(body: Mapping[str, Any]) -> PolledJob:
    """A poll answer's body as a `PolledJob` (also for messages a caller kept as dicts)."""
    attempt = body.get("attempt")
    return PolledJob(
        job_id=str(body["job_id"]),
        namespace=body.get("namespace"),
        queue=body.get("queue"),
        attempt=None if attempt is None else int(attempt),
        payload_inline=_b64(body.get("payloadInline")),
        payload_ref=_ref(body.get("payloadRef")),
        raw=dict(body),
        download=_download(body.get("download")),
        lease=body.get("lease"),
        lease_expires_at=_seconds(body.get("lease_expires_at")),
        lease_expires_in_s=_seconds(body.get("lease_expires_in_s")),
        received_at=time.monotonic(),
    )


def parse_heartbeat(response: httpx.Response) -> HeartbeatAnswer:
    body = _json(response)
    return HeartbeatAnswer(
        lease_expires_at=float(body["lease_expires_at"]),
        cancel_requested=bool(body.get("cancel_requested")),
        lease_expires_in_s=_seconds(body.get("lease_expires_in_s")),
        received_at=time.monotonic(),
    )


def parse_leases(response: httpx.Response) -> LeasesAnswer:
    body = _json(response)
    return LeasesAnswer(
        lease_expires_in_s=float(body["lease_expires_in_s"]),
        cancel_requested=tuple(str(j) for j in body.get("cancel_requested") or ()),
        lost=tuple(str(j) for j in body.get("lost") or ()),
        woken=bool(body.get("woken")),
        received_at=time.monotonic(),
    )


def cancelled_already(job_id: str) -> Callable[[httpx.Response], CancelAnswer | None]:
    """A retried cancel's `409 {error: {code: conflict, state: cancelled}}`: the job is cancelled,
    by the earlier attempt whose answer was lost (or by another caller meanwhile), so the cancel
    is done, as the lost `200 cancelled` said. Any other state, or a 409 without `state` (control
    planes before it), stays the error; never decided from the message text."""

    def parse(response: httpx.Response) -> CancelAnswer | None:
        if response.status_code != 409:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or error.get("code") != "conflict":
            return None
        if error.get("state") != "cancelled":
            return None
        return CancelAnswer(job_id=job_id, state="cancelled", cancel_requested=False)

    return parse


def parse_cancel(job_id: str) -> Callable[[httpx.Response], CancelAnswer]:
    def parse(response: httpx.Response) -> CancelAnswer:
        body = _json(response)
        return CancelAnswer(
            job_id=body.get("job_id", job_id),
            state=body.get("state", "unknown"),
            cancel_requested=bool(body.get("cancel_requested")),
        )

    return parse


# -- routes (pure builders) --------------------------------------------------------------------


def ns_path(namespace: str, suffix: str) -> str:
    return f"/v1/namespaces/{namespace}{suffix}"


def _job_errors() -> dict[str | int, ErrorFactory]:
    return {"not_found": JobNotFound, 404: JobNotFound}


def config() -> Call[ServerConfig]:
    return Call("GET", "/v1/config", "read config", parse_config)


def health(details: bool = False) -> Call[Health]:
    """`/v1/health`: ok/failing per check, no token; `/v1/health/details`: each check's detail,
    any token."""
    if details:
        return Call(
            "GET", "/v1/health/details", "health details", parse_health, ok=frozenset({200, 503})
        )
    return Call(
        "GET", "/v1/health", "health check", parse_health, ok=frozenset({200, 503}), auth=False
    )


def presign_put(
    namespace: str,
    *,
    size: int,
    kind: str,
    sha256: str | None,
    content_type: str = MSGPACK,
    job_id: str | None = None,
    lease: str | None = None,
    crc64nvme: str | None = None,
    checksum_algorithm: str | None = None,
) -> Call[UploadGrant]:
    # kind and content_type only when they differ from the server's defaults (args, msgpack).
    body: dict[str, Any] = {"op": "put", "size": size}
    if kind != "args":
        body["kind"] = kind
    if sha256:
        body["sha256"] = sha256
    if crc64nvme:
        body["crc64nvme"] = crc64nvme
    elif checksum_algorithm:
        body["checksum_algorithm"] = checksum_algorithm
    if content_type != MSGPACK:
        body["content_type"] = content_type
    if job_id:
        body["job_id"] = job_id
    if lease:
        # kind=result: the result belongs to this delivery (409 lease_mismatch once it is not
        # the current one).
        body["lease"] = lease
    return Call(
        "POST",
        ns_path(namespace, "/payloads/presign"),
        f"presign {kind} upload",
        parse_upload_grant,
        json=body,
        # A re-presign names a job: its 404 means the job (or its key) is unknown.
        errors=_job_errors() if job_id else {},
    )


def presign_parts(
    namespace: str, job_id: str, kind: str, parts: list[dict], *, lease: str | None = None
) -> Call[dict]:
    """`POST .../payloads/parts`: UploadPart URLs ({job_id, key, upload_id, parts:[{number,
    url, headers}], expires_at}) for at most 100 parts ({number, size, sha256})."""
    body: dict[str, Any] = {"job_id": job_id, "parts": parts}
    if kind != "args":
        body["kind"] = kind
    if lease:
        body["lease"] = lease
    return Call(
        "POST",
        ns_path(namespace, "/payloads/parts"),
        f"presign {kind} parts",
        parse_json_object,
        json=body,
        errors=_job_errors(),
    )


def blob_parts(namespace: str, sha256: str, parts: list[dict]) -> Call[dict]:
    """`POST .../payloads/parts {blob, parts}`: UploadPart URLs ({blob, key, upload_id,
    parts:[{number, url, headers}], expires_at}) for at most 100 parts of a blob's multipart
    upload (opened by POST .../blobs)."""
    return Call(
        "POST",
        ns_path(namespace, "/payloads/parts"),
        f"presign blob {sha256[:12]} parts",
        parse_json_object,
        json={"blob": sha256, "parts": parts},
    )


def presign_get(namespace: str, key: str, *, job_id: str | None = None) -> Call[DownloadGrant]:
    def lost(reason: str) -> ErrorFactory:
        def factory(text: str, **_: Any) -> Exception:
            return PayloadLost(f"payload {key} is {reason}: {text}", job_id=job_id, key=key)

        return factory

    def consumed(text: str, **kw: Any) -> Exception:
        return PayloadConsumed(text, job_id=job_id, key=key, **kw)

    never_issued, expired = lost("unknown to the control plane"), lost("past retention")
    return Call(
        "POST",
        ns_path(namespace, "/payloads/presign"),
        "presign download",
        parse_download_grant,
        json={"op": "get", "key": key},
        errors={
            "not_found": never_issued,
            "gone": expired,
            "result_consumed": consumed,
            "arguments_consumed": consumed,
            404: never_issued,
            410: expired,
        },
    )


def _waiting(wait_s: float | None) -> dict[str, Any]:
    """The query and read timeout of an enqueue that waits for its job (`?wait=S`)."""
    if not wait_s or wait_s <= 0:
        return {}
    return {"params": {"wait": f"{wait_s:g}"}, "timeout_s": wait_s + 20.0}


def enqueue_inline(
    namespace: str,
    queue: str,
    data: bytes,
    *,
    idempotency_key: str,
    blobs: tuple[str, ...] = (),
    wait_s: float | None = None,
) -> Call[Enqueued]:
    """The raw msgpack bytes as the body; the key makes every retry give back the same job.
    With blobs, the JSON form (`payloadInline` base64 + `blobs`): a raw body has no room.
    With wait_s: `Enqueued.result` is the job's result when it ended within that wait."""
    if blobs:
        return Call(
            "POST",
            ns_path(namespace, f"/queues/{queue}/jobs"),
            f"enqueue on queue {queue}",
            parse_enqueued("inline"),
            ok=frozenset({200, 201}),
            json={"payloadInline": base64.b64encode(data).decode("ascii"), "blobs": list(blobs)},
            headers={"Idempotency-Key": idempotency_key},
            **_waiting(wait_s),
        )
    return Call(
        "POST",
        ns_path(namespace, f"/queues/{queue}/jobs"),
        f"enqueue on queue {queue}",
        parse_enqueued("inline"),
        ok=frozenset({200, 201}),
        content=data,
        headers={"Content-Type": MSGPACK, "Idempotency-Key": idempotency_key},
        **_waiting(wait_s),
    )


def enqueue_ref(
    namespace: str,
    queue: str,
    ref: PayloadRef,
    *,
    blobs: tuple[str, ...] = (),
    wait_s: float | None = None,
) -> Call[Enqueued]:
    """Enqueueing the same issued key again gives back the same job, so retries are safe."""
    body: dict[str, Any] = {"payloadRef": ref.to_request()}
    if blobs:
        body["blobs"] = list(blobs)
    return Call(
        "POST",
        ns_path(namespace, f"/queues/{queue}/jobs"),
        f"enqueue on queue {queue}",
        parse_enqueued("s3"),
        ok=frozenset({200, 201}),
        json=body,
        **_waiting(wait_s),
    )


def parse_blob(response: httpx.Response) -> dict[str, Any]:
    return _json(response)


def blob(
    namespace: str,
    sha256: str,
    size: int,
    *,
    checksum_algorithm: str | None = None,
    crc64nvme: str | None = None,
) -> Call[dict[str, Any]]:
    """POST .../blobs: `{exists: true, ...}`, or `{exists: false, upload: {url, headers}}`, or
    above MULTIPART_THRESHOLD `{exists: false, multipart: {upload_id, part_bytes, part_count}}`
    (a POST after the parts are uploaded completes it; `checksum_algorithm` CRC64NVME: the
    first part URLs come with it, and the completing POST gives the whole blob's `crc64nvme`)."""
    body: dict[str, Any] = {"sha256": sha256, "size": size}
    if checksum_algorithm:
        body["checksum_algorithm"] = checksum_algorithm
    if crc64nvme:
        body["crc64nvme"] = crc64nvme
    return Call(
        "POST",
        ns_path(namespace, "/blobs"),
        f"blob {sha256[:12]}",
        parse_blob,
        json=body,
    )


def job_status(namespace: str, job_id: str) -> Call[JobStatus]:
    return Call(
        "GET",
        ns_path(namespace, f"/jobs/{job_id}"),
        f"job {job_id} status",
        parse_job_status(job_id),
        errors=_job_errors(),
    )


def job_result(namespace: str, job_id: str, *, wait_s: float) -> Call[ResultAnswer]:
    """`GET .../jobs/{id}/result`; 410 `result_consumed` (retention `consume`, a re-read past
    the first read's grace) raises `PayloadConsumed`."""

    def consumed(text: str, **kw: Any) -> Exception:
        return PayloadConsumed(text, job_id=job_id, **kw)

    return Call(
        "GET",
        ns_path(namespace, f"/jobs/{job_id}/result"),
        f"job {job_id} result",
        parse_result(job_id),
        ok=frozenset({200, 202}),
        params={"wait": f"{wait_s:g}"},
        timeout_s=wait_s + 20.0,
        errors={**_job_errors(), "result_consumed": consumed},
    )


def enqueue_batch(
    namespace: str, queue: str, items: list[BatchItem], *, wait_s: float | None = None
) -> Call[list[Enqueued | ItemRefused]]:
    """Many jobs in one call; every inline item carries its own Idempotency-Key, so a retried
    batch gives back the same jobs. With wait_s, each job that ended within it (one deadline
    for the batch) has its `Enqueued.result`."""
    return Call(
        "POST",
        ns_path(namespace, f"/queues/{queue}/jobs:batch"),
        f"batch enqueue of {len(items)} jobs on queue {queue}",
        parse_batch,
        json={"jobs": [item.to_wire() for item in items]},
        **_waiting(wait_s),
    )


def jobs_status(
    namespace: str, job_ids: list[str], *, wait_s: float = 0.0
) -> Call[list[JobStatus | ItemRefused]]:
    return Call(
        "POST",
        ns_path(namespace, "/jobs:status"),
        f"status of {len(job_ids)} jobs",
        parse_statuses,
        json={"job_ids": list(job_ids), "wait_s": wait_s},
        timeout_s=wait_s + 20.0,
    )


def queue_list(namespace: str, after: str | None = None) -> Call[QueuePage]:
    """A page of the namespace's queues (10,000 a page, in name order), from after `after`."""
    return Call(
        "GET",
        ns_path(namespace, "/queues"),
        "list queues",
        parse_queue_list,
        params={"after": after} if after else None,
    )


def queue_stats(namespace: str, queue: str) -> Call[QueueInfo]:
    return Call(
        "GET",
        ns_path(namespace, f"/queues/{queue}"),
        f"queue {queue}",
        parse_queue_stats,
        errors={"not_found": QueueNotFound, 404: QueueNotFound},
    )


# The most deliveries one poll may ask for (`max_jobs`, 1..16).
MAX_POLL_JOBS = 16


@overload
def poll(
    namespace: str, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: None = None
) -> Call[PolledJob | None]: ...
@overload
def poll(
    namespace: str, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int
) -> Call[list[PolledJob]]: ...
def poll(
    namespace: str,
    queues: list[str],
    *,
    wait_s: float,
    daemon_id: str,
    max_jobs: int | None = None,
) -> Call[PolledJob | None] | Call[list[PolledJob]]:
    """One long poll. Without max_jobs: the delivery or None. With max_jobs (1..16): up to that
    many deliveries (a list, empty when idle); a control plane before max_jobs refuses it with
    422 `InvalidRequest` naming the field."""
    body: dict[str, Any] = {
        "namespace": namespace,
        "queues": list(queues),
        "wait_s": wait_s,
        "daemon_id": daemon_id,
    }
    if max_jobs is None:
        return Call(
            "POST",
            "/v1/daemon/poll",
            "poll",
            parse_polled,
            ok=frozenset({200, 204}),
            json=body,
            timeout_s=wait_s + 20.0,
        )
    if not 1 <= max_jobs <= MAX_POLL_JOBS:
        raise ValueError(f"max_jobs must be 1..{MAX_POLL_JOBS} (got {max_jobs})")
    return Call(
        "POST",
        "/v1/daemon/poll",
        "poll",
        parse_polled_many,
        ok=frozenset({200, 204}),
        json={**body, "max_jobs": max_jobs},
        timeout_s=wait_s + 20.0,
    )


def post_result(
    namespace: str,
    job_id: str,
    *,
    inline: bytes | None = None,
    ref: PayloadRef | None = None,
    error: Mapping[str, Any] | None = None,
    lease: str | None = None,
    blobs: tuple[str, ...] = (),
    next: NextJobs | None = None,
) -> Call[list[PolledJob] | None]:
    """Exactly one of: the inline result bytes, the S3 reference, or the error {type, message,
    traceback?}; with the delivery's lease (409 `lease_mismatch` once it is not current) and
    the sha256 of each blob the result references. With `next`: the next deliveries taken once
    the result is stored (a list, maybe empty), or None from a control plane that answered 204
    (before `next`; one that refuses the field answers 422 `InvalidRequest` naming it, and
    stored nothing)."""
    given = [
        name for name, v in (("inline", inline), ("ref", ref), ("error", error)) if v is not None
    ]
    if len(given) != 1:
        raise ValueError(f"post_result needs exactly one of inline, ref, error (got {given})")
    if inline is not None:
        body: dict[str, Any] = {"resultInline": base64.b64encode(inline).decode("ascii")}
    elif ref is not None:
        body = {"resultRef": ref.to_request()}
    else:
        body = {"error": dict(error or {})}
    if lease is not None:
        body["lease"] = lease
    if blobs:
        body["blobs"] = list(blobs)
    if next is not None:
        body["next"] = next.to_wire()
    return Call(
        "POST",
        ns_path(namespace, f"/jobs/{job_id}/result"),
        f"post result of job {job_id}",
        parse_next_jobs,
        ok=frozenset({200, 204}),
        json=body,
        errors=_job_errors(),
        timeout_s=None if next is None else next.wait_s + 20.0,
        headers=_next_key(next),
    )


def report_failure(
    namespace: str,
    job_id: str,
    *,
    state: str,
    detail: str,
    expected_sha256: str | None = None,
    actual_sha256: str | None = None,
    lease: str | None = None,
    next: NextJobs | None = None,
    expected_crc64nvme: str | None = None,
    actual_crc64nvme: str | None = None,
) -> Call[list[PolledJob] | None]:
    """payload_lost / payload_corrupt for the delivery; with `next` as `post_result`."""
    body: dict[str, Any] = {"state": state, "detail": detail}
    if lease is not None:
        body["lease"] = lease
    if expected_sha256:
        body["expected_sha256"] = expected_sha256
    if actual_sha256:
        body["actual_sha256"] = actual_sha256
    if expected_crc64nvme:
        body["expected_crc64nvme"] = expected_crc64nvme
    if actual_crc64nvme:
        body["actual_crc64nvme"] = actual_crc64nvme
    if next is not None:
        body["next"] = next.to_wire()
    return Call(
        "POST",
        ns_path(namespace, f"/jobs/{job_id}/failure"),
        f"report {state} for job {job_id}",
        parse_next_jobs,
        ok=frozenset({200, 204}),
        json=body,
        errors=_job_errors(),
        timeout_s=None if next is None else next.wait_s + 20.0,
        headers=_next_key(next),
    )


def _next_key(next: NextJobs | None) -> dict[str, str]:
    """A post with `next` carries an Idempotency-Key (the same on each retry): sent again after
    a lost answer, it gets the deliveries the first one took, not a second batch."""
    return {} if next is None else {"Idempotency-Key": operation_key()}


def heartbeat(namespace: str, job_id: str, lease: str) -> Call[HeartbeatAnswer]:
    """Extend the delivery's lease; `LeaseMismatch` once the job was taken from this holder."""
    return Call(
        "POST",
        ns_path(namespace, f"/jobs/{job_id}/heartbeat"),
        f"heartbeat of job {job_id}",
        parse_heartbeat,
        json={"lease": lease},
        errors=_job_errors(),
    )


# The most leases one leases long-poll renews (the control plane's MAX_LEASES).
MAX_LEASES = 256


def leases(
    namespace: str, daemon_id: str, held: Mapping[str, str], *, wait_s: float
) -> Call[LeasesAnswer]:
    """Renew every lease of `held` (job id -> lease, 1..256), then wait up to `wait_s` for a
    client to cancel one of the daemon's jobs (answered at once then). A control plane before
    the route answers 404 or 403 (API Gateway's answer to an unknown path)."""
    if not 1 <= len(held) <= MAX_LEASES:
        raise ValueError(f"leases renews 1..{MAX_LEASES} leases (got {len(held)})")
    return Call(
        "POST",
        "/v1/daemon/leases",
        "renew leases",
        parse_leases,
        json={
            "namespace": namespace,
            "daemon_id": daemon_id,
            "leases": [{"job_id": j, "lease": lease} for j, lease in held.items()],
            "wait_s": wait_s,
        },
        timeout_s=wait_s + 20.0,
    )


# The states a queue's jobs are listed by (`failed`: every terminal state but succeeded and
# cancelled), and the most jobs one page holds.
LIST_STATES = ("queued", "running", "failed", "cancelled", "succeeded")
MAX_LIST_JOBS = 100


def list_jobs(
    namespace: str, queue: str, *, state: str = "queued", limit: int = 50, cursor: str | None = None
) -> Call[JobPage]:
    """One page of the queue's jobs in `state`, newest first."""
    if not 1 <= limit <= MAX_LIST_JOBS:
        raise ValueError(f"limit must be 1..{MAX_LIST_JOBS} (got {limit})")
    params: dict[str, Any] = {"state": state, "limit": limit}
    if cursor:
        params["cursor"] = cursor
    return Call(
        "GET",
        ns_path(namespace, f"/queues/{queue}/jobs"),
        f"list {state} jobs of queue {queue}",
        parse_job_page,
        params=params,
    )


def throughput(namespace: str, queue: str | None = None) -> Call[Throughput]:
    """Succeeded and failed jobs per minute over the last hour: of `queue`, or of every queue."""
    return Call(
        "GET",
        ns_path(namespace, "/throughput"),
        f"throughput of queue {queue}" if queue else "throughput",
        parse_throughput,
        params={"queue": queue} if queue else None,
    )


def job_payloads(namespace: str, job_id: str) -> Call[JobPayloads]:
    """What the job carried: its arguments and result, inline bytes or S3 references."""
    return Call(
        "GET",
        ns_path(namespace, f"/jobs/{job_id}/payloads"),
        f"job {job_id} payloads",
        parse_job_payloads,
        errors=_job_errors(),
    )


def operation_key() -> str:
    """A fresh Idempotency-Key for one client operation (its retries send the same one)."""
    return uuid.uuid4().hex


def retry_job(
    namespace: str, job_id: str, *, idempotency_key: str | None = None
) -> Call[RetryAnswer]:
    """Queue a failed or cancelled job again; `NotRetryable` (with `.reason`) otherwise. Safe
    to retry: its Idempotency-Key (a fresh one unless given) gives a repeat the first answer,
    even once the job ran and failed again meanwhile."""
    return Call(
        "POST",
        ns_path(namespace, f"/jobs/{job_id}/retry"),
        f"retry job {job_id}",
        parse_retry,
        errors={**_job_errors(), "not_retryable": NotRetryable},
        headers={"Idempotency-Key": idempotency_key or operation_key()},
    )


def redrive(
    namespace: str,
    queue: str,
    *,
    states: list[str] | None = None,
    limit: int | None = None,
    idempotency_key: str | None = None,
) -> Call[RedriveAnswer]:
    """Retry up to `limit` ended jobs of the queue. Safe to retry: its Idempotency-Key (a
    fresh one unless given) gives a repeat the first answer, never `limit` more jobs."""
    body: dict[str, Any] = {}
    if states:
        body["states"] = list(states)
    if limit is not None:
        body["limit"] = limit
    return Call(
        "POST",
        ns_path(namespace, f"/queues/{queue}/redrive"),
        f"redrive queue {queue}",
        parse_redrive,
        json=body,
        headers={"Idempotency-Key": idempotency_key or operation_key()},
    )


def purge(namespace: str, queue: str, *, idempotency_key: str | None = None) -> Call[PurgeAnswer]:
    """Cancel the queue's queued jobs; with an Idempotency-Key, so a repeat answers the count
    the first one cancelled."""
    return Call(
        "POST",
        ns_path(namespace, f"/queues/{queue}/purge"),
        f"purge queue {queue}",
        parse_purge,
        headers={"Idempotency-Key": idempotency_key or operation_key()},
    )


def cancel_job(
    namespace: str, job_id: str, *, idempotency_key: str | None = None
) -> Call[CancelAnswer]:
    """Cancel a queued job (200) or ask its daemon to stop a running one (202); a finished job
    is `ConflictError`. With an Idempotency-Key, a repeat gets the first answer; from a control
    plane before it, a retry's 409 for a job now `cancelled` is the cancel done (the first
    attempt may have cancelled it and lost its answer)."""
    return Call(
        "DELETE",
        ns_path(namespace, f"/jobs/{job_id}"),
        f"cancel job {job_id}",
        parse_cancel(job_id),
        ok=frozenset({200, 202}),
        errors=_job_errors(),
        retried=cancelled_already(job_id),
        headers={"Idempotency-Key": idempotency_key or operation_key()},
    )


# -- the sync transport ------------------------------------------------------------------------


class Wire:
    """The control plane for one namespace and one token, over `httpx.Client`, with retries.

    Every method is one route; each answers a dataclass or raises a typed error
    (`payloadstore.errors`).
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.endpoint = endpoint.rstrip("/")
        self.namespace = namespace
        self._token = token
        self._owns_http = http is None
        self.http = http or httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        )
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        #: called when the control plane refuses on a limit (the client's config is stale then)
        self.on_limit_refused: Callable[[], None] | None = None

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __repr__(self) -> str:
        return f"Wire(endpoint={self.endpoint!r}, namespace={self.namespace!r})"

    def send(self, call: Call[T]) -> T:
        """Send with retries; return the parsed answer, or raise the typed error."""
        kwargs = http_kwargs(call, self.endpoint, self._token)
        attempt = 0
        while True:
            try:
                response = self.http.request(**kwargs)
            except httpx.TransportError as e:
                delay = retry_delay(self.retry, attempt, error=e)
                if delay is None:
                    raise unreachable(call, self.endpoint, e) from e
                log.warning(
                    "retrying what=%s error=%s attempt=%d delay_s=%.2f",
                    call.what,
                    type(e).__name__,
                    attempt + 1,
                    delay,
                )
            else:
                if response.status_code in call.ok:
                    return call.parse(response)
                delay = retry_delay(self.retry, attempt, response=response)
                if delay is None:
                    answer = retried_answer(call, attempt, response)
                    if answer is not None:
                        return answer
                    if self.on_limit_refused is not None and refused_on_a_limit(response):
                        self.on_limit_refused()
                    raise_error(call, response)
                log.warning(
                    "retrying what=%s status=%d attempt=%d delay_s=%.2f",
                    call.what,
                    response.status_code,
                    attempt + 1,
                    delay,
                )
            self._sleep(delay)
            attempt += 1

    # -- one method per route ------------------------------------------------------------------

    def config(self) -> ServerConfig:
        return self.send(config())

    def health(self, details: bool = False) -> Health:
        return self.send(health(details))

    def presign_put(
        self,
        *,
        size: int,
        kind: str,
        sha256: str | None,
        content_type: str = MSGPACK,
        job_id: str | None = None,
        lease: str | None = None,
        crc64nvme: str | None = None,
        checksum_algorithm: str | None = None,
    ) -> UploadGrant:
        return self.send(
            presign_put(
                self.namespace,
                size=size,
                kind=kind,
                sha256=sha256,
                content_type=content_type,
                job_id=job_id,
                lease=lease,
                crc64nvme=crc64nvme,
                checksum_algorithm=checksum_algorithm,
            )
        )

    def presign_get(self, key: str, *, job_id: str | None = None) -> DownloadGrant:
        return self.send(presign_get(self.namespace, key, job_id=job_id))

    def presign_parts(
        self, job_id: str, kind: str, parts: list[dict], *, lease: str | None = None
    ) -> dict:
        return self.send(presign_parts(self.namespace, job_id, kind, parts, lease=lease))

    def enqueue_inline(
        self,
        queue: str,
        data: bytes,
        *,
        idempotency_key: str,
        blobs: tuple[str, ...] = (),
        wait_s: float | None = None,
    ) -> Enqueued:
        return self.send(
            enqueue_inline(
                self.namespace,
                queue,
                data,
                idempotency_key=idempotency_key,
                blobs=blobs,
                wait_s=wait_s,
            )
        )

    def enqueue_ref(
        self,
        queue: str,
        ref: PayloadRef,
        *,
        blobs: tuple[str, ...] = (),
        wait_s: float | None = None,
    ) -> Enqueued:
        return self.send(enqueue_ref(self.namespace, queue, ref, blobs=blobs, wait_s=wait_s))

    def blob(
        self,
        sha256: str,
        size: int,
        *,
        checksum_algorithm: str | None = None,
        crc64nvme: str | None = None,
    ) -> dict[str, Any]:
        return self.send(
            blob(
                self.namespace,
                sha256,
                size,
                checksum_algorithm=checksum_algorithm,
                crc64nvme=crc64nvme,
            )
        )

    def blob_parts(self, sha256: str, parts: list[dict]) -> dict:
        return self.send(blob_parts(self.namespace, sha256, parts))

    def job_status(self, job_id: str) -> JobStatus:
        return self.send(job_status(self.namespace, job_id))

    def job_result(self, job_id: str, *, wait_s: float) -> ResultAnswer:
        return self.send(job_result(self.namespace, job_id, wait_s=wait_s))

    def enqueue_batch(
        self, queue: str, items: list[BatchItem], *, wait_s: float | None = None
    ) -> list[Enqueued | ItemRefused]:
        return self.send(enqueue_batch(self.namespace, queue, items, wait_s=wait_s))

    def jobs_status(
        self, job_ids: list[str], *, wait_s: float = 0.0
    ) -> list[JobStatus | ItemRefused]:
        return self.send(jobs_status(self.namespace, job_ids, wait_s=wait_s))

    def queue_list(self) -> list[QueueInfo]:
        """Every queue of the namespace, page after page."""
        return all_pages(
            self.send(queue_list(self.namespace)),
            lambda after: self.send(queue_list(self.namespace, after)),
        )

    def queue_stats(self, queue: str) -> QueueInfo:
        return self.send(queue_stats(self.namespace, queue))

    @overload
    def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: None = None
    ) -> PolledJob | None: ...
    @overload
    def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int
    ) -> list[PolledJob]: ...
    def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int | None = None
    ) -> PolledJob | None | list[PolledJob]:
        if max_jobs is None:
            return self.send(poll(self.namespace, queues, wait_s=wait_s, daemon_id=daemon_id))
        return self.send(
            poll(self.namespace, queues, wait_s=wait_s, daemon_id=daemon_id, max_jobs=max_jobs)
        )

    def post_result(
        self,
        job_id: str,
        *,
        inline: bytes | None = None,
        ref: PayloadRef | None = None,
        error: Mapping[str, Any] | None = None,
        lease: str | None = None,
        blobs: tuple[str, ...] = (),
        next: NextJobs | None = None,
    ) -> list[PolledJob] | None:
        return self.send(
            post_result(
                self.namespace,
                job_id,
                inline=inline,
                ref=ref,
                error=error,
                lease=lease,
                blobs=blobs,
                next=next,
            )
        )

    def report_failure(
        self,
        job_id: str,
        *,
        state: str,
        detail: str,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
        lease: str | None = None,
        next: NextJobs | None = None,
        expected_crc64nvme: str | None = None,
        actual_crc64nvme: str | None = None,
    ) -> list[PolledJob] | None:
        return self.send(
            report_failure(
                self.namespace,
                job_id,
                state=state,
                detail=detail,
                expected_sha256=expected_sha256,
                actual_sha256=actual_sha256,
                lease=lease,
                next=next,
                expected_crc64nvme=expected_crc64nvme,
                actual_crc64nvme=actual_crc64nvme,
            )
        )

    def heartbeat(self, job_id: str, lease: str) -> HeartbeatAnswer:
        return self.send(heartbeat(self.namespace, job_id, lease))

    def leases(self, daemon_id: str, held: Mapping[str, str], *, wait_s: float) -> LeasesAnswer:
        return self.send(leases(self.namespace, daemon_id, held, wait_s=wait_s))

    def cancel_job(self, job_id: str) -> CancelAnswer:
        return self.send(cancel_job(self.namespace, job_id))

    def list_jobs(
        self, queue: str, *, state: str = "queued", limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        return self.send(list_jobs(self.namespace, queue, state=state, limit=limit, cursor=cursor))

    def retry_job(self, job_id: str) -> RetryAnswer:
        return self.send(retry_job(self.namespace, job_id))

    def throughput(self, queue: str | None = None) -> Throughput:
        return self.send(throughput(self.namespace, queue))

    def job_payloads(self, job_id: str) -> JobPayloads:
        return self.send(job_payloads(self.namespace, job_id))

    def redrive(
        self, queue: str, *, states: list[str] | None = None, limit: int | None = None
    ) -> RedriveAnswer:
        return self.send(redrive(self.namespace, queue, states=states, limit=limit))

    def purge(self, queue: str) -> PurgeAnswer:
        return self.send(purge(self.namespace, queue))
