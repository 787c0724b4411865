"""Enqueue: inline bytes into the queue stream, or an S3 reference the CP issued and verified."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models.domain import NAME_RE, JobStatus, PayloadKind, PayloadRef, Tier, new_job_id
from ..models.errors import Conflict, PayloadTooLarge, Unprocessable
from ..models.wire import EnqueueResponse
from ..observability import bind_job, logger, metrics_bytes, metrics_count
from ..store.redis_jobs import dumps
from .context import Deps, Principal
from .payload_keys import parse_key
from .verify import verify_uploaded

# A second enqueue of the same job waits this long for the first to finish before taking over.
ENQUEUE_STALE_MS = 10_000
IDEMPOTENCY_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class Enqueued:
    response: EnqueueResponse
    created: bool  # 201 when created, 200 for a repeat of an earlier enqueue


def validate_queue_name(queue: str) -> None:
    if not NAME_RE.match(queue):
        raise Unprocessable(f"invalid queue name {queue!r}: use [A-Za-z0-9_.-], 1-63 chars")


def enqueue(
    p: Principal,
    queue: str,
    *,
    payload_ref: PayloadRef | None,
    payload_inline: bytes | None,
    idempotency_key: str | None,
    deps: Deps,
) -> Enqueued:
    validate_queue_name(queue)
    if (payload_ref is None) == (payload_inline is None):
        raise Unprocessable("give exactly one of payloadRef or payloadInline")
    if payload_inline is not None:
        return _enqueue_inline(p, queue, payload_inline, idempotency_key, deps)
    return _enqueue_ref(p, queue, payload_ref, deps)


def _enqueue_inline(
    p: Principal, queue: str, data: bytes, idem: str | None, deps: Deps
) -> Enqueued:
    threshold = deps.settings.inline_threshold
    if len(data) > threshold:
        raise PayloadTooLarge(
            f"inline payload of {len(data)} bytes exceeds INLINE_THRESHOLD={threshold}; "
            "upload it with presign and enqueue the payloadRef",
            inline_threshold=threshold,
        )
    if idem is not None and not IDEMPOTENCY_KEY_RE.match(idem):
        raise Unprocessable("invalid Idempotency-Key: use [A-Za-z0-9_.-], 1-128 chars")
    now = deps.clock()
    job_id = new_job_id(int(now * 1000))
    if idem:
        existing = deps.jobs.claim_idempotency_key(p.namespace, idem, job_id)
        if existing:
            job = deps.jobs.get_job(existing)
            if job is not None and job.get("queue") != queue:
                raise Conflict(
                    f"Idempotency-Key already used for a job on queue {job.get('queue')}"
                )
            job_id = existing  # finish (or repeat) the earlier request's enqueue
    bind_job(job_id)
    fields = _job_fields(p, queue, Tier.INLINE, now, payload_size=len(data))
    return _append(p, queue, job_id, fields, deps, inline=data, ref_json=None, tier=Tier.INLINE)


def _enqueue_ref(p: Principal, queue: str, ref: PayloadRef, deps: Deps) -> Enqueued:
    parsed = parse_key(ref.key)
    if parsed is None or parsed[1] is not PayloadKind.ARGS:
        raise Conflict("payloadRef.key was not issued to this namespace as an args key")
    job_id = parsed[0]
    bind_job(job_id)
    issued = deps.jobs.get_issue(job_id, PayloadKind.ARGS)
    if issued is None or issued.namespace != p.namespace:
        raise Conflict("payloadRef.key was not issued to this namespace as an args key")

    existing = deps.jobs.get_job(job_id)
    if existing is not None and existing.get("stream_id"):
        if existing.get("queue") != queue:
            raise Conflict(f"job {job_id} is already enqueued on queue {existing.get('queue')}")
        return Enqueued(EnqueueResponse(job_id=job_id, tier=Tier.S3), created=False)

    verify_uploaded(ref, issued, deps)
    stored_ref = PayloadRef(
        kind="s3",
        bucket=issued.bucket,
        key=issued.key,
        size=issued.size,
        contentType=issued.content_type,
        sha256=issued.sha256,
    )
    fields = _job_fields(p, queue, Tier.S3, deps.clock(), payload_size=issued.size)
    ref_json = dumps(stored_ref.model_dump(exclude_none=True))
    fields["payload_ref"] = ref_json
    return _append(p, queue, job_id, fields, deps, inline=None, ref_json=ref_json, tier=Tier.S3)


def _job_fields(p: Principal, queue: str, tier: Tier, now: float, payload_size: int) -> dict:
    return {
        "namespace": p.namespace,
        "queue": queue,
        "state": JobStatus.QUEUED.value,
        "tier": tier.value,
        "attempts": 0,
        "payload_size": payload_size,
        "created_at": repr(now),
        "updated_at": repr(now),
    }


def _append(
    p: Principal,
    queue: str,
    job_id: str,
    fields: dict,
    deps: Deps,
    *,
    inline: bytes | None,
    ref_json: str | None,
    tier: Tier,
) -> Enqueued:
    now = deps.clock()
    outcome = deps.jobs.begin_enqueue(job_id, fields, int(now * 1000), ENQUEUE_STALE_MS)
    if outcome.status in ("exists", "busy"):
        job = deps.jobs.get_job(job_id) or {}
        if job.get("queue") not in (None, queue):
            raise Conflict(f"job {job_id} is already enqueued on queue {job.get('queue')}")
        return Enqueued(EnqueueResponse(job_id=job_id, tier=tier), created=False)
    min_id_ms = int((now - deps.settings.retention_s) * 1000)
    deps.jobs.append_to_queue(
        p.namespace, queue, job_id, inline=inline, ref_json=ref_json, min_id_ms=max(min_id_ms, 0)
    )
    size = int(fields["payload_size"])
    metrics_count("JobsEnqueued", tier=tier.value)
    metrics_bytes("PayloadBytes", size, tier=tier.value, kind="args")
    logger.info("job enqueued", extra={"queue": queue, "tier": tier.value, "size": size})
    return Enqueued(EnqueueResponse(job_id=job_id, tier=tier), created=outcome.status == "created")
