"""Daemon side: poll (with redelivery after the visibility timeout), result post, failure report."""

from __future__ import annotations

import base64
import secrets
from functools import lru_cache

from ..models.api import FailureReport, NextPoll, PollRequest, PollResponse, ResultPost
from ..models.domain import JOB_ID_RE, JobStatus, PayloadKind
from ..models.errors import Conflict, Forbidden, NotFound, PayloadTooLarge, Unprocessable
from ..models.limits import AnswerBudget
from ..models.settings import PayloadLostPolicy
from ..observability import bind_job, logger, metrics_bytes, metrics_count
from ..store.records import (
    CancelledAtDelivery,
    Completed,
    Delivered,
    DeliveryLimit,
    Ended,
    EntryExpired,
    Leased,
    LeaseMismatch,
    LostForGood,
    Missing,
    Requeued,
    ResultForm,
    SamePost,
    dumps,
    post_digest,
)
from .blobs import check_referenced, packed, unpacked
from .blobs import downloads as blob_downloads
from .context import Deps, Principal, issue_record, load_job, payload_ref
from .downloads import download_for
from .guard import memory_state, refuse_inline
from .kept_errors import kept_error
from .lifecycle import CANCELLED_ERROR_TYPE, cancelled_error, lease_mismatch
from .payload_keys import key_for, parse_key
from .policy import keep_for_class, refuse_inline_never, schedule_consume
from .verify import verify_uploaded

# Entries whose job vanished or already ended are dropped; bound how many one poll may skip.
MAX_SKIPPED_ENTRIES = 32
# A poll looks for stale consumers of its queues at most this often (per container and queue).
PRUNE_EVERY_S = 60.0
DELIVERY_LIMIT_ERROR_TYPE = "DeliveryLimitExceeded"
# The states a retry takes a job out of (their inline args are kept when the job ends).
RETRYABLE_STATES = frozenset(
    {JobStatus.FAILED, JobStatus.PAYLOAD_LOST, JobStatus.PAYLOAD_CORRUPT, JobStatus.CANCELLED}
)


def new_lease() -> str:
    """An opaque, unguessable lease for one delivery (16 URL-safe characters)."""
    return secrets.token_urlsafe(12)


@lru_cache(maxsize=8)
def delivery_limit_error(max_deliveries: int) -> str:
    return dumps(
        {
            "type": DELIVERY_LIMIT_ERROR_TYPE,
            "message": f"delivered {max_deliveries} times (MAX_DELIVERIES) without a result: its "
            "daemon died or lost the job each time (crash, OOM kill, lease not kept alive)",
        }
    )


def _entry_ms(stream_id: str) -> int:
    return int(stream_id.split("-", 1)[0])


def poll(p: Principal, req: PollRequest, deps: Deps) -> PollResponse | None:
    """The next delivery (blocking up to wait_s while nothing is found), or None."""
    found = poll_many(p, req, deps, max_jobs=1)
    return found[0] if found else None


def poll_many(
    p: Principal,
    req: PollRequest,
    deps: Deps,
    max_jobs: int | None = None,
    found: list[PollResponse] | None = None,
    budget: AnswerBudget | None = None,
) -> list[PollResponse]:
    """Up to `max_jobs` (default req.max_jobs, else 1) deliveries, each with its own lease: the
    wait blocks only while nothing is found; once one is, up to max_jobs-1 more are taken without
    blocking. At most MAX_SKIPPED_ENTRIES stale entries are skipped per poll, as for one job.
    `found`: the list the deliveries are appended to as each is taken (a caller that must not
    lose them when a later step fails passes its own).
    `budget`: the answer's byte budget (models/limits.py; a new poll answer's by default): the
    first entry is taken whatever it weighs (one always fits), each later one only if its own
    inline bytes fit what is left (the store looks before it takes), so the answer stays under
    Lambda's 6 MB whatever INLINE_THRESHOLD was at its enqueue, and what does not fit stays
    queued, never leased."""
    if req.namespace != p.namespace:
        raise Forbidden("token does not belong to this namespace")
    deps.queues.remember_namespace(p.namespace)
    s = deps.settings
    want = max_jobs if max_jobs is not None else (req.max_jobs or 1)
    wait_s = min(req.wait_s, s.poll_max_wait_s)
    deadline = deps.clock() + wait_s
    min_idle_ms = s.visibility_timeout_s * 1000
    found = [] if found is None else found
    budget = budget or AnswerBudget()
    skipped = 0
    while skipped < MAX_SKIPPED_ENTRIES and len(found) < want:
        block_ms = 0 if found else max(int((deadline - deps.clock()) * 1000), 0)
        # The first delivery always fits; a later one only within what is left.
        room = budget.inline_room() if found else None
        if room is not None and room < 0:
            logger.info(
                "poll answer full",
                extra={"delivered": len(found), "answer_bytes": budget.used, "max_jobs": want},
            )
            break
        try:
            entry = deps.jobs.read_next(
                p.namespace, req.queues, req.daemon_id, block_ms, min_idle_ms, room=room
            )
            if entry is None:
                if not found:
                    _idle(p, req, deps)
                return found
            delivery = _deliver(p, req, entry, deps)
        except Exception as e:
            if not found:
                raise
            # The deliveries already taken are leased to this daemon: answer them. Refusing
            # the whole poll would hold each of them for VISIBILITY_TIMEOUT_S.
            logger.warning(
                "poll answers the deliveries taken before an error",
                extra={"delivered": len(found), "error": type(e).__name__},
            )
            return found
        if delivery is None:
            skipped += 1
        else:
            found.append(delivery)
            if len(found) < want:
                # Measured only when another entry may follow it: the answer's last delivery
                # (a max_jobs=1 poll's only one) is never weighed (a JSON dump of it, ~40 us).
                budget.charge(delivery)
    return found


