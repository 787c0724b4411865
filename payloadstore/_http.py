"""HTTP to the control plane: bearer auth, bounded retries with jittered backoff, typed errors."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from .errors import (
    ApiError,
    AuthError,
    ConflictError,
    InvalidRequest,
    JobNotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)

log = logging.getLogger("payloadstore")

# 502/503/504 are the gateway and Lambda's transient answers; 500 may be a cold-start crash.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
NON_RETRYABLE_CODES = frozenset({"too_many_presigns"})


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


def raise_for_api_status(response: httpx.Response, what: str) -> None:
    """Raise the typed error for an error response, chained from httpx's own error."""
    if response.status_code < 400:
        return
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as http_error:
        raise api_error(response, what) from http_error


def api_error(response: httpx.Response, what: str) -> ApiError:
    status = response.status_code
    code, message = error_body(response)
    text = f"{what}: {message} (HTTP {status})"
    kw: dict[str, Any] = {"status": status, "code": code}
    if status in (401, 403):
        return AuthError(text, **kw)
    if status == 404:
        return JobNotFound(text, **kw) if "job" in what else ApiError(text, **kw)
    if status == 409:
        return ConflictError(text, **kw)
    if status == 413:
        return PayloadTooLarge(text, **kw)
    if status in (400, 422):
        return InvalidRequest(text, **kw)
    if status == 429 or status >= 500:
        return ServiceUnavailable(text, **kw)
    return ApiError(text, **kw)


class ApiSession:
    """The control plane's HTTP client. Retries only what is safe to repeat: every write the SDK
    makes is idempotent on the server (idempotency keys, issued keys, same-result posts)."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        http: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self._owns_http = http is None
        self.http = http or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self.retry = retry or RetryPolicy()
        self._sleep = sleep

    @staticmethod
    def _final(response: httpx.Response) -> bool:
        """A 429 for the per-job presign cap will not clear by waiting (gateway throttles will)."""
        return response.status_code == 429 and error_body(response)[0] in NON_RETRYABLE_CODES

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        auth: bool = True,
        ok: tuple[int, ...] = (200, 201, 202, 204),
    ) -> httpx.Response:
        """Send with retries; return a response whose status is in `ok`, or raise a typed error."""
        url = self.endpoint + path
        send_headers = dict(headers or {})
        if auth:
            send_headers["Authorization"] = f"Bearer {self._token}"
        kwargs: dict[str, Any] = {"headers": send_headers, "params": params}
        if json_body is not None:
            kwargs["json"] = json_body
        if content is not None:
            kwargs["content"] = content
        if timeout_s is not None:
            kwargs["timeout"] = httpx.Timeout(timeout_s, connect=10.0)
        attempts = self.retry.max_attempts
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self.http.request(method, url, **kwargs)
            except httpx.TransportError as e:
                if last:
                    raise ServiceUnavailable(
                        f"{what}: cannot reach the control plane at {self.endpoint}: {e!r}"
                    ) from e
                delay = self.retry.backoff(attempt)
                log.warning(
                    "retrying what=%s error=%s attempt=%d delay_s=%.2f",
                    what,
                    type(e).__name__,
                    attempt + 1,
                    delay,
                )
                self._sleep(delay)
                continue
            if response.status_code in ok:
                return response
            if response.status_code in RETRY_STATUSES and not last and not self._final(response):
                delay = self.retry.backoff(attempt, retry_after_seconds(response))
                log.warning(
                    "retrying what=%s status=%d attempt=%d delay_s=%.2f",
                    what,
                    response.status_code,
                    attempt + 1,
                    delay,
                )
                self._sleep(delay)
                continue
            raise_for_api_status(response, what)
            # A status outside `ok` that is not an error (e.g. an unexpected 3xx).
            raise ApiError(
                f"{what}: unexpected HTTP {response.status_code}", status=response.status_code
            )
        raise AssertionError("unreachable")  # pragma: no cover
