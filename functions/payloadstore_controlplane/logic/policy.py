"""A namespace's policy at the request path: the headers every upload signs in, the check of an
uploaded object against them, the refusal of inline bytes for inline `never`, and the due
deletions of retention `consume` (drained by the scheduled function, handlers/metrics.py)."""

from __future__ import annotations

import time

from ..models.domain import PayloadKind
from ..models.errors import ArgumentsConsumed, InlineNever, PolicyMismatch, ResultConsumed
from ..models.policy import (
    RETENTION_TAG,
    SSE_KMS,
    NamespacePolicy,
    encryption_fingerprint,
    resolve_kms_key,
    upload_headers,
)
from ..observability import logger, metrics_count
from ..store.records import JobRecord
from ..store.s3.objects import ObjectInfo
from .context import Deps, Principal


def policy_headers(policy: NamespacePolicy, deps: Deps) -> dict[str, str]:
    """The retention tag and SSE headers an upload of this namespace signs in."""
    return upload_headers(policy, deps.settings.stack_kms_key)


def encryption_of(policy: NamespacePolicy, deps: Deps) -> str:
    """The fingerprint of the encryption the namespace's uploads get now (models/policy.py)."""
    return encryption_fingerprint(resolve_kms_key(policy, deps.settings.stack_kms_key))


def refuse_inline_never(p: Principal, what: str) -> None:
    """409 inline_never: the namespace keeps nothing in Redis (`what`: payload or result)."""
    if p.policy.inline_never:
        raise InlineNever(
            f"namespace {p.namespace} has inline never: every {what} goes to S3; presign, "
            "upload, and send the reference"
        )


def check_object_policy(
    key: str,
    info: ObjectInfo,
    policy: NamespacePolicy,
    deps: Deps,
    tags: dict[str, str] | None = None,
) -> None:
    """The object HEAD found carries the namespace's encryption and retention tag; 409
    policy_mismatch otherwise (the reference is not accepted, nothing is written).

    The encryption comes with the HEAD; the tag's value takes a GetObjectTagging (HEAD answers
    at most how many tags there are; read whatever it says, so an answer without the count
    never refuses a well-tagged upload), unless the caller read the `tags` already."""
    expected_key = resolve_kms_key(policy, deps.settings.stack_kms_key)
    if expected_key is not None:
        if info.sse != SSE_KMS or not _same_key(info.kms_key, expected_key):
            _mismatch(
                key, f"the object is not encrypted with the namespace's KMS key ({policy.kms_key})"
            )
    elif info.sse == SSE_KMS:
        _mismatch(key, "the object is SSE-KMS encrypted; the namespace's policy is SSE-S3")
    if tags is None:
        tags = deps.objects.tags(key)
    found = (tags or {}).get(RETENTION_TAG)
    if found != policy.retention:
        _mismatch(
            key,
            f"the object's retention tag is {found or 'missing'}, the namespace's is "
            f"{policy.retention}",
        )


def _same_key(found: str | None, expected: str) -> bool:
    """S3 answers the key's ARN; a key named by id alone matches its ARN's last part."""
    if not found:
        return False
    return found == expected or found.rsplit("/", 1)[-1] == expected.rsplit("/", 1)[-1]


def _mismatch(key: str, detail: str) -> None:
    metrics_count("PolicyMismatch")
    logger.warning("upload refused: policy mismatch", extra={"key": key, "detail": detail})
    raise PolicyMismatch(
        f"policy mismatch: {detail}; upload again with a new presign", reason="policy_mismatch"
    )


def keep_for_class(p: Principal, job_id: str, deps: Deps, *, lag_ok: bool = False) -> None:
    """Retention `7d`/`30d`: a job that ended (cancelled, failed at the delivery cap, its
    payload lost or corrupt, as well as by a result post) keeps its record as long as its
    namespace keeps its payloads, so it can be read, listed and retried that long. `lag_ok`:
    the caller is a poll, which reports no write done (a lagging replica does not fail it)."""
    if p.policy.outlives_records:
        deps.jobs.keep_finished_job(
            job_id, p.policy.retention_s, int(deps.clock() * 1000), lag_ok=lag_ok
        )


# The job hash field that remembers when a consumed payload is deleted (store/keys.py).
_DELETED_FIELD = {PayloadKind.ARGS: "pd", PayloadKind.RESULT: "rd"}