def next_deliveries(p: Principal, nxt: NextPoll, wait_s: float, deps: Deps) -> list[PollResponse]:
    """The daemon's next deliveries after a result post or failure report whose own outcome is
    already stored (`next`, issue 34): a poll with max_jobs, blocking up to `wait_s` (the
    handler's cap). The post is done by now, so a failure here never turns it into an error:
    the deliveries taken before it are answered (each leased, so never dropped), and a fetch
    that failed before taking any answers none."""
    req = PollRequest(
        namespace=p.namespace,
        queues=nxt.queues,
        wait_s=wait_s,
        daemon_id=nxt.daemon_id or default_consumer(p),
        max_jobs=nxt.max_jobs,
    )
    found: list[PollResponse] = []
    try:
        poll_many(p, req, deps, found=found)
    except Exception:  # noqa: BLE001 - the post stands whatever the fetch met; logged, counted
        logger.exception(
            "next deliveries not taken after a stored post", extra={"found": len(found)}
        )
        metrics_count("NextFetchFailed")
    return found


def default_consumer(p: Principal) -> str:
    """The consumer name of a `next` without daemon_id: one per token (a daemon's own id is
    better: stale consumers are pruned by name)."""
    token = "".join(c for c in p.token_id if c.isalnum() or c in "_.:-")[:58]
    return f"token-{token}" if token else "daemon"


def _idle(p: Principal, req: PollRequest, deps: Deps) -> None:
    s = deps.settings
    every_s = min(PRUNE_EVERY_S, s.stale_consumer_idle_s)
    deps.jobs.prune_consumers(p.namespace, req.queues, s.stale_consumer_idle_s * 1000, every_s)
    # Queues left empty and unused that long go too (names included): a poll never
    # creates a queue, and the ones it finds idle do not stay forever.
    deps.jobs.collect_queues(
        p.namespace,
        req.queues,
        int(deps.clock() * 1000),
        s.stale_consumer_idle_s * 1000,
        every_s,
    )


