"""Many jobs per call: a batch enqueue (each item as a single enqueue would be), and the state of
many jobs at once with a short wait for the first of them to finish."""

from __future__ import annotations

import json
import time

from pydantic import ValidationError

from ..models.api import (
    BatchEnqueueResponse,
    BatchItemError,
    BatchJobIn,
    ErrorBody,
    JobsStatusRequest,
    JobsStatusResponse,
    JobStatusError,
    JobStatusResponse,
    b64_bytes,
)
from ..models.errors import NotFound, PayloadStoreError, PayloadTooLarge, Unprocessable
from ..models.limits import DELIVERIES_BUDGET, delivery_bytes, escaped_len
from ..observability import logger
from .blobs import packed
from .context import Deps, Principal
from .enqueue import enqueue, enqueue_inline_batch, validate_queue_name
from .results import job_status

# How often a waiting status call looks again (jobs live in many slots: no single blocking read).
STATUS_RECHECK_S = 0.2


def _summarize(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        # A location part cut: an unknown field's name is the item's, of any length.
        loc = ".".join(
            str(x) if len(str(x)) <= 100 else str(x)[:100] + "..." for x in err.get("loc", ())
        )
        parts.append(f"{loc or 'item'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _item_error(e: PayloadStoreError) -> BatchItemError:
    return BatchItemError(error=ErrorBody(code=e.code, message=e.message, **e.details))


_INLINE_FIELDS = frozenset({"payloadInline", "idempotency_key"})
# The fields such an item sets, as model_construct(payloadInline=..., idempotency_key=...) has it.
_INLINE_FIELDS_SET = {"payloadInline", "idempotency_key"}


def _parse_item(item) -> tuple[BatchJobIn, bytes | None]:
    """The item as `BatchJobIn` validates it, and its inline bytes, base64-decoded once.

    The usual item (inline bytes, maybe a key, nothing else) is checked here without building a
    model through pydantic; any other shape, and any item that fails here, goes through
    `BatchJobIn.model_validate`, so what is refused and the message it gets are unchanged."""
    if type(item) is dict and "payloadInline" in item and item.keys() <= _INLINE_FIELDS:
        inline, key = item["payloadInline"], item.get("idempotency_key")
        if type(inline) is str and (key is None or type(key) is str):
            try:
                data = b64_bytes(inline)
            except ValueError:
                pass  # refused below, with the model's own message
            else:
                # Every field given: pydantic resolves no default (its default_factory check
                # inspects the factory's signature, ~0.5 ms per item of a 100-job batch).
                job = BatchJobIn.model_construct(
                    _INLINE_FIELDS_SET,
                    payloadRef=None,
                    payloadInline=inline,
                    idempotency_key=key,
                    blobs=[],
                )
                return job, data
    job = BatchJobIn.model_validate(item)
    return job, job.inline_bytes()


def _enqueue_inline_run(
    p, queue, parsed: list, inline: list, run: list[int], answers: list, deps: Deps
) -> None:
    items = [(inline[i] or b"", parsed[i].idempotency_key) for i in run]
    refs = [packed(parsed[i].blobs) for i in run]
    answered = enqueue_inline_batch(p, queue, items, deps, blobs=refs)
    for i, result in zip(run, answered, strict=True):
        answers[i] = (
            _item_error(result) if isinstance(result, PayloadStoreError) else result.response
        )


def _enqueue_one(p: Principal, queue: str, job: BatchJobIn, data: bytes | None, deps: Deps):
    try:
        return enqueue(
            p,
            queue,
            payload_ref=job.payloadRef,
            payload_inline=data,
            idempotency_key=job.idempotency_key,
            deps=deps,
            blobs=job.blobs,
        ).response
    except PayloadStoreError as e:
        # Per item too: the SDK reroutes `inline_unavailable` items through S3.
        return _item_error(e)


def enqueue_batch(p: Principal, queue: str, body: dict, deps: Deps) -> BatchEnqueueResponse:  # noqa: C901 - one pass over the items in request order: validation, runs of inline jobs, references
    """Each item is validated and enqueued on its own: one bad item fails only itself. The whole
    request is refused (422/413) only when it is malformed or over the batch limits."""
    validate_queue_name(queue)
    s = deps.settings
    items = body.get("jobs") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise Unprocessable('body must be {"jobs": [...]} with at least one job')
    if set(body) - {"jobs"}:
        # Named in part: quoted back whole, a body's field names could take the answer past
        # Lambda's 6 MB (repr doubles each backslash, JSON twice more).
        unknown = sorted(set(body) - {"jobs"})
        named = [n if len(n) <= 100 else n[:100] + "..." for n in unknown[:5]]
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise Unprocessable(f"unknown fields: {named}{more}")
    if len(items) > s.batch_max_jobs:
        raise Unprocessable(f"{len(items)} jobs in one batch; BATCH_MAX_JOBS={s.batch_max_jobs}")
    parsed: list[BatchJobIn | BatchItemError] = []
    inline: list[bytes | None] = []  # each item's decoded inline bytes
    inline_total = 0
    for item in items:
        try:
            job, data = _parse_item(item)
        except ValidationError as e:
            parsed.append(
                BatchItemError(error=ErrorBody(code="invalid_request", message=_summarize(e)))
            )
            inline.append(None)
            continue
        inline_total += len(data or b"")
        parsed.append(job)
        inline.append(data)
    if inline_total > s.batch_max_bytes:
        raise PayloadTooLarge(
            f"{inline_total} inline bytes in one batch; BATCH_MAX_BYTES={s.batch_max_bytes}: "
            "split the batch",
            batch_max_bytes=s.batch_max_bytes,
        )

    answers: list = list(parsed)
    # Queue order follows request order. A run of inline jobs takes one Redis round trip; a
    # reference is enqueued on its own (its S3 object is checked first).
    run: list[int] = []
    for i, entry in enumerate([*parsed, None]):
        if (
            isinstance(entry, BatchJobIn)
            and entry.payloadInline is not None
            and entry.payloadRef is None
        ):
            run.append(i)
            continue
        if run:
            _enqueue_inline_run(p, queue, parsed, inline, run, answers, deps)
            run = []
        if isinstance(entry, BatchJobIn):
            answers[i] = _enqueue_one(p, queue, entry, inline[i], deps)
    refused = sum(isinstance(a, BatchItemError) for a in answers)
    if refused < len(answers):
        # Listed for the metrics function once it has a job: a refused batch writes nothing.
        deps.queues.remember_namespace(p.namespace)
    logger.info("batch enqueued", extra={"queue": queue, "jobs": len(answers), "refused": refused})
    return BatchEnqueueResponse(jobs=answers)


def jobs_status(p: Principal, req: JobsStatusRequest, deps: Deps) -> JobsStatusResponse:
    """The state of each job; with wait_s, first wait (bounded) until one of them is terminal.

    The answer keeps its byte budget (models/limits.py: 100 failed jobs with 80 KiB of error
    text each would be 8 MB, a 502 from Lambda every time): the statuses come in request order
    up to the first that would not fit; the ids from there on are `unanswered` (not read), for
    the caller to ask again (their weight is kept free for that list), and such an answer is
    given at once, without waiting (only error text fills it, and a job with an error has
    ended). The first status is always answered: one
    job's error text is bounded far below the budget."""
    s = deps.settings
    if len(req.job_ids) > s.batch_max_jobs:
        raise Unprocessable(f"{len(req.job_ids)} job ids; BATCH_MAX_JOBS={s.batch_max_jobs}")
    wait_s = min(req.wait_s, s.result_max_wait_s)
    deadline = time.monotonic() + wait_s
    # What the ids from i on weigh listed in `unanswered`: the cut keeps room for them.
    rest = [0] * (len(req.job_ids) + 1)
    for i in range(len(req.job_ids) - 1, -1, -1):
        rest[i] = rest[i + 1] + escaped_len(json.dumps(req.job_ids[i], ensure_ascii=False)) + 1
    while True:
        answers: list = []
        any_terminal = False
        left = DELIVERIES_BUDGET
        for i, job_id in enumerate(req.job_ids):
            answer: JobStatusResponse | JobStatusError
            try:
                answer = job_status(p, job_id, deps)
                any_terminal = any_terminal or answer.state.terminal
            except NotFound as e:
                answer = JobStatusError(
                    job_id=job_id, error=ErrorBody(code=e.code, message=e.message)
                )
                any_terminal = True  # nothing to wait for: answer now
            left -= delivery_bytes(answer)
            if left < rest[i + 1] and answers:
                logger.info(
                    "status answer full",
                    extra={"answered": i, "unanswered": len(req.job_ids) - i},
                )
                return JobsStatusResponse(jobs=answers, unanswered=req.job_ids[i:])
            answers.append(answer)
        if any_terminal or time.monotonic() >= deadline:
            return JobsStatusResponse(jobs=answers)
        time.sleep(min(STATUS_RECHECK_S, max(deadline - time.monotonic(), 0)))
