"""Enqueue: inline bytes into the queue stream, or an S3 reference the CP issued and verified."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache

from ..models.api import EnqueueResponse
from ..models.domain import NAME_RE, JobStatus, PayloadKind, PayloadRef, Tier, new_job_id
from ..models.errors import (
    Conflict,
    InlineUnavailable,
    PayloadStoreError,
    PayloadTooLarge,
    ServiceUnavailable,
    Unprocessable,
)
from ..models.settings import Settings
from ..observability import bind_job, logger, metrics_bytes, metrics_count
from ..store.records import (
    InlineExists,
    InlineJob,
    LegacyIdempotency,
    Missing,
    OtherQueue,
    RefEnqueued,
    RefQueued,
    RefRefusedMeanwhile,
    RefResume,
    inline_index_expiry_ms,
)
from .blobs import check_referenced, packed, referenced, unknown_blob, unpacked
from .context import Deps, Principal, issue_record
from .guard import refuse_enqueue, refuse_inline
from .payload_keys import parse_key
from .policy import refuse_inline_never
from .verify import verify_uploaded

IDEMPOTENCY_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# The job id of an inline enqueue with an Idempotency-Key is derived from the namespace, the key
# and the minute it arrived (the id's time is the start of that minute): a repeat within
# IDEMPOTENCY_TTL_S computes the same few candidate ids and finds the job in the inline index,
# so no per-key record is stored at all.
IDEMPOTENCY_BUCKET_MS = 60_000
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


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
    blobs: list[str] | None = None,
) -> Enqueued:
    validate_queue_name(queue)
    if (payload_inline is None) == (payload_ref is None):
        raise Unprocessable("give exactly one of payloadRef or payloadInline")
    if payload_inline is not None:
        # 409 unknown_blob before anything is written; the blobs' need is recorded for the
        # renewer.
        check_referenced(p.namespace, blobs or (), deps, policy=p.policy)
        enqueued = _enqueue_inline(
            p, queue, payload_inline, idempotency_key, deps, packed(blobs or ())
        )
    else:
        assert payload_ref is not None
        try:
            check_referenced(p.namespace, blobs or (), deps, policy=p.policy)
            enqueued = _enqueue_ref(p, queue, payload_ref, deps, packed(blobs or ()))
        except PayloadStoreError as refused:
            enqueued = _refused_ref(p, queue, payload_ref, refused, deps)
    # Listed for the metrics function once it has a job: a refused enqueue writes nothing.
    deps.queues.remember_namespace(p.namespace)
    return enqueued


def _crockford(value: int, chars: int) -> str:
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(chars)))


def idempotency_tail(namespace: str, key: str) -> str:
    """The last 16 chars of every job id an Idempotency-Key can give (80 bits of sha256)."""
    random80 = int.from_bytes(hashlib.sha256(f"{namespace}\0{key}".encode()).digest()[:10], "big")
    return _crockford(random80, 16)


def candidate_minutes(now_ms: int, ttl_s: int) -> tuple[tuple[str, int], ...]:
    """(10 time chars, ms) of each minute a request with an Idempotency-Key may have created its
    job in within the last ttl_s, newest first: this minute's comes first and is the time of a
    job created now. A candidate job id is a minute's chars followed by the key's tail (ULID
    layout)."""
    back = math.ceil(ttl_s * 1000 / IDEMPOTENCY_BUCKET_MS)
    return _minutes(now_ms // IDEMPOTENCY_BUCKET_MS, back)


@lru_cache(maxsize=4)
def _minutes(bucket: int, back: int) -> tuple[tuple[str, int], ...]:
    """(10 time characters of a job id, its ms) of the minute `bucket` and the `back` minutes
    before it, newest first: the same for every request of that minute, so computed once."""
    out = []
    for i in range(back + 1):
        ms = (bucket - i) * IDEMPOTENCY_BUCKET_MS
        out.append((_crockford(ms, 10), ms))
    return tuple(out)


def idempotent_job_ids(namespace: str, key: str, now_ms: int, ttl_s: int) -> list[tuple[str, int]]:
    """(job id, its ms) a request with this key may have created within the last ttl_s,
    newest first. ULID layout: 10 chars of ms, then 16 chars of 80 bits from sha256."""
    tail = idempotency_tail(namespace, key)
    return [(chars + tail, ms) for chars, ms in candidate_minutes(now_ms, ttl_s)]


def _inline_job(
    namespace: str,
    data: bytes,
    idem: str | None,
    now_ms: int,
    settings: Settings,
    blobs: bytes = b"",
) -> InlineJob:
    """The job an inline enqueue appends now. With a key, its id is this ms's time chars and the
    key's tail: a repeat of the key finds it by the key field of its index hash (`k<tail>`, which
    holds those time chars), so the id can carry the enqueue time to the ms, which is the job's
    created_at (an id of the minute's chars made a 20 s old job read 56 s older)."""
    if idem:
        tail = idempotency_tail(namespace, idem)
        job_id, job_ms = _crockford(now_ms, 10) + tail, now_ms
    else:
        tail, job_id, job_ms = "", new_job_id(now_ms), now_ms
    return InlineJob(
        job_id=job_id,
        job_ms=job_ms,
        data=data,
        index_until_ms=inline_index_expiry_ms(job_ms, settings.retention_s),
        idempotency_key=idem,
        candidate_tail=tail,
        blobs=blobs,
    )


def _all_blobs(refs: list[bytes]) -> set[str]:
    return {sha for raw in refs for sha in unpacked(raw)}


def _enqueue_inline(
    p: Principal, queue: str, data: bytes, idem: str | None, deps: Deps, blobs: bytes = b""
) -> Enqueued:
    """A single inline enqueue is a batch of one: the same checks, script and answers."""
    answer = enqueue_inline_batch(p, queue, [(data, idem)], deps, blobs=[blobs], checked=True)[0]
    if isinstance(answer, PayloadStoreError):
        raise answer
    bind_job(answer.response.job_id)
    return answer


def _earlier_job(
    queue: str, candidates: list[tuple[str, int]], p: Principal, deps: Deps
) -> Enqueued | None:
    """The job an earlier request with the same Idempotency-Key created, if any. Asked only when
    the memory guard refuses inline bytes: a retry whose first attempt did create the job (its
    201 lost) gets that job back, instead of `inline_unavailable`, which makes the SDK send the
    bytes through S3 as a second job."""
    found = deps.jobs.find_inline_job(p.namespace, candidates)
    if found is None:
        return None
    existing, existing_queue = found
    bind_job(existing)
    if existing_queue != queue:
        raise Conflict(f"Idempotency-Key already used for a job on queue {existing_queue}")
    return Enqueued(EnqueueResponse(job_id=existing, tier=Tier.INLINE), created=False)


def _legacy_repeat(
    p: Principal, queue: str, job_id: str, data: bytes, now_ms: int, deps: Deps
) -> Enqueued:
    """An Idempotency-Key first used before the upgrade (layout 1): answer with that job, and
    finish its append if the earlier request never did."""
    bind_job(job_id)
    job = deps.jobs.get_job(job_id)
    if job is not None and job.queue != queue:
        raise Conflict(f"Idempotency-Key already used for a job on queue {job.queue}")
    if job is None or job.namespace != p.namespace:
        raise Conflict("Idempotency-Key belongs to a job that no longer exists; use a new key")
    if not job.stream_id:
        min_id = max(now_ms - deps.settings.retention_s * 1000, 0)
        stream_id = deps.jobs.append(p.namespace, queue, job_id, inline=data, min_id_ms=min_id)
        deps.jobs.record_entry(job_id, stream_id)
    return Enqueued(EnqueueResponse(job_id=job_id, tier=Tier.INLINE), created=False)


def _enqueue_ref(
    p: Principal, queue: str, ref: PayloadRef, deps: Deps, blobs: bytes = b""
) -> Enqueued:
    enqueued = _try_enqueue_ref(p, queue, ref, deps, blobs)
    if enqueued is None:
        # A concurrent enqueue of the job was refused while this one was checked (its entry is
        # dropped): checked again from the start, answered as an enqueue sent now would be.
        enqueued = _try_enqueue_ref(p, queue, ref, deps, blobs)
    if enqueued is None:
        raise ServiceUnavailable(
            "a concurrent enqueue of this job was refused while this one was checked; send it again"
        )
    return enqueued


def _try_enqueue_ref(
    p: Principal, queue: str, ref: PayloadRef, deps: Deps, blobs: bytes
) -> Enqueued | None:
    """One try of an S3-tier enqueue; None when a refusal of the job overruled it."""
    parsed = parse_key(ref.key)
    if parsed is None or parsed[1] is not PayloadKind.ARGS:
        raise Conflict("payloadRef.key was not issued to this namespace as an args key")
    job_id = parsed[0]
    bind_job(job_id)
    job = deps.jobs.get_job(job_id)
    issued = issue_record(job, PayloadKind.ARGS, deps) if job is not None else None
    if job is None or issued is None or job.namespace != p.namespace:
        raise Conflict("payloadRef.key was not issued to this namespace as an args key")
    if job.state != JobStatus.AWAITING_UPLOAD:
        if job.queue != queue:
            raise Conflict(f"job {job_id} is already enqueued on queue {job.queue}")
        if job.stream_id:
            return Enqueued(EnqueueResponse(job_id=job_id, tier=Tier.S3), created=False)

    verify_uploaded(ref, issued, deps, policy=p.policy)
    refuse_enqueue(deps, namespace=p.namespace)
    now_ms = int(deps.clock() * 1000)
    # The entry first, then the job step that queues the job on it: the job and its queue are in
    # two slots, and a request cut off between them must not leave a job reading `queued` that
    # no entry will ever deliver. What it leaves is the job as it was (awaiting_upload) and its
    # entry, which a poll delivers as the job's, or drops if a re-send was refused since.
    # The entry carries the job's refused enqueues this request read before its checks: a
    # refusal since (a concurrent re-send refused for a policy changed meanwhile) overrules it,
    # and neither a poll nor the job step below queues the job on it.
    min_id = max(now_ms - deps.settings.retention_s * 1000, 0)
    refusals = job.enqueue_refusals
    stream_id = deps.jobs.append(
        p.namespace, queue, job_id, inline=None, min_id_ms=min_id, blobs=blobs, refusals=refusals
    )
    outcome = deps.jobs.settle_ref_enqueue(job_id, p.namespace, queue, now_ms, stream_id, refusals)
    if not isinstance(outcome, (RefQueued, RefResume)):
        # Not this job's entry (an earlier request queued it, a refusal overruled this try, or
        # it is no job of this namespace's): dropped now rather than by the poll that would
        # meet it.
        deps.jobs.drop_entry(p.namespace, queue, stream_id)
        return _not_this_entry(job_id, outcome)
    metrics_count("JobsEnqueued", tier=Tier.S3.value)
    metrics_bytes("PayloadBytes", issued.size, tier=Tier.S3.value, kind="args")
    logger.info("job enqueued", extra={"queue": queue, "tier": "s3", "size": issued.size})
    return Enqueued(
        EnqueueResponse(job_id=job_id, tier=Tier.S3), created=isinstance(outcome, RefQueued)
    )


def _not_this_entry(
    job_id: str, outcome: RefEnqueued | RefRefusedMeanwhile | OtherQueue | Missing
) -> Enqueued | None:
    """The answer of an S3-tier enqueue whose entry is not the job's: a repeat's, a conflict,
    or None (a refusal of the job overruled this try)."""
    match outcome:
        case OtherQueue(queue=other):
            raise Conflict(f"job {job_id} is already enqueued on queue {other}")
        case Missing():
            raise Conflict("payloadRef.key was not issued to this namespace as an args key")
        case RefEnqueued():
            return Enqueued(EnqueueResponse(job_id=job_id, tier=Tier.S3), created=False)
    return None


def _refused_ref(
    p: Principal, queue: str, ref: PayloadRef, refused: PayloadStoreError, deps: Deps
) -> Enqueued:
    """An S3-tier enqueue refused for good (4xx: a policy or limit changed since the upload, a
    blob gone, a key not issued): an entry an earlier try of it appended before being cut off
    must not run the job now refused (the job is marked: enqueue_refuse_ref.lua). A poll may have
    met that entry first and queued the job on it: then the answer is the job, as a repeat's.
    A 503 is only re-raised: the client sends the same enqueue again."""
    parsed = parse_key(ref.key)
    if refused.status >= 500 or parsed is None or parsed[1] is not PayloadKind.ARGS:
        raise refused
    if deps.jobs.refuse_ref_enqueue(parsed[0], p.namespace, queue):
        return Enqueued(EnqueueResponse(job_id=parsed[0], tier=Tier.S3), created=False)
    raise refused


def _refused_item(
    p: Principal, queue: str, idem: str | None, now_ms: int, refused: InlineUnavailable, deps: Deps
) -> Enqueued | PayloadStoreError:
    if not idem or not IDEMPOTENCY_KEY_RE.match(idem):
        return refused
    candidates = idempotent_job_ids(p.namespace, idem, now_ms, deps.settings.idempotency_ttl_s)
    try:
        return _earlier_job(queue, candidates, p, deps) or refused
    except PayloadStoreError as e:
        return e


def enqueue_inline_batch(  # noqa: C901 - each item's refusal is answered in place, in request order, as a single enqueue would
    p: Principal,
    queue: str,
    items: list[tuple[bytes, str | None]],
    deps: Deps,
    *,
    blobs: list[bytes] | None = None,
    checked: bool = False,
) -> list[Enqueued | PayloadStoreError]:
    """Many inline jobs (bytes, Idempotency-Key) in one Redis round trip: each answer is the job
    or the error of that item alone, exactly as `enqueue` would have answered it. The memory
    guard is read once for the batch; metrics and the log line are one per batch. `blobs`: per
    item, the raw sha256s of the blobs it references (checked here, all items' blobs in one
    round trip, unless `checked`)."""
    s = deps.settings
    answers: list[Enqueued | PayloadStoreError | None] = [None] * len(items)
    refs = blobs or [b""] * len(items)
    missing = set() if checked else referenced(p.namespace, _all_blobs(refs), deps, policy=p.policy)
    now_ms = int(deps.clock() * 1000)
    try:
        refuse_inline_never(p, "payload")
        refuse_inline(deps, "payload", namespace=p.namespace)
    except InlineUnavailable as e:
        return [_refused_item(p, queue, idem, now_ms, e, deps) for _, idem in items]
    except PayloadStoreError as e:
        return [e] * len(items)
    minutes = candidate_minutes(now_ms, s.idempotency_ttl_s)
    jobs: list[InlineJob] = []
    positions: list[int] = []
    for i, (data, idem) in enumerate(items):
        if len(data) > s.inline_threshold:
            answers[i] = PayloadTooLarge(
                f"inline payload of {len(data)} bytes exceeds INLINE_THRESHOLD="
                f"{s.inline_threshold}; upload it with presign and enqueue the payloadRef",
                inline_threshold=s.inline_threshold,
            )
            continue
        if idem is not None and not IDEMPOTENCY_KEY_RE.match(idem):
            answers[i] = Unprocessable(
                "invalid Idempotency-Key (idempotency_key): use [A-Za-z0-9_.:-], 1-128 chars"
            )
            continue
        lacking = missing.intersection(unpacked(refs[i]))
        if lacking:
            answers[i] = unknown_blob(lacking)
            continue
        jobs.append(_inline_job(p.namespace, data, idem, now_ms, s, refs[i]))
        positions.append(i)
    created_bytes = created = 0
    outcomes = (
        deps.jobs.enqueue_inline_many(
            p.namespace,
            queue,
            jobs,
            min_id_ms=max(now_ms - s.retention_s * 1000, 0),
            candidate_minutes=minutes,
        )
        if jobs
        else []
    )
    for i, job, outcome in zip(positions, jobs, outcomes, strict=True):
        if isinstance(outcome, InlineExists):
            answers[i] = (
                Conflict(f"Idempotency-Key already used for a job on queue {outcome.queue}")
                if outcome.queue != queue
                else Enqueued(
                    EnqueueResponse(job_id=outcome.job_id, tier=Tier.INLINE), created=False
                )
            )
        elif isinstance(outcome, LegacyIdempotency):
            try:
                answers[i] = _legacy_repeat(p, queue, outcome.job_id, job.data, now_ms, deps)
            except PayloadStoreError as e:
                answers[i] = e
        else:
            created += 1
            created_bytes += len(job.data)
            answers[i] = Enqueued(
                EnqueueResponse(job_id=job.job_id, tier=Tier.INLINE), created=True
            )
    if created:
        metrics_count("JobsEnqueued", created, tier=Tier.INLINE.value)
        metrics_bytes("PayloadBytes", created_bytes, tier=Tier.INLINE.value, kind="args")
    logger.info(
        "inline jobs enqueued",
        extra={"queue": queue, "tier": "inline", "jobs": created, "bytes": created_bytes},
    )
    return answers  # type: ignore[return-value]  # every slot was filled by the loop above