def _deliver(p: Principal, req: PollRequest, entry, deps: Deps) -> PollResponse | None:
    """One entry read for this consumer started as a delivery, or None when it was skipped."""
    s = deps.settings
    now = deps.clock()
    now_ms = int(now * 1000)
    # The lease's expiry in whole ms, as stored (and as short on the wire).
    lease, lease_ms = new_lease(), int((now + s.visibility_timeout_s) * 1000)
    lease_expires = lease_ms / 1000
    if not entry.job_id or now_ms - _entry_ms(entry.stream_id) > s.retention_s * 1000:
        delivery: object = EntryExpired()
    else:
        delivery = deps.jobs.start_delivery(
            entry,
            p.namespace,
            now_ms,
            lease=lease,
            lease_expires_ms=lease_ms,
            consumer=req.daemon_id,
            max_deliveries=s.max_deliveries,
            limit_error=delivery_limit_error(s.max_deliveries),
            cancel_error=cancelled_error(),
        )
    match delivery:
        case Leased():
            # Its holder's heartbeats keep the lease alive: not ours, and not stale either.
            return None
        case DeliveryLimit(deliveries=deliveries):
            bind_job(entry.job_id)
            metrics_count("DeliveryLimitExceeded")
            logger.error(
                "delivery limit exceeded, job failed",
                extra={"queue": entry.queue, "deliveries": deliveries},
            )
        case CancelledAtDelivery():
            bind_job(entry.job_id)
            logger.info("job with a cancel requested ended cancelled instead of running again")
    if not isinstance(delivery, Delivered):
        # The job expired, already ended, or this entry is a stale double of its entry:
        # never hand it out.
        _drop_undelivered(p, entry, delivery, now_ms, deps, consumer=req.daemon_id)
        logger.info(
            "dropped stale entry",
            extra={"job_id": entry.job_id, "reason": type(delivery).__name__},
        )
        return None
    bind_job(entry.job_id)
    # A redelivery (its daemon died or lost the lease) is worth a line; a first delivery is
    # counted by JobsDelivered and its job's enqueue and completion lines tell its story: at
    # INFO it would be a third line per job (~0.6 KB, ~$0.27 of CloudWatch Logs per million
    # jobs, docs/cost.md), so it is DEBUG.
    log_delivery = logger.info if delivery.attempt > 1 else logger.debug
    log_delivery(
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
        lease=lease,
        lease_expires_at=lease_expires,
        lease_expires_in_s=float(s.visibility_timeout_s),
        payloadRef=ref,
        payloadInline=(
            base64.b64encode(entry.inline).decode("ascii") if entry.inline is not None else None
        ),
        download=download_for(ref, deps),
        blobs=blob_downloads(p.namespace, unpacked(entry.blobs), deps),
    )


def _drop_undelivered(
    p: Principal, entry, delivery, now_ms: int, deps: Deps, consumer: str = ""
) -> None:
    """Drop an entry that was not handed out; a job that ended here (delivery cap, cancel) is
    indexed, and a failed or cancelled job's inline args are kept for a retry."""
    state: JobStatus | None = None
    if isinstance(delivery, DeliveryLimit):
        state = JobStatus.FAILED
    elif isinstance(delivery, CancelledAtDelivery):
        state = JobStatus.CANCELLED
    ended = state or (JobStatus(delivery.state) if isinstance(delivery, Ended) else None)
    if ended is None or not ended.terminal:
        deps.jobs.drop_entry(p.namespace, entry.queue, entry.stream_id)
        return
    deps.jobs.settle(
        p.namespace,
        entry.queue,
        entry.job_id,
        entry.stream_id,
        state=state,
        retries=getattr(delivery, "retries", 0),
        now_ms=now_ms,
        keep_args=ended in RETRYABLE_STATES,
        consumer=consumer,
    )
    if state is not None:
        # Ended here (delivery cap, cancel): kept as long as a result post's end would be.
        # A delivery step: the poll reports no write done, so a lagging replica fails nothing.
        keep_for_class(p, entry.job_id, deps, lag_ok=True)


def _result_form(
    body: ResultPost, deps: Deps
) -> tuple[JobStatus, ResultForm, int, bytes | str, bytes]:
    """(new state, form, size, done value, digest) of a result post."""
    data = body.inline_bytes()
    if data is not None:
        if len(data) > deps.settings.inline_threshold:
            raise PayloadTooLarge(
                f"inline result of {len(data)} bytes exceeds INLINE_THRESHOLD="
                f"{deps.settings.inline_threshold}; upload it with presign kind=result",
                inline_threshold=deps.settings.inline_threshold,
            )
        return JobStatus.SUCCEEDED, "inline", len(data), data, post_digest("inline", data)
    if body.resultRef is not None:
        ref_json = dumps(body.resultRef.model_dump(exclude_none=True))
        return JobStatus.SUCCEEDED, "s3", body.resultRef.size, b"", post_digest("ref", ref_json)
    # post_result admits a post only with exactly one of the three forms: this is the error.
    assert body.error is not None
    error_json = dumps(body.error.model_dump(exclude_none=True))
    return JobStatus.FAILED, "error", 0, error_json, post_digest("error", error_json)