def schedule_consume(
    namespace: str,
    job_id: str,
    kind: PayloadKind,
    key: str,
    delay_s: float,
    deps: Deps,
    *,
    read: bool = False,
    object_outlives_s: float = 0.0,
) -> None:
    """Record the S3 key of a `consume` namespace's job for deletion `delay_s` from now (the
    scheduled function deletes what is due), and the same time on the job's hash, which answers
    a read past it (`refuse_consumed`). A key already scheduled keeps its first time: a re-read
    of a result within the grace does not push its deletion back.

    `object_outlives_s`: the object itself is deleted that much after reads start answering
    410 (a result: the last download URL handed out expires PRESIGN_TTL_S after it, and a
    download started with it gets CONSUME_RESULT_GRACE_S more to finish, so a long download
    never loses its object mid-read).

    Both writes are allow-oom and acknowledged (store/jobs/consume.py); `read`: the caller is
    a read, which reports no write done, so a replica that lags does not fail it."""
    due_ms = int((deps.clock() + delay_s) * 1000)
    delete_ms = due_ms + int(object_outlives_s * 1000)
    deps.jobs.schedule_deletions(namespace, [key], delete_ms, lag_ok=read)
    deps.jobs.mark_consumed(job_id, _DELETED_FIELD[kind], due_ms, lag_ok=read)
    logger.info(
        "consume scheduled",
        extra={"namespace": namespace, "job_id": job_id, "kind": kind.value, "in_s": delay_s},
    )


def consumed_at_ms(job: JobRecord, kind: PayloadKind, deps: Deps) -> int | None:
    """When the job's payload of `kind` was deleted by retention `consume` (its grace is over),
    or None while it is kept (never scheduled, or still within the grace)."""
    due_ms = job.args_deleted_ms if kind is PayloadKind.ARGS else job.result_deleted_ms
    if due_ms is None or deps.clock() * 1000 < due_ms:
        return None
    return due_ms


def refuse_consumed(job: JobRecord, kind: PayloadKind, deps: Deps) -> None:
    """410 result_consumed / arguments_consumed once the payload's grace is over: its object is
    deleted (or about to be, by the next scheduled run), so a download URL would only find
    nothing. Answered from the job's hash: no S3 call."""
    due_ms = consumed_at_ms(job, kind, deps)
    if due_ms is None:
        return
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due_ms / 1000))
    if kind is PayloadKind.RESULT:
        raise ResultConsumed(
            f"the result of job {job.job_id} was consumed: it was read, and its object was "
            f"deleted at {when} (retention consume, CONSUME_RESULT_GRACE_S after the first read)",
            reason="result_consumed",
            deleted_at=when,
        )
    raise ArgumentsConsumed(
        f"the arguments of job {job.job_id} were consumed: the job succeeded, and their object "
        f"was deleted at {when} (retention consume)",
        reason="arguments_consumed",
        deleted_at=when,
    )


# DeleteObjects calls one scheduled run makes at most (1000 keys each, ~0.1-0.3 s on S3): a
# backlog beyond ~20,000 due keys waits for the next minute instead of the function's timeout.
MAX_DELETE_CALLS = 20


def drain_consumed(namespaces: list[str], deps: Deps, *, limit: int = 1000) -> int:
    """Delete the due objects of each namespace (S3 DeleteObjects), then forget them; what S3
    could not delete stays due for the next run. Returns how many were deleted.

    The MAX_DELETE_CALLS of a run go round the namespaces with keys due, one call each per
    round, starting each minute at another namespace: a busy namespace (or one early in the
    alphabet) never spends them all while others wait (issue 43)."""
    now_ms = int(deps.clock() * 1000)
    order = list(namespaces)
    if order:
        start = (now_ms // 60_000) % len(order)
        order = order[start:] + order[:start]
    deleted = 0
    calls = 0
    while order and calls < MAX_DELETE_CALLS:
        more = []
        for ns in order:
            if calls >= MAX_DELETE_CALLS:
                break
            due = deps.jobs.due_deletions(ns, now_ms, limit)
            if not due:
                continue
            calls += 1
            failed = set(deps.objects.delete_many(due))
            done = [k for k in due if k not in failed]
            deps.jobs.forget_deletions(ns, done)
            deleted += len(done)
            if not failed and len(due) == limit:
                more.append(ns)
        order = more
    if deleted:
        metrics_count("ConsumedDeleted", deleted)
        logger.info("consumed payloads deleted", extra={"deleted": deleted, "calls": calls})
    return deleted
