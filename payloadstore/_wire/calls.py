"""The v1 wire's routes: one builder per route returning a `Call` (method, path, query, JSON
or raw body, headers such as Idempotency-Key, answer statuses, error mapping, parser), and the
conversations of more than one call (every page of the queue list). Nothing here does I/O."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping
from typing import Any, overload

from ..errors import (
    JobNotFound,
    NotRetryable,
    PayloadConsumed,
    PayloadLost,
    QueueNotFound,
)
from .answers import (
    MAX_POLL_JOBS,
    MSGPACK,
    BatchItem,
    CancelAnswer,
    DownloadGrant,
    Enqueued,
    Health,
    HeartbeatAnswer,
    ItemRefused,
    JobPage,
    JobPayloads,
    JobStatus,
    LeasesAnswer,
    NextJobs,
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
from .parse import (
    Call,
    Conversation,
    ErrorFactory,
    QueuePage,
    cancelled_already,
    parse_batch,
    parse_blob,
    parse_cancel,
    parse_config,
    parse_download_grant,
    parse_enqueued,
    parse_health,
    parse_heartbeat,
    parse_job_page,
    parse_job_payloads,
    parse_job_status,
    parse_json_object,
    parse_leases,
    parse_next_jobs,
    parse_polled,
    parse_polled_many,
    parse_purge,
    parse_queue_list,
    parse_queue_stats,
    parse_redrive,
    parse_result,
    parse_retry,
    parse_statuses,
    parse_throughput,
    parse_upload_grant,
)

log = logging.getLogger("payloadstore")


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


def all_queues(namespace: str) -> Conversation[list[QueueInfo]]:
    """Every queue of the namespace: the first page, then each next one until the last."""
    page = yield queue_list(namespace)
    found = list(page)
    while page.next_after:
        page = yield queue_list(namespace, page.next_after)
        found += page
    return found


def queue_stats(namespace: str, queue: str) -> Call[QueueInfo]:
    return Call(
        "GET",
        ns_path(namespace, f"/queues/{queue}"),
        f"queue {queue}",
        parse_queue_stats,
        errors={"not_found": QueueNotFound, 404: QueueNotFound},
    )


# The most deliveries one poll may ask for (`max_jobs`, 1..16).


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
    if blobs:
        body["blobs"] = list(blobs)
    return _delivery_post(
        namespace, job_id, "result", f"post result of job {job_id}", body, lease, next
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
    if expected_sha256:
        body["expected_sha256"] = expected_sha256
    if actual_sha256:
        body["actual_sha256"] = actual_sha256
    if expected_crc64nvme:
        body["expected_crc64nvme"] = expected_crc64nvme
    if actual_crc64nvme:
        body["actual_crc64nvme"] = actual_crc64nvme
    return _delivery_post(
        namespace, job_id, "failure", f"report {state} for job {job_id}", body, lease, next
    )


def _delivery_post(
    namespace: str,
    job_id: str,
    route: str,
    what: str,
    body: dict[str, Any],
    lease: str | None,
    next: NextJobs | None,
) -> Call[list[PolledJob] | None]:
    """A delivery's post (its result or its failure report): the lease and `next` in the body,
    the next deliveries (or None) as the answer, and a wait as long as `next` asks for."""
    if lease is not None:
        body["lease"] = lease
    if next is not None:
        body["next"] = next.to_wire()
    return Call(
        "POST",
        ns_path(namespace, f"/jobs/{job_id}/{route}"),
        what,
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
