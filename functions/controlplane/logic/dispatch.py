"""Daemon side: poll (with redelivery after the visibility timeout), result post, failure report."""

from __future__ import annotations

import base64
import hashlib
import json

from ..models.domain import JobStatus, PayloadKind, PayloadRef
from ..models.errors import Conflict, Forbidden, NotFound, PayloadTooLarge, Unprocessable
from ..models.settings import PayloadLostPolicy
from ..models.wire import FailureReport, PollRequest, PollResponse, ResultPost
from ..observability import bind_job, logger, metrics_bytes, metrics_count
from ..store.redis_jobs import dumps
from .context import Deps, Principal, load_job
from .payload_keys import parse_key
from .verify import verify_uploaded

# Entries whose job vanished or already ended are dropped; bound how many one poll may skip.
MAX_SKIPPED_ENTRIES = 32


def poll(p: Principal, req: PollRequest, deps: Deps) -> PollResponse | None:
    if req.namespace != p.namespace:
        raise Forbidden("token does not belong to this namespace")
    s = deps.settings
    wait_s = min(req.wait_s, s.poll_max_wait_s)
    deadline = deps.clock() + wait_s
    min_idle_ms = s.visibility_timeout_s * 1000
    for _ in range(MAX_SKIPPED_ENTRIES):
        block_ms = max(int((deadline - deps.clock()) * 1000), 0)
        picked = deps.jobs.read_next(p.namespace, req.queues, req.daemon_id, block_ms, min_idle_ms)
        if picked is None:
            return None
        queue, stream_id, fields = picked
        job_id = _field(fields, "job")
        outcome = deps.jobs.start_delivery(job_id, stream_id, req.daemon_id, deps.clock())
        if outcome.status != "ok":
            # The job expired or already ended (e.g. a late redelivery): never hand it out.
            deps.jobs.drop_entry(p.namespace, queue, stream_id)
            logger.info("dropped stale entry", extra={"job_id": job_id, "reason": outcome.status})
            continue
        attempt = int(outcome.args[0])
        bind_job(job_id)
        logger.info(
            "job delivered", extra={"queue": queue, "attempt": attempt, "daemon_id": req.daemon_id}
        )
        metrics_count("JobsDelivered", redelivery=str(attempt > 1).lower())
        inline = fields.get(b"inline")
        ref = fields.get(b"ref")
        return PollResponse(
            job_id=job_id,
            namespace=p.namespace,
            queue=queue,
            attempt=attempt,
            payloadRef=PayloadRef.model_validate_json(ref) if ref is not None else None,
            payloadInline=base64.b64encode(inline).decode("ascii") if inline is not None else None,
        )
    return None


def _field(fields: dict, name: str) -> str:
    value = fields.get(name.encode()) if name.encode() in fields else fields.get(name)
    return value.decode() if isinstance(value, bytes) else value


def _digest(kind: str, payload: bytes | str) -> str:
    data = payload.encode() if isinstance(payload, str) else payload
    return kind + ":" + hashlib.sha256(data).hexdigest()


def post_result(p: Principal, job_id: str, body: ResultPost, deps: Deps) -> None:
    forms = [body.resultRef is not None, body.resultInline is not None, body.error is not None]
    if sum(forms) != 1:
        raise Unprocessable("give exactly one of resultRef, resultInline or error")
    job = load_job(p, job_id, deps)

    fields: dict = {}
    if body.resultInline is not None:
        data = body.inline_bytes()
        if len(data) > deps.settings.inline_threshold:
            raise PayloadTooLarge(
                f"inline result of {len(data)} bytes exceeds INLINE_THRESHOLD="
                f"{deps.settings.inline_threshold}; upload it with presign kind=result",
                inline_threshold=deps.settings.inline_threshold,
            )
        digest = _digest("inline", data)
        new_state, tier, size = JobStatus.SUCCEEDED, "inline", len(data)
        fields = {"result_kind": "inline", "result_inline": data, "result_size": size}
    elif body.resultRef is not None:
        ref_json = dumps(body.resultRef.model_dump(exclude_none=True))
        digest = _digest("ref", ref_json)
        new_state, tier, size = JobStatus.SUCCEEDED, "s3", body.resultRef.size
    else:
        error_json = dumps(body.error.model_dump(exclude_none=True))
        digest = _digest("error", error_json)
        new_state, tier, size = JobStatus.FAILED, "error", 0
        fields = {"result_kind": "error", "error": error_json}

    state = job.get("state")
    if state != JobStatus.RUNNING:
        # Idempotent repeat of the same post: no-op. Anything else cannot change the outcome.
        if state != JobStatus.QUEUED and job.get("result_digest") == digest:
            return
        raise Conflict(f"job {job_id} is {state}; it accepts no other result")

    if body.resultRef is not None:
        parsed = parse_key(body.resultRef.key)
        if parsed != (job_id, PayloadKind.RESULT):
            raise Conflict("resultRef.key is not this job's issued result key")
        issued = deps.jobs.get_issue(job_id, PayloadKind.RESULT)
        if issued is None or issued.namespace != p.namespace:
            raise Conflict("resultRef.key is not this job's issued result key")
        verify_uploaded(body.resultRef, issued, deps)
        stored = PayloadRef(
            kind="s3",
            bucket=issued.bucket,
            key=issued.key,
            size=issued.size,
            contentType=issued.content_type,
            sha256=issued.sha256,
        )
        fields = {
            "result_kind": "s3",
            "result_ref": dumps(stored.model_dump(exclude_none=True)),
            "result_size": issued.size,
        }

    outcome = deps.jobs.complete(job_id, new_state.value, digest, deps.clock(), fields)
    _settle(p, job_id, outcome, deps)
    metrics_count("JobsCompleted", state=new_state.value)
    if size:
        metrics_bytes("PayloadBytes", size, tier=tier, kind="result")
    logger.info("job completed", extra={"state": new_state.value, "result_tier": tier})


