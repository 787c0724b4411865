"""The one mapping of S3's and botocore's failures to the control plane's errors (503 to retry,
502 for a refusal), and the error codes callers settle themselves (a missing object)."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from ...models.errors import ServiceUnavailable, UpstreamError

# What S3 answers for an object that is not there (HEAD: a bare 404; GET: NoSuchKey).
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def error_code(e: ClientError) -> str:
    """S3's error code of a refused call ("" when it gave none)."""
    return e.response.get("Error", {}).get("Code") or ""


def is_not_found(e: ClientError) -> bool:
    """Whether S3 refused a call because the object is not there."""
    return error_code(e) in _NOT_FOUND_CODES


def storage_error(e: Exception, action: str) -> Exception:
    """503 (retry shortly) when S3 is unreachable or busy, else 502 naming what it refused."""
    if isinstance(e, (EndpointConnectionError, BotoCoreError)) and not isinstance(e, ClientError):
        return ServiceUnavailable(f"object storage unreachable during {action}; retry shortly")
    code = error_code(e) if isinstance(e, ClientError) else ""
    if code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"):
        return ServiceUnavailable(f"object storage busy during {action} ({code}); retry shortly")
    return UpstreamError(f"object storage refused {action}: {code or type(e).__name__}")


def head_denied(key: str) -> UpstreamError:
    """A HEAD answered 403: a grant is missing, never a client's fault. Without s3:ListBucket S3
    answers 403 for a key that is not there, so this names both grants it takes (see
    grants.py); with them, a missing key answers 404 and the caller says `not_uploaded`. (A 403
    on the signed fast path goes to the client like any unsettled answer: a signing fault of
    ours would be a 403 too, and the client's answer decides.)"""
    return UpstreamError(
        "object storage denied HEAD of the reference (403 AccessDenied): this function's role "
        "needs s3:GetObject on payloads/* and s3:ListBucket on the bucket",
        key=key,
    )


def brief(e: Exception) -> str:
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', 'error')}"
    return type(e).__name__
