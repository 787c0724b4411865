"""Typed errors of the SDK, daemon helper and CLI.

Every error raised because of an HTTP answer is chained `from` the `httpx.HTTPStatusError`
(or the transport error) that caused it, so the raw response stays one `__cause__` away.
"""

from __future__ import annotations


class PayloadStoreError(Exception):
    """Base of every error this package raises on purpose."""

    #: process exit code the CLI uses for this kind of error
    exit_code = 1


class ConfigError(PayloadStoreError):
    """The client is missing its endpoint, token or namespace, or the devstack file is unusable."""

    exit_code = 2


class ApiError(PayloadStoreError):
    """The control plane answered with an error status (after retries, where retrying applies)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        #: the error body's fields beyond code and message (e.g. `reason`, `state`)
        self.details: dict = {}


class AuthError(ApiError):
    """401/403: the token is missing, unknown, revoked, of the wrong role or of another namespace."""

    exit_code = 3


class JobNotFound(ApiError):
    """404 for a job id: never created, expired after RESULT_TTL_S, or of another namespace."""

    exit_code = 4


class QueueNotFound(ApiError):
    """404 for a queue name the namespace has never enqueued to."""

    exit_code = 4


class PayloadTooLarge(ApiError):
    """The encoded payload is over MAX_PAYLOAD_BYTES (or an inline body over the threshold)."""

    exit_code = 6

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None, **kw):
        super().__init__(message, **kw)
        self.size = size
        self.limit = limit


class ConflictError(ApiError):
    """409: the reference was refused (not issued, not uploaded, size or checksum mismatch) or a
    different result was already posted."""


class BlobSourceGone(ConflictError):
    """409 `unknown_blob` the SDK could not recover from by itself: a blob this process sent
    before expired from the namespace, and the file it was made from is gone or changed (or it
    was received, not made here, and is not in the host's blob cache). Make the `Blob` again
    (`client.blob(...)`) from the content."""


class LeaseMismatch(ConflictError):
    """409 `lease_mismatch`: the delivery's lease is no longer current (the job was delivered
    again after its lease ran out, finished, or cancelled): the job was taken from this daemon."""


class InlineNever(ConflictError):
    """409 `inline_never`: the namespace's policy keeps nothing in Redis, so inline payloads and
    results are refused. The SDK learns the policy from `/v1/config` and uploads every payload
    and result; should the policy change while a client runs, `Queue.add`/`submit` and the
    daemon's result post send the bytes through S3 on this answer."""


# Answer codes of an inline payload or result refused: the SDK sends the bytes through S3.
INLINE_REFUSED = frozenset({"inline_unavailable", "inline_never"})


class PolicyMismatch(ConflictError):
    """409 `policy_mismatch`: the uploaded object lacks the namespace's retention tag or KMS
    key (the policy changed between presign and enqueue): presign and upload again."""


class NotRetryable(ConflictError):
    """409 `not_retryable`: a retry of a job that is not failed or cancelled, or whose arguments
    are past the retention, or that references a blob expired from the namespace. `reason`:
    succeeded, queued, running, arguments_expired or blob_expired (`blobs` names them)."""

    @property
    def reason(self) -> str | None:
        return self.details.get("reason")

    @property
    def state(self) -> str | None:
        return self.details.get("state")


class InvalidRequest(ApiError):
    """400/422: the control plane refused the request's shape; the message says why."""


class ServiceUnavailable(ApiError):
    """The control plane or S3 stayed unreachable, overloaded (429) or failing (5xx) through
    every retry, or /v1/health reports a failing check."""

    exit_code = 7

    def __init__(self, message: str, *, checks: dict | None = None, **kw):
        super().__init__(message, **kw)
        self.checks = checks or {}


class InlineUnavailable(ServiceUnavailable):
    """503 `inline_unavailable`: Redis is above its high-water mark and refuses inline bytes.
    `Queue.add`/`submit` and the daemon's result post handle it themselves by storing the bytes
    through S3 and sending the reference; it reaches callers of the wire layer only."""