def post_result(p: Principal, job_id: str, body: ResultPost, deps: Deps) -> None:
    _check_forms(p, body)
    # 409 unknown_blob before anything is written; the blobs' need is recorded for the renewer.
    check_referenced(p.namespace, body.blobs, deps, result=True, policy=p.policy)
    if _post_at_once(p, job_id, body, deps):
        return
    job = load_job(p, job_id, deps)
    new_state, form, size, done_value, digest = _result_form(body, deps)

    if job.lease is not None and job.lease != body.lease:
        raise lease_mismatch(job_id, job.state)
    if job.state != JobStatus.RUNNING:
        # Idempotent repeat of the same post: no-op. Anything else cannot change the outcome.
        if job.state != JobStatus.QUEUED and job.accepted_post == digest:
            # The first post may have been answered 503 after it was stored (its marks
            # refused or not acknowledged): the repeat writes them again (idempotent).
            _retention_marks(p, job_id, JobStatus(job.state), deps)
            return
        raise Conflict(f"job {job_id} is {job.state}; it accepts no other result")

    if body.resultInline is not None:
        refuse_inline(deps, "result", job_id=job_id)
    if body.resultRef is not None:
        parsed = parse_key(body.resultRef.key)
        if parsed != (job_id, PayloadKind.RESULT):
            raise Conflict("resultRef.key is not this job's issued result key")
        issued = issue_record(job, PayloadKind.RESULT, deps)
        if issued is None:
            raise Conflict("resultRef.key is not this job's issued result key")
        verify_uploaded(body.resultRef, issued, deps, policy=p.policy)

    if form == "error":
        done_value = kept_error(p, job_id, str(done_value), deps)
    outcome = _complete(job_id, body, new_state, form, done_value, digest, deps)
    _settle(p, job_id, outcome, deps)
    _completed(outcome, new_state, form, size)
    _marks_of(p, job_id, outcome, deps)


def _marks_of(p: Principal, job_id: str, outcome: object, deps: Deps) -> None:
    """The retention marks of a post that ended the job, or of a repeat of that post (SamePost:
    the first one may have been answered 503 after its end was stored, before its marks)."""
    if isinstance(outcome, Completed):
        _retention_marks(p, job_id, outcome.state, deps)
    elif isinstance(outcome, SamePost) and outcome.state:
        _retention_marks(p, job_id, JobStatus(outcome.state), deps)


def _retention_marks(p: Principal, job_id: str, state: JobStatus, deps: Deps) -> None:
    """What the namespace's retention asks of a job that ended in `state`. Each mark is
    idempotent (a repeat writes the same time again) and acknowledged like the end itself
    (store/jobs/consume.py), so the post answers 204 only once they are stored."""
    _consume_args(p, job_id, state, deps)
    _keep_for_retention(p, job_id, state, deps)


def _keep_for_retention(p: Principal, job_id: str, state: JobStatus, deps: Deps) -> None:
    """Retention `7d`/`30d`: a finished job's record lives as long as its namespace keeps its
    payloads, so its status, result and downloads stay readable that long (Redis holds the
    record that much longer: docs/operations.md, "Namespace policies")."""
    if state.terminal and p.policy.outlives_records:
        deps.jobs.keep_finished_job(job_id, p.policy.retention_s, int(deps.clock() * 1000))


def _consume_args(p: Principal, job_id: str, state: JobStatus, deps: Deps) -> None:
    """Retention `consume`: a job that succeeded needs its arguments no more; they are deleted
    CONSUME_ARGS_GRACE_S from now (a failed job keeps them for the lifecycle's 2 days, so it
    can be retried). The key derives from the job id: an inline job's is simply not there."""
    if p.policy.consume and state is JobStatus.SUCCEEDED:
        schedule_consume(
            p.namespace,
            job_id,
            PayloadKind.ARGS,
            key_for(job_id, PayloadKind.ARGS),
            deps.settings.consume_args_grace_s,
            deps,
        )


def _check_forms(p: Principal, body: ResultPost) -> None:
    """422 unless exactly one result form is given; 409 inline_never for an inline result of a
    namespace whose policy keeps nothing in Redis."""
    forms = [body.resultRef is not None, body.resultInline is not None, body.error is not None]
    if sum(forms) != 1:
        raise Unprocessable("give exactly one of resultRef, resultInline or error")
    if body.resultInline is not None:
        refuse_inline_never(p, "result")


