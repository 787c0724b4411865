"""Enqueue: inline jobs in one namespace-slot script (enqueue_inline.lua); S3-tier jobs in two
steps, namespace slot then job slot (enqueue_append.lua, then enqueue_settle_ref.lua, which
queues the job and names its entry at once), ordered so a job never reads `queued` without an
entry, a crash in between is repaired by a re-send, and a job id is never handed out for a job
that is in no queue."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...models.domain import job_id_time_chars
from .. import keys
from ..records import (
    InlineCreated,
    InlineExists,
    InlineJob,
    LegacyIdempotency,
    Missing,
    OtherQueue,
    RefEnqueued,
    RefQueued,
    RefRefusedMeanwhile,
    RefResume,
    text,
)
from . import layout1
from ._base import StoreBase, decoded


@lru_cache(maxsize=16)
def _candidate_layout(
    namespace: str, candidate_minutes: tuple[tuple[str, int], ...]
) -> tuple[tuple[str, ...], dict[int, int], str, str]:
    """The index hashes of the candidate minutes (KEYS[4..], in order), their KEYS numbers by
    index span, and ARGV[3] and ARGV[4] of enqueue_inline.lua: the minutes' time chars, and per
    run of consecutive minutes in one hash its KEYS number and length. Computed once per
    namespace and minute (the candidates are the same for every request of a minute)."""
    index_keys: list[str] = []
    numbers: dict[int, int] = {}
    runs: list[list[int]] = []
    for _, ms in candidate_minutes:
        span = ms // keys.INLINE_INDEX_SPAN_MS
        run_number = numbers.get(span)
        if run_number is None:
            index_keys.append(keys.inline_index(namespace, ms))
            run_number = numbers[span] = 3 + len(index_keys)  # KEYS[4..]
        if runs and runs[-1][0] == run_number and runs[-1][1] < 99:
            runs[-1][1] += 1
        else:
            runs.append([run_number, 1])
    return (
        tuple(index_keys),
        numbers,
        "".join([chars for chars, _ in candidate_minutes]) if runs else "",
        "".join([f"{n:02d}{count:02d}" for n, count in runs]),
    )


# How long instances of an older control plane (which write no key fields) may still enqueue
# after the first enqueue of this one: a deploy replaces a function's instances within a request
# timeout; ten minutes is far more.
KEYED_SINCE_GRACE_MS = 600_000


def _keyed_since(candidate_minutes: tuple[tuple[str, int], ...]) -> str:
    """ARGV[6] of enqueue_inline.lua: the marker's value when a namespace has none yet, this
    minute's chars plus the grace (the same encoding as a job id's time, so chars compare as
    the times do)."""
    if not candidate_minutes:
        return ""
    return job_id_time_chars(candidate_minutes[0][1] + KEYED_SINCE_GRACE_MS)


class EnqueueSteps(StoreBase):
    def enqueue_inline_many(  # noqa: C901 - builds the KEYS/ARGV layout enqueue_inline.lua documents, in that order
        self,
        namespace: str,
        queue: str,
        jobs: list[InlineJob],
        *,
        min_id_ms: int,
        candidate_minutes: tuple[tuple[str, int], ...] = (),
    ) -> list[InlineCreated | InlineExists | LegacyIdempotency]:
        """Append inline jobs of one queue, in request order, by one script (one round trip,
        single node or cluster: every key is in the namespace's slot), each unless one of its
        key's candidate ids (a minute's 10 time chars + `job.candidate_tail`, for each
        (chars, ms) of `candidate_minutes`, newest first) is indexed already."""
        if any(job.candidate_tail for job in jobs):
            # The candidates' index hashes come first; the same for every request of a minute.
            first_keys, first_numbers, minutes_arg, runs_arg = _candidate_layout(
                namespace, candidate_minutes
            )
        else:
            first_keys, first_numbers, minutes_arg, runs_arg = (), {}, "", ""
        index_keys: list[str] = list(first_keys)
        numbers: dict[int, int] = dict(first_numbers)  # index span -> KEYS number of its hash

        def index_number(ms: int) -> int:
            span = ms // keys.INLINE_INDEX_SPAN_MS
            found = numbers.get(span)
            if found is None:
                index_keys.append(keys.inline_index(namespace, ms))
                found = numbers[span] = 3 + len(index_keys)  # KEYS[4..]
            return found

        args: list[Any] = [
            f"{min_id_ms}-0",
            queue,
            minutes_arg,
            runs_arg,
            keys.CONSUMER_GROUP,
            _keyed_since(candidate_minutes),
        ]
        legacy_keys: list[str] = []
        for job in jobs:
            legacy = 0
            if job.idempotency_key:
                legacy_keys.append(layout1.idempotency_key(namespace, job.idempotency_key))
                legacy = -len(legacy_keys)  # numbered once the index hashes are all known
            args += [
                job.job_id,
                job.data,
                index_number(job.job_ms),
                job.index_until_ms,
                job.candidate_tail,
                legacy,
                job.blobs,
            ]
        legacy_base = 3 + len(index_keys)  # legacy_keys[n] is KEYS[legacy_base + n + 1]
        for i in range(6 + 5, len(args), 7):
            if args[i] < 0:
                args[i] = legacy_base - args[i]
        keys_ = [
            keys.queue(namespace, queue),
            keys.queue_names(namespace),
            keys.inline_keyed_since(namespace),
            *index_keys,
        ]
        replies = self._run("enqueue_inline", [*keys_, *legacy_keys], args)
        answers: list[InlineCreated | InlineExists | LegacyIdempotency] = []
        for reply in map(decoded, replies):
            if reply[0] == "exists":
                answers.append(InlineExists(job_id=reply[1], queue=reply[2]))
            elif reply[0] == "legacy":
                answers.append(LegacyIdempotency(job_id=reply[1]))
            else:
                answers.append(InlineCreated(job_id=reply[1]))
        return answers

    def find_inline_job(
        self, namespace: str, candidates: list[tuple[str, int]]
    ) -> tuple[str, str] | None:
        """The first of `candidates` ((job id, its ms)) indexed as an inline job of the namespace:
        (job id, queue), or None; or the job its key's field names (ids carry the enqueue's ms, so
        only an older control plane's keyed ids are a minute's chars + the tail). Read-only, one
        round trip, two when a key field names a job (every index is in the namespace's slot)."""
        if not candidates:
            return None
        # One HMGET per index hour, as the enqueue script looks them up: the candidate ids (a
        # minute's chars + the tail: jobs of an older control plane) and the key field, which
        # holds the time chars of the key's newest job (ids carry the enqueue's ms).
        tail = candidates[0][0][10:]
        oldest = candidates[-1][0][:10]
        by_index: dict[str, list[str]] = {}
        for job_id, ms in candidates:
            by_index.setdefault(keys.inline_index(namespace, ms), []).append(job_id)
        pipe = self._r.pipeline(transaction=False)
        for index, ids in by_index.items():
            pipe.hmget(index, [*ids, "k" + tail])
        found: dict[str, bytes | str] = {}
        keyed: list[tuple[str, str]] = []  # (index, job id) named by a key field
        for (index, ids), values in zip(by_index.items(), pipe.execute(), strict=True):
            *queues, chars = values
            found.update((i, q) for i, q in zip(ids, queues, strict=True) if q is not None)
            if chars is not None and text(chars) >= oldest:
                keyed.append((index, text(chars) + tail))
        for index, job_id in sorted(keyed, key=lambda k: k[1], reverse=True):  # newest first
            queue = found.get(job_id) or self._r.hget(index, job_id)
            if queue is not None:
                return job_id, text(queue)
        return next(((j, text(found[j])) for j, _ in candidates if j in found), None)

    def queued_inline(self, namespace: str, job_id: str, job_ms: int) -> str | None:
        """Queue of an inline job that is (or was) queued and has no hash, from the index."""
        return text(self._r.hget(keys.inline_index(namespace, job_ms), job_id))

    def settle_ref_enqueue(
        self,
        job_id: str,
        namespace: str,
        queue: str,
        now_ms: int,
        stream_id: str,
        refusals: int = 0,
    ) -> RefQueued | RefResume | RefEnqueued | RefRefusedMeanwhile | OtherQueue | Missing:
        """Queue an S3-tier job on the entry its enqueue just appended (awaiting_upload ->
        queued, `x` = that entry), in one job-slot step; `refusals`: the job's refused enqueues
        the request saw before its append."""
        reply = self._run_on_job(
            "enqueue_settle_ref",
            job_id,
            [keys.job(job_id)],
            [namespace, queue, now_ms, stream_id, refusals],
        )
        match reply[0]:
            case "created":
                return RefQueued()
            case "refused":
                return RefRefusedMeanwhile()
            case "resumed":
                return RefResume()
            case "exists":
                return RefEnqueued()
            case "other_queue":
                return OtherQueue(reply[1])
        return Missing()

    def refuse_ref_enqueue(self, job_id: str, namespace: str, queue: str) -> bool:
        """An S3-tier enqueue of the job is refused: mark it so an entry an earlier try
        appended is dropped, not run. True when the job is queued on `queue` already (a poll
        met an earlier try's entry first): the refused request answers the job instead."""
        reply = self._run_on_job(
            "enqueue_refuse_ref", job_id, [keys.job(job_id)], [namespace, queue]
        )
        return decoded(reply)[0] == "queued"

    def append(
        self,
        namespace: str,
        queue: str,
        job_id: str,
        *,
        inline: bytes | None,
        min_id_ms: int,
        blobs: bytes = b"",
        refusals: int = 0,
    ) -> str:
        """XADD the job's entry (creating the queue and its group at its first job); `blobs`:
        the raw sha256s of the blobs it references, concatenated; `refusals`: an S3-tier job's
        refused enqueues its request saw (JobRecord.enqueue_refusals)."""
        args: list[Any] = [
            f"{min_id_ms}-0",
            queue,
            keys.CONSUMER_GROUP,
            job_id,
            blobs,
            refusals or "",
        ]
        if inline is not None:
            args.append(inline)
        # MINID ~ drops entries older than the retention (their jobs have expired anyway);
        # approximate trimming is ~3x cheaper than exact and never touches recent entries.
        return text(
            self._run(
                "enqueue_append", [keys.queue(namespace, queue), keys.queue_names(namespace)], args
            )
        )

    def record_entry(self, job_id: str, stream_id: str, *, overwrite: bool = False) -> bool:
        """Remember the job's queue entry id; without overwrite only if none is recorded."""
        return bool(
            self._run(
                "enqueue_record_entry", [keys.job(job_id)], [stream_id, 1 if overwrite else 0]
            )
        )