class EnqueueUnconfirmed(ServiceUnavailable):
    """The control plane never confirmed the enqueue (503 or no answer through every retry).

    The job may or may not exist. Calling `submit(..., idempotency_key=e.idempotency_key)` again
    gives back the same job if the earlier call created it, and creates it otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        queue: str,
        idempotency_key: str | None = None,
        job_id: str | None = None,
        **kw,
    ):
        super().__init__(message, **kw)
        self.queue = queue
        self.idempotency_key = idempotency_key
        self.job_id = job_id


class PayloadError(PayloadStoreError):
    """A stored payload (args or result) cannot be used."""

    exit_code = 8

    def __init__(self, message: str, *, job_id: str | None = None, key: str | None = None):
        super().__init__(message)
        self.message = message
        self.job_id = job_id
        self.key = key


class PayloadCorrupt(PayloadError):
    """The bytes read back do not match the checksum recorded when they were stored: the
    CRC64NVME (`expected_crc64nvme`/`actual_crc64nvme`, S3's base64) or, for a reference that
    carries one, the sha256 (`expected_sha256`/`actual_sha256`, hex)."""

    def __init__(
        self,
        message: str,
        *,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
        expected_crc64nvme: str | None = None,
        actual_crc64nvme: str | None = None,
        **kw,
    ):
        super().__init__(message, **kw)
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        self.expected_crc64nvme = expected_crc64nvme
        self.actual_crc64nvme = actual_crc64nvme


class PayloadLost(PayloadError):
    """The stored object is gone (S3 404, or past the 48 h retention)."""


class PayloadConsumed(PayloadLost):
    """410 `result_consumed` / `arguments_consumed`: the namespace's retention is `consume` and
    the payload was deleted on purpose: a result read once, whose grace (CONSUME_RESULT_GRACE_S,
    5 minutes by default) is over, or the arguments of a job that succeeded. Read a result
    within the grace, or keep it when you first read it. A `PayloadLost`, so code that handles
    a lost payload handles this one too."""

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        key: str | None = None,
        status: int | None = None,
        code: str | None = None,
    ):
        super().__init__(message, job_id=job_id, key=key)
        self.status = status
        self.code = code
        #: the error body's fields beyond code and message (`reason`, `deleted_at`)
        self.details: dict = {}

    @property
    def reason(self) -> str | None:
        """`result_consumed` or `arguments_consumed`."""
        return self.details.get("reason") or self.code

    @property
    def deleted_at(self) -> str | None:
        """When the object was deleted (ISO 8601, UTC)."""
        return self.details.get("deleted_at")


class JobFailed(PayloadStoreError):
    """The job's function raised on the daemon; carries the remote exception as reported."""

    def __init__(
        self,
        job_id: str,
        type: str,
        message: str,
        traceback: str | None = None,
        state: str = "failed",
    ):
        super().__init__(f"job {job_id} failed: {type}: {message}")
        self.job_id = job_id
        self.type = type
        self.message = message
        self.traceback = traceback
        self.state = state

    def __str__(self) -> str:
        text = super().__str__()
        if self.traceback:
            text += "\n\nremote traceback:\n" + self.traceback.rstrip()
        return text


class JobCancelled(PayloadStoreError):
    """The job was cancelled (`job.cancel()`, `payloadstore cancel`) before it produced a result."""

    def __init__(self, job_id: str, message: str = ""):
        text = f"job {job_id} was cancelled" + (f": {message}" if message else "")
        super().__init__(text)
        self.job_id = job_id
        self.message = text


class ResultTimeout(PayloadStoreError, TimeoutError):
    """`Job.result(timeout=...)` ran out of time while the job was still queued or running."""

    exit_code = 5

    def __init__(self, job_id: str, timeout: float, state: str | None, waited: float | None = None):
        # `waited`: the time measured since the call began (`call`'s enqueue included), which is
        # what the message states; `timeout` is what the caller asked for.
        self.waited = timeout if waited is None else waited
        super().__init__(f"job {job_id} still {state or 'pending'} after {self.waited:.1f}s")
        self.job_id = job_id
        self.timeout = timeout
        self.state = state


class TransferError(PayloadStoreError):
    """S3 refused a presigned upload or download for a reason retrying cannot fix."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class BatchError(PayloadStoreError):
    """`Queue.map`/`starmap` enqueued some items and not others.

    `jobs` has one entry per input item, in order: the Job, or None where the item was refused;
    `errors` maps each refused item's index to its typed error (e.g. PayloadTooLarge).
    """

    def __init__(self, message: str, *, jobs: list, errors: dict):
        super().__init__(message)
        self.message = message
        self.jobs = jobs
        self.errors = errors


class WaitTimeout(PayloadStoreError, TimeoutError):
    """`as_completed(jobs, timeout=...)` ran out of time with jobs still queued or running."""

    exit_code = 5

    def __init__(self, pending: list, timeout: float, waited: float | None = None):
        self.waited = timeout if waited is None else waited
        super().__init__(f"{len(pending)} jobs still pending after {self.waited:.1f}s")
        self.pending = pending
        self.timeout = timeout
