"""Daemon side: poll (with redelivery after the visibility timeout), result post, failure report."""

from __future__ import annotations

import base64

from ..models.domain import JobStatus, PayloadKind
from ..models.errors import Conflict, Forbidden, NotFound, PayloadTooLarge, Unprocessable
from ..models.settings import PayloadLostPolicy
from ..models.wire import FailureReport, PollRequest, PollResponse, ResultPost
from ..observability import bind_job, logger, metrics_bytes, metrics_count
from ..store import keys
from ..store.redis_jobs import digest, dumps
from .context import Deps, Principal, issue_record, load_job, payload_ref
from .downloads import download_for
from .guard import refuse_inline
from .payload_keys import parse_key
from .verify import verify_uploaded

# Entries whose job vanished or already ended are dropped; bound how many one poll may skip.
MAX_SKIPPED_ENTRIES = 32


def _entry_ms(stream_id: str) -> int:
    return int(stream_id.split("-", 1)[0])


def poll(p: Principal, req: PollRequest, deps: Deps) -> PollResponse | None:
    if req.namespace != p.namespace:
        raise Forbidden("token does not belong to this namespace")
    s = deps.settings
    wait_s = min(req.wait_s, s.poll_max_wait_s)
    deadline = deps.clock() + wait_s
    min_idle_ms = s.visibility_timeout_s * 1000
    for _ in range(MAX_SKIPPED_ENTRIES):
        block_ms = max(int((deadline - deps.clock()) * 1000), 0)
        entry = deps.jobs.read_next(p.namespace, req.queues, req.daemon_id, block_ms, min_idle_ms)
        if entry is None:
            return None
        now_ms = int(deps.clock() * 1000)
        if not entry.job_id or now_ms - _entry_ms(entry.stream_id) > s.retention_s * 1000:
            outcome_status = "expired"
        else:
            delivery = deps.jobs.start_delivery(entry, p.namespace, now_ms)
            outcome_status = delivery.status
        if outcome_status != "ok":
            # The job expired, already ended, or this entry is a stale double of its entry:
            # never hand it out.
            deps.jobs.drop_entry(p.namespace, entry.queue, entry.stream_id)
            logger.info(
                "dropped stale entry", extra={"job_id": entry.job_id, "reason": outcome_status}
            )
            continue
        bind_job(entry.job_id)
        logger.info(
            "job delivered",
            extra={"queue": entry.queue, "attempt": delivery.attempt, "daemon_id": req.daemon_id},
        )
        metrics_count("JobsDelivered", redelivery=str(delivery.attempt > 1).lower())
        ref = payload_ref(entry.job_id, PayloadKind.ARGS, delivery.args, deps)
        ref = ref if entry.inline is None else None
        return PollResponse(
            job_id=entry.job_id,
            namespace=p.namespace,
            queue=entry.queue,
            attempt=delivery.attempt,
            payloadRef=ref,
            payloadInline=(
                base64.b64encode(entry.inline).decode("ascii") if entry.inline is not None else None
            ),
            download=download_for(ref, deps),
        )
    return None


def post_result(p: Principal, job_id: str, body: ResultPost, deps: Deps) -> None:
    forms = [body.resultRef is not None, body.resultInline is not None, body.error is not None]
    if sum(forms) != 1:
        raise Unprocessable("give exactly one of resultRef, resultInline or error")
    job = load_job(p, job_id, deps)

    done_value: bytes | str = b""
    if body.resultInline is not None:
        data = body.inline_bytes()
        if len(data) > deps.settings.inline_threshold:
            raise PayloadTooLarge(
                f"inline result of {len(data)} bytes exceeds INLINE_THRESHOLD="
                f"{deps.settings.inline_threshold}; upload it with presign kind=result",
                inline_threshold=deps.settings.inline_threshold,
            )
        result_digest = digest("inline", data)
        new_state, tier, size = JobStatus.SUCCEEDED, "inline", len(data)
        fields, done_value = {"rk": "i"}, data
    elif body.resultRef is not None:
        ref_json = dumps(body.resultRef.model_dump(exclude_none=True))
        result_digest = digest("ref", ref_json)
        new_state, tier, size = JobStatus.SUCCEEDED, "s3", body.resultRef.size
        fields = {"rk": "s"}
    else:
        error_json = dumps(body.error.model_dump(exclude_none=True))
        result_digest = digest("error", error_json)
        new_state, tier, size = JobStatus.FAILED, "error", 0
        fields, done_value = {"rk": "e"}, error_json

    state = job.state
    if state != JobStatus.RUNNING:
        # Idempotent repeat of the same post: no-op. Anything else cannot change the outcome.
        if state != JobStatus.QUEUED and job.fields.get("g") == result_digest:
            return
        raise Conflict(f"job {job_id} is {state}; it accepts no other result")

    if body.resultInline is not None:
        refuse_inline(deps, keys.job(job_id), "result")
    if body.resultRef is not None:
        parsed = parse_key(body.resultRef.key)
        if parsed != (job_id, PayloadKind.RESULT):
            raise Conflict("resultRef.key is not this job's issued result key")
        issued = issue_record(job, PayloadKind.RESULT, deps)
        if issued is None:
            raise Conflict("resultRef.key is not this job's issued result key")
        verify_uploaded(body.resultRef, issued, deps)

    now_ms = int(deps.clock() * 1000)
    outcome = deps.jobs.complete(job_id, new_state.value, result_digest, now_ms, done_value, fields)
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
    now_ms = int(deps.clock() * 1000)
    if report.state == "payload_corrupt":
        error = {
            "type": "PayloadCorrupt",
            "message": report.detail or "payload sha256 mismatch on download",
            "expected_sha256": report.expected_sha256 or (job.args.sha256 if job.args else None),
            "actual_sha256": report.actual_sha256,
        }
        error_json = dumps({k: v for k, v in error.items() if v is not None})
        outcome = deps.jobs.complete(
            job_id,
            JobStatus.PAYLOAD_CORRUPT.value,
            digest("corrupt", error_json),
            now_ms,
            error_json,
            {"rk": "e"},
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
        job_id, max_requeues, digest("lost", "payload_lost"), now_ms, error_json
    )
    metrics_count("PayloadLost")
    if outcome.status == "requeue":
        old_stream_id, queue = outcome.args
        entry = deps.jobs.read_entry(p.namespace, queue, old_stream_id) if old_stream_id else None
        min_id = max(now_ms - deps.settings.retention_s * 1000, 0)
        new_id = deps.jobs.append(
            p.namespace, queue, job_id, inline=entry.inline if entry else None, min_id_ms=min_id
        )
        # The new entry is the job's entry from now on; the old one is dropped (a delivery of
        # it before that is refused as stale).
        deps.jobs.record_entry(job_id, new_id, overwrite=True)
        deps.jobs.drop_entry(p.namespace, queue, old_stream_id)
        logger.warning("payload lost, job requeued", extra={"queue": queue})
        return
    if outcome.status == "terminal":
        logger.warning("payload lost, job failed")
    _settle(p, job_id, outcome, deps)