def _post_at_once(p: Principal, job_id: str, body: ResultPost, deps: Deps) -> bool:
    """An inline result or an error, in one script on the job's slot without reading the job
    first: the script itself checks the namespace, the lease and the state. True when that
    settled the post (done, or an idempotent repeat). Anything else (an S3 result, an inline
    result too large or refused by the memory guard, a refusal of the script) goes the step by
    step way, which answers exactly as it always has, in the same order."""
    if body.resultRef is not None or not JOB_ID_RE.match(job_id):
        return False
    if body.error is not None and p.policy.inline_never:
        # Its text goes to S3 before the end is stored: only once the job is known to be this
        # namespace's, running under this lease (step by step), so a refused post (another
        # namespace's job, none, a stale lease, an ended job) writes no object.
        return False
    data = body.inline_bytes()
    if data is not None and (
        len(data) > deps.settings.inline_threshold
        or memory_state(deps, job_id=job_id).inline_refused
    ):
        return False
    new_state, form, size, done_value, digest = _result_form(body, deps)
    outcome = _complete(
        job_id, body, new_state, form, done_value, digest, deps, namespace=p.namespace
    )
    if not isinstance(outcome, Completed | SamePost):
        return False
    bind_job(job_id)
    _settle(p, job_id, outcome, deps)
    if isinstance(outcome, Completed):
        _completed(outcome, new_state, form, size)
    _marks_of(p, job_id, outcome, deps)
    return True


def _complete(
    job_id: str,
    body: ResultPost,
    new_state: JobStatus,
    form: ResultForm,
    done_value: bytes | str,
    digest: bytes,
    deps: Deps,
    namespace: str = "",
):
    cancel_ack = body.error is not None and body.error.type == CANCELLED_ERROR_TYPE
    return deps.jobs.complete(
        job_id,
        new_state,
        digest,
        int(deps.clock() * 1000),
        done_value,
        form,
        lease=body.lease,
        cancel_ack=cancel_ack,
        namespace=namespace,
        result_blobs=unpacked(packed(body.blobs)),
    )


def _completed(outcome, new_state: JobStatus, form: ResultForm, size: int) -> None:
    final_state = outcome.state if isinstance(outcome, Completed) else new_state
    metrics_count("JobsCompleted", state=final_state.value)
    if size:
        metrics_bytes("PayloadBytes", size, tier=form, kind="result")
    logger.info("job completed", extra={"state": final_state.value, "result_tier": form})


def _settle(p: Principal, job_id: str, outcome, deps: Deps) -> None:
    """Finish a state change in the namespace slot (drop the job's queue entry), or explain why
    it did not happen."""
    match outcome:
        case Completed() | LostForGood() | SamePost():
            # SamePost (a repeat of the accepted post, or the script re-sent after a lost
            # reply) names the entry again: the first answer may never have reached us. It is
            # indexed only if this call drops the entry (the first one's settle never ran).
            repeat = isinstance(outcome, SamePost)
            if repeat and not outcome.entry_id:
                return
            state = JobStatus.PAYLOAD_LOST if isinstance(outcome, LostForGood) else outcome.state
            deps.jobs.settle(
                p.namespace,
                outcome.queue,
                job_id,
                outcome.entry_id,
                state=state or None,
                retries=outcome.retries,
                now_ms=int(deps.clock() * 1000),
                index_once=repeat,
                keep_args=bool(state) and JobStatus(state) in RETRYABLE_STATES,
                consumer=getattr(outcome, "consumer", ""),
            )
        case Missing():
            raise NotFound(f"job {job_id} not found")
        case LeaseMismatch(state=state):
            raise lease_mismatch(job_id, state)
        case _:
            raise Conflict(
                f"job {job_id} is {getattr(outcome, 'state', '') or 'not running'}; "
                "it accepts no other result"
            )


