"""Domain errors. Each carries the HTTP status it maps to; `handlers/_resolver.py` (`new_resolver`)
is the one place that turns them into responses, so logic code never thinks about HTTP."""

from __future__ import annotations


class PayloadStoreError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None, **details):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}
        self.details = details


class BadRequest(PayloadStoreError):
    status, code = 400, "bad_request"


class Unauthorized(PayloadStoreError):
    status, code = 401, "unauthorized"


class Forbidden(PayloadStoreError):
    status, code = 403, "forbidden"


class NotFound(PayloadStoreError):
    status, code = 404, "not_found"


class Conflict(PayloadStoreError):
    status, code = 409, "conflict"


class LeaseMismatch(Conflict):
    """The lease is not the current delivery's: the job was redelivered, finished or cancelled."""

    code = "lease_mismatch"


class UnknownBlob(Conflict):
    """A job or a result names a blob its namespace does not have (never created, not yet
    verified, or expired)."""

    code = "unknown_blob"


class InlineNever(Conflict):
    """An inline payload or result for a namespace whose policy is inline `never`: every byte
    goes to S3 (presign, upload, send the reference)."""

    code = "inline_never"


class PolicyMismatch(Conflict):
    """An uploaded object without the namespace's retention tag or encryption key (its policy):
    not accepted, nothing written."""

    code = "policy_mismatch"


class Gone(PayloadStoreError):
    status, code = 410, "gone"


class ResultConsumed(Gone):
    """Retention `consume`: the result was read and its grace (CONSUME_RESULT_GRACE_S) is
    over, so its object is deleted: a re-read has nothing to download."""

    code = "result_consumed"


class ArgumentsConsumed(Gone):
    """Retention `consume`: the job succeeded and its arguments' object is deleted."""

    code = "arguments_consumed"


class PayloadTooLarge(PayloadStoreError):
    status, code = 413, "payload_too_large"


class Unprocessable(PayloadStoreError):
    status, code = 422, "invalid_request"


class TooManyPresigns(PayloadStoreError):
    status, code = 429, "too_many_presigns"


class UpstreamError(PayloadStoreError):
    """S3 answered with an error we cannot fix by retrying the same request."""

    status, code = 502, "storage_error"


class ServiceUnavailable(PayloadStoreError):
    """Redis or S3 unreachable: the client should retry later."""

    status, code = 503, "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 2, **details):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)}, **details)


class RedisMemoryFull(ServiceUnavailable):
    """Redis refused a write for lack of memory (or is past the hard mark): retry later."""

    code = "redis_memory_full"


class InlineUnavailable(ServiceUnavailable):
    """Redis is past its high-water mark: inline bytes are refused; send them through S3."""

    code = "inline_unavailable"


class ReplicationLag(ServiceUnavailable):
    """A write was applied on the primary but fewer replicas than REDIS_MIN_REPLICA_ACKS
    acknowledged it within REDIS_REPLICA_ACK_TIMEOUT_MS: it is not reported done, since a
    failover now could lose it. The write may have happened; every write is safe to re-send."""

    code = "redis_replication_lag"


class NotRetryable(Conflict):
    """A retry of a job that is not failed or cancelled, or whose arguments are no longer
    stored, or that references a blob its namespace no longer has; `reason` says which
    (succeeded, queued, running, arguments_expired, blob_expired with `blobs`)."""

    code = "not_retryable"
