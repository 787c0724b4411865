"""Retry policy and error-body reading shared by every transport of the SDK.

Pure functions only (no sockets): the sync transport (`_wire.Wire`), the S3 transfers
(`_transfer`) and an asyncio transport use the same policy and the same decisions.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx

# 502/503/504 are the gateway and Lambda's transient answers; 500 may be a cold-start crash.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Codes that waiting will not clear: the per-job presign cap, and a nearly full Redis refusing
# inline bytes (the SDK stores those through S3 at once instead of retrying).
NON_RETRYABLE_CODES = frozenset({"too_many_presigns", "inline_unavailable"})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter (sleep ~ U(0, min(cap, base * 2**n)))."""

    max_attempts: int = 5
    base_s: float = 0.2
    max_backoff_s: float = 5.0
    # A server's Retry-After is honoured up to this; beyond it we give up rather than hang.
    max_retry_after_s: float = 30.0

    def backoff(self, attempt: int, retry_after: float | None = None, rng=random.random) -> float:
        jittered = rng() * min(self.max_backoff_s, self.base_s * (2**attempt))
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s) + jittered * 0.1
        return jittered


def retry_after_seconds(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def error_body(response: httpx.Response) -> tuple[str | None, str]:
    """(code, message) from `{"error": {"code", "message"}}`, tolerant of other shapes."""
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        text = response.text.strip()
        return None, text[:300] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            code = err.get("code") or err.get("type")
            message = err.get("message") or err.get("detail") or body.get("message")
            return (str(code) if code else None), str(message or response.reason_phrase)
        if isinstance(err, str):
            return None, err
        if "message" in body:
            return None, str(body["message"])
    return None, response.reason_phrase


def error_details(response: httpx.Response) -> dict:
    """The error body's fields beyond code and message (e.g. `reason`, `state`), or {}."""
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        return {}
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return {}
    return {k: v for k, v in err.items() if k not in ("code", "message")}


def retry_delay(
    policy: RetryPolicy,
    attempt: int,
    *,
    response: httpx.Response | None = None,
    error: BaseException | None = None,
) -> float | None:
    """Seconds to wait before attempt `attempt + 1`, or None when this outcome is final.

    `attempt` counts from 0. A transport error is retried; so is an answer in RETRY_STATUSES
    unless its code is in NON_RETRYABLE_CODES; any other answer is final.
    """
    if attempt >= policy.max_attempts - 1:
        return None
    if error is not None:
        return policy.backoff(attempt)
    if response is None or response.status_code not in RETRY_STATUSES:
        return None
    if error_body(response)[0] in NON_RETRYABLE_CODES:
        return None
    return policy.backoff(attempt, retry_after_seconds(response))