def report_failure(p: Principal, job_id: str, report: FailureReport, deps: Deps) -> None:
    job = load_job(p, job_id, deps)
    now_ms = int(deps.clock() * 1000)
    # inline `never`: the detail's object is written only for a report that may end the job
    # (running, under its lease); a refused one writes none, a repeat finds the first's.
    may_end = job.state == JobStatus.RUNNING and job.lease in (None, report.lease)
    if report.state == "payload_corrupt":
        # The checksum the reader verified: CRC64NVME (the transfer checksum) or sha256.
        crc = report.expected_crc64nvme or report.actual_crc64nvme
        error = {
            "type": "PayloadCorrupt",
            "message": report.detail or "payload checksum mismatch on download",
            "expected_sha256": report.expected_sha256
            or (job.args.sha256 if job.args and not crc else None),
            "actual_sha256": report.actual_sha256,
            "expected_crc64nvme": report.expected_crc64nvme
            or (job.args.crc64nvme if job.args and crc else None),
            "actual_crc64nvme": report.actual_crc64nvme,
        }
        error_json = dumps({k: v for k, v in error.items() if v is not None})
        outcome = deps.jobs.complete(
            job_id,
            JobStatus.PAYLOAD_CORRUPT,
            post_digest("corrupt", error_json),
            now_ms,
            kept_error(p, job_id, error_json, deps, write=may_end),
            "error",
            lease=report.lease,
        )
        if isinstance(outcome, Completed):
            metrics_count("PayloadCorrupt")
            logger.error(
                "payload corrupt",
                extra={
                    "expected_sha256": error["expected_sha256"],
                    "actual_sha256": report.actual_sha256,
                    "expected_crc64nvme": error["expected_crc64nvme"],
                    "actual_crc64nvme": report.actual_crc64nvme,
                },
            )
            keep_for_class(p, job_id, deps)
        _keep_again(p, job_id, outcome, deps)
        _settle(p, job_id, outcome, deps)
        return

    error_json = dumps(
        {"type": "PayloadLost", "message": report.detail or "payload object not found"}
    )
    max_requeues = 1 if deps.settings.payload_lost_policy is PayloadLostPolicy.RETRY_ONCE else 0
    lost = deps.jobs.payload_lost(
        job_id,
        max_requeues,
        post_digest("lost", "payload_lost"),
        now_ms,
        kept_error(p, job_id, error_json, deps, write=may_end),
        lease=report.lease,
    )
    metrics_count("PayloadLost")
    if isinstance(lost, Requeued):
        old_stream_id, queue = lost.entry_id, lost.queue
        entry = deps.jobs.read_entry(p.namespace, queue, old_stream_id) if old_stream_id else None
        if entry is None:
            # Nothing to build the new entry from: the old one is gone (a poll took it back,
            # found the job ended meanwhile, e.g. a cancel requested of this delivery, and
            # settled it: the job moved on) or unknown (this report's script re-sent after a
            # lost reply answers none: the old entry is still pending, and a poll takes it back
            # after the visibility timeout and runs the job from it). An entry without the
            # args and blob list would hand a daemon a job with neither (race I).
            logger.warning(
                "payload lost, old entry gone or unknown: nothing appended", extra={"queue": queue}
            )
            return
        min_id = max(now_ms - deps.settings.retention_s * 1000, 0)
        # The script left the job queued with no entry of its own ('*'): whichever of its
        # entries a daemon takes first becomes the job's (a daemon blocked on this queue may
        # take the new one at once). The new one is then recorded as the job's, and only after
        # that does the other go: a poll that took the old one back (its lease lapsed) and
        # started the job from it before the record keeps it, and the new one is the stale
        # double. The one that goes is deleted only if no daemon holds it; one a poll took
        # (back) may be about to start the job from it (after a cancel and a retry since, any
        # entry may), so it is left to the next poll's pending-list scan, at once due, where
        # delivery_start decides (docs/design.md "Under races", race H of tests/races).
        new_stream_id = deps.jobs.append(
            p.namespace,
            queue,
            job_id,
            inline=entry.inline,
            min_id_ms=min_id,
            blobs=entry.blobs,
        )
        recorded = deps.jobs.record_requeue(
            job_id, new_stream_id, lost=True, replaced=old_stream_id
        )
        deps.jobs.release_lost_entry(
            p.namespace,
            queue,
            new_stream_id if recorded == "kept" else old_stream_id,
            visibility_ms=deps.settings.visibility_timeout_s * 1000,
        )
        logger.warning("payload lost, job requeued", extra={"queue": queue})
        return
    if isinstance(lost, LostForGood):
        logger.warning("payload lost, job failed")
        keep_for_class(p, job_id, deps)
    _keep_again(p, job_id, lost, deps)
    _settle(p, job_id, lost, deps)


def _keep_again(p: Principal, job_id: str, outcome: object, deps: Deps) -> None:
    """A failure report sent again after it ended the job: the first one may have been
    answered 503 after its end was stored, before the record's longer life (`7d`/`30d`) was;
    the repeat sets it (idempotent: the same end-based time), as a re-sent result post does."""
    if isinstance(outcome, SamePost) and outcome.state and JobStatus(outcome.state).terminal:
        keep_for_class(p, job_id, deps)
