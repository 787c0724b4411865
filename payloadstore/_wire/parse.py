"""A call of the v1 wire, described (`Call`), and how its answer is read: the parsers (status
and JSON -> typed answer) and the error mapping (error code, route, status -> typed error).
Nothing here does I/O."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

import httpx

from .._http import error_body, error_details
from ..errors import (
    ApiError,
    AuthError,
    ConflictError,
    InlineNever,
    InlineUnavailable,
    InvalidRequest,
    LeaseMismatch,
    PayloadConsumed,
    PayloadTooLarge,
    PolicyMismatch,
    ServiceUnavailable,
)
from .answers import (
    TERMINAL_STATES,
    CancelAnswer,
    DownloadGrant,
    Enqueued,
    Health,
    HeartbeatAnswer,
    ItemRefused,
    JobInfo,
    JobPage,
    JobPayloads,
    JobStatus,
    LeasesAnswer,
    NamespacePolicy,
    PayloadRef,
    PolledJob,
    PurgeAnswer,
    QueueInfo,
    RedriveAnswer,
    ResultAnswer,
    RetryAnswer,
    ServerConfig,
    Throughput,
    UploadGrant,
)

log = logging.getLogger("payloadstore")

T = TypeVar("T")
# The connect timeout of every control-plane request; read timeouts are per call.
CONNECT_TIMEOUT_S = 10.0

# An error factory is called as factory(text, status=..., code=...).
ErrorFactory = Callable[..., Exception]

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


# Calls in a row whose next depends on the last answer (e.g. every page of a list): a generator
# that yields each `Call`, is sent its answer (or thrown its typed error), and returns the
# whole answer. A transport runs it as it runs one call.
Conversation = Generator[Call[Any], Any, T]


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


def parse_blob(response: httpx.Response) -> dict[str, Any]:
    return _json(response)


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