def _settle(p: Principal, job_id: str, outcome, deps: Deps) -> None:
    """Finish a state change in the namespace slot, or explain why it did not happen."""
    if outcome.status == "ok" or outcome.status == "terminal":
        stream_id, queue = outcome.args[0], outcome.args[1]
        deps.jobs.drop_entry(p.namespace, queue, stream_id)
    elif outcome.status == "same":
        return
    elif outcome.status == "missing":
        raise NotFound(f"job {job_id} not found")
    else:
        raise Conflict(
            f"job {job_id} is {outcome.args[0] if outcome.args else outcome.status}; "
            "it accepts no other result"
        )


def report_failure(p: Principal, job_id: str, report: FailureReport, deps: Deps) -> None:
    job = load_job(p, job_id, deps)
    now = deps.clock()
    if report.state == "payload_corrupt":
        error = {
            "type": "PayloadCorrupt",
            "message": report.detail or "payload sha256 mismatch on download",
            "expected_sha256": report.expected_sha256 or _expected_sha(job),
            "actual_sha256": report.actual_sha256,
        }
        error_json = dumps({k: v for k, v in error.items() if v is not None})
        outcome = deps.jobs.complete(
            job_id,
            JobStatus.PAYLOAD_CORRUPT.value,
            _digest("corrupt", error_json),
            now,
            {"result_kind": "error", "error": error_json},
        )
        if outcome.status == "ok":
            metrics_count("PayloadCorrupt")
            logger.error(
                "payload corrupt",
                extra={
                    "expected_sha256": error["expected_sha256"],
                    "actual_sha256": report.actual_sha256,
                },
            )
        _settle(p, job_id, outcome, deps)
        return

    error_json = dumps(
        {"type": "PayloadLost", "message": report.detail or "payload object not found"}
    )
    max_requeues = 1 if deps.settings.payload_lost_policy is PayloadLostPolicy.RETRY_ONCE else 0
    outcome = deps.jobs.payload_lost(
        job_id, max_requeues, _digest("lost", "payload_lost"), now, error_json
    )
    metrics_count("PayloadLost")
    if outcome.status == "requeue":
        old_stream_id, queue = outcome.args
        entry = deps.jobs.read_entry(p.namespace, queue, old_stream_id) if old_stream_id else None
        ref_json = job.get("payload_ref")
        inline = entry.get(b"inline") if entry else None
        deps.jobs.append_to_queue(
            p.namespace,
            queue,
            job_id,
            inline=inline,
            ref_json=None if inline is not None else ref_json,
            min_id_ms=max(int((now - deps.settings.retention_s) * 1000), 0),
        )
        deps.jobs.drop_entry(p.namespace, queue, old_stream_id)
        logger.warning("payload lost, job requeued", extra={"queue": queue})
        return
    if outcome.status == "terminal":
        logger.warning("payload lost, job failed")
    _settle(p, job_id, outcome, deps)


def _expected_sha(job: dict) -> str | None:
    ref = job.get("payload_ref")
    return json.loads(ref).get("sha256") if ref else None
