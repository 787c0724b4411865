"""Operating the queues: listing a queue's jobs by state, and retrying a job that ended.

Queued and running jobs are listed from the queue stream itself (operate_scan.lua: the entries
after the consumer group's last-delivered id were never handed out; the ones up to it are in
the pending list, since a finished job's entry is deleted). Jobs that ended are listed from the
queue's ended-jobs streams (`keys.ended`, one per group of states, written by
completion_settle.lua when the job's entry is dropped): one small entry per job, no copy of
the job. Each listed job is then read from its own hash, which says its current state: an
index entry of a job retried since (its `rt` moved on) is skipped.

A retry is the job slot first (operate_retry.lua: the job is `queued` with `x` = '*' and `rq`
= its entry before), then the namespace slot (operate_requeue.lua: the job gets exactly one
deliverable entry: its previous one if still in the stream and no daemon holds it, else one
appended from that entry's fields or from the args and blob list kept when it ended; a record
says which, so a retry sent again adds nothing), then the job slot again (requeue_record.lua:
that entry becomes the job's `x`, so no other can start it). A crash in between leaves the job
queued with `rq` set: the client's retry of the retry is answered 'resume' and does the
remaining steps then."""

from __future__ import annotations

from typing import Any

import redis

from ...models.domain import Tier
from .. import keys
from ..job_hash import decode_job
from ..records import (
    CancelledQueued,
    Ended,
    EndedEntry,
    JobRecord,
    Missing,
    RetryRefused,
    RetryStarted,
    ScannedEntry,
    StaleEntry,
    Started,
    job_id_bytes,
    job_id_from_bytes,
    number,
    post_digest,
    text,
)
from . import layout1
from ._base import StoreBase, decoded

# The most queue entries read looking for a queued inline job's entry (it has no hash, so no
# entry id): from its creation time, an entry appended later than this many others is not shown.
INLINE_ARGS_SEARCH = 200


class OperateSteps(StoreBase):
    def scan_queue(
        self, namespace: str, queue: str, mode: str, cursor: str, count: int
    ) -> tuple[list[ScannedEntry], str]:
        """Up to `count` entries of the queue stream, newest first, below `cursor`: `mode`
        'queued' (never delivered) or 'running' (delivered, not acknowledged); and the cursor
        of the next page ('' at the end)."""
        reply = self._script("operate_scan")(
            keys=[keys.queue(namespace, queue)],
            args=[keys.CONSUMER_GROUP, mode, cursor, count],
        )
        entries = [
            ScannedEntry(
                stream_id=text(reply[i]),
                job_id=text(reply[i + 1]),
                inline_size=None if int(reply[i + 2]) < 0 else int(reply[i + 2]),
            )
            for i in range(1, len(reply), 3)
        ]
        return entries, text(reply[0])

    def ended_entries(
        self, namespace: str, queue: str, group: str, cursor: str, count: int
    ) -> tuple[list[EndedEntry], str]:
        """Up to `count` entries of the queue's ended-jobs index of `group`, newest first, below
        `cursor`; and the cursor of the next page ('' at the end)."""
        rows = self._r.xrevrange(
            keys.ended(namespace, queue, group),
            max=f"({cursor}" if cursor else "+",
            min="-",
            count=count,
        )
        entries = []
        for stream_id, fields in rows:
            raw = fields.get(b"j")
            if not raw or len(raw) != 16:
                continue
            entries.append(
                EndedEntry(
                    stream_id=text(stream_id),
                    job_id=job_id_from_bytes(raw),
                    retries=number(fields.get(b"r")),
                )
            )
        next_cursor = text(rows[-1][0]) if len(rows) == count else ""
        return entries, next_cursor

    def operation_claim(
        self, namespace: str, key: str, fingerprint: str, running_s: int
    ) -> tuple[str, str | None]:
        """Claim an Idempotency-Key for a request (operate_once.lua): ('claimed', None), ('running',
        None) while the first request of the key runs, ('mismatch', None) for a key used by
        another request, or ('answer', '<status> <json>') the first request answered."""
        reply = decoded(
            self._run(
                "operate_once",
                [keys.operation(namespace, key)],
                ["claim", fingerprint, running_s * 1000],
            )
        )
        return reply[0], (reply[1] if len(reply) > 1 else None)

    def operation_done(
        self, namespace: str, key: str, fingerprint: str, answer: str, keep_s: int
    ) -> bool:
        """Keep the answer of a claimed request for `keep_s` (IDEMPOTENCY_TTL_S)
        (operate_answer.lua). False when Redis is full: the answer is not kept and the claim
        is dropped (a repeat runs again, as one without a key), so keyed requests that free
        nothing never grow a full Redis by a record each."""
        try:
            self._run(
                "operate_answer",
                [keys.operation(namespace, key)],
                [fingerprint, keep_s * 1000, answer],
            )
        except redis.exceptions.OutOfMemoryError:
            self.operation_release(namespace, key, fingerprint)
            return False
        return True

    def operation_release(self, namespace: str, key: str, fingerprint: str) -> None:
        """Drop the claim of a request that failed (nothing to keep): a retry runs it anew."""
        self._run("operate_once", [keys.operation(namespace, key)], ["release", fingerprint, 0])

    # The value of a next_taken key while its first post still takes its deliveries.
    NEXT_RUNNING = "~"

    def next_claim(self, namespace: str, key: str, keep_s: int) -> bool:
        """Claim the key for the post with `next` that takes its deliveries (True); False when
        an earlier post with it has (it runs, or `remember_next` kept what it took)."""
        claimed = self._r.set(
            keys.next_taken(namespace, key), self.NEXT_RUNNING, nx=True, ex=keep_s
        )
        return bool(claimed)

    def remember_next(
        self, namespace: str, key: str, taken: list[tuple[str, str]], keep_s: int
    ) -> None:
        """The (job id, lease) of each delivery a post with `next` took, kept `keep_s`."""
        value = ",".join(f"{job_id}:{lease}" for job_id, lease in taken)
        self._r.set(keys.next_taken(namespace, key), value, ex=keep_s)

    def forget_next(self, namespace: str, key: str) -> None:
        """Drop the key of a post with `next` that took nothing: a repeat takes anew."""
        self._r.delete(keys.next_taken(namespace, key))

    def next_taken(self, namespace: str, key: str) -> list[tuple[str, str]] | None:
        """What `remember_next` kept for the key, or None (none kept yet: the first post still
        takes its deliveries, or it took none, or expired)."""
        raw = self._r.get(keys.next_taken(namespace, key))
        if raw is None or text(raw) == self.NEXT_RUNNING:
            return None
        pairs = [item.partition(":") for item in text(raw).split(",") if item]
        return [(job_id, lease) for job_id, _, lease in pairs]

    def lease_expiry_ms(self, job_id: str) -> int | None:
        """The current delivery's lease expiry (`lx`, ms since epoch), or None."""
        raw = self._r.hget(keys.job(job_id), "lx")
        return None if raw is None else int(raw)

    def read_jobs(self, job_ids: list[str], *, errors: bool) -> dict[str, JobRecord]:
        """The hashes of many jobs (one pipeline; in cluster mode, one per node), and with
        `errors` the done list's element of those that ended with an error (a second one: an
        inline result is never read for a listing)."""
        if not job_ids:
            return {}
        pipe = self._r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(keys.job(job_id))
        raws = dict(zip(job_ids, pipe.execute(), strict=True))
        for job_id, raw in raws.items():
            if layout1.is_legacy(raw):
                layout1.migrate(self, job_id)
                raws[job_id] = self._r.hgetall(keys.job(job_id))
        failed = [j for j, raw in raws.items() if raw and raw.get(b"rk") == b"e"]
        done: dict[str, Any] = {}
        if errors and failed:
            pipe = self._r.pipeline(transaction=False)
            for job_id in failed:
                pipe.lindex(keys.done(job_id), 0)
            done = dict(zip(failed, pipe.execute(), strict=True))
        return {
            job_id: decode_job(job_id, raw, done.get(job_id), done_read=job_id in done)
            for job_id, raw in raws.items()
            if raw
        }

    def inline_args(
        self, namespace: str, queue: str, job_id: str, entry_id: str | None, created_ms: int
    ) -> bytes | None:
        """An inline job's argument bytes for an operator's look (operate_args.lua): from its
        queue entry or the args kept at its end; None when neither holds them (a succeeded
        job's are freed at its end)."""
        reply = self._script("operate_args")(
            keys=[
                keys.queue(namespace, queue),
                keys.kept_args(namespace, job_id),
                keys.requeued(namespace, job_id),
            ],
            args=[entry_id or "", job_id, max(created_ms - 1000, 0), INLINE_ARGS_SEARCH],
        )
        if not reply or reply[0] in (b"none", "none"):
            return None
        value = reply[1]
        return value if isinstance(value, bytes) else str(value).encode()

    def args_kept(self, namespace: str, job_id: str) -> bool:
        """Whether the inline args of an ended job are kept (completion_settle.lua)."""
        return bool(self._r.exists(keys.kept_args(namespace, job_id)))

    def kept_blob_list(self, namespace: str, job_id: str) -> bytes:
        """The blob list (32 raw bytes per blob) kept beside an ended job's args
        (completion_settle.lua): b'' for a job that references none."""
        return self._r.get(keys.kept_blobs(namespace, job_id)) or b""

    def retry(
        self, job_id: str, namespace: str, now_ms: int, states: tuple[str, ...]
    ) -> RetryStarted | RetryRefused | Missing:
        """Queue a job in one of `states` again (operate_retry.lua); the caller appends its
        entry (`requeue`)."""
        reply = self._run_on_job(
            "operate_retry",
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [namespace, now_ms, self._ttl, ",".join(states)],
        )
        match reply[0]:
            case "ok" | "resume":
                return RetryStarted(
                    attempts=number(reply[1]),
                    retries=number(reply[2]),
                    tier=Tier.INLINE if reply[3] == "i" else Tier.S3,
                    queue=reply[4],
                    resumed=reply[0] == "resume",
                    previous_entry=reply[5] if len(reply) > 5 else "",
                )
            case "refused":
                return RetryRefused(reply[1])
        return Missing()

    def purge_job(
        self,
        job_id: str,
        namespace: str,
        queue: str,
        entry_id: str,
        *,
        inline: bool,
        now_ms: int,
        error_json: str,
        created_ms: int,
    ) -> CancelledQueued | Started | Ended | StaleEntry | Missing:
        """Purge's decision for an entry it scanned as queued (operate_purge.lua): the job
        cancelled if it is still queued on it, else left as it is."""
        reply = self._run_on_job(
            "operate_purge",
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [
                namespace,
                entry_id,
                queue,
                "1" if inline else "0",
                now_ms,
                self._ttl,
                error_json,
                post_digest("error", error_json),
                created_ms,
            ],
        )
        match reply[0]:
            case "cancelled":
                return CancelledQueued(entry_id=entry_id, queue=queue, retries=number(reply[1]))
            case "started":
                return Started()
            case "ended":
                return Ended(reply[1], retries=number(reply[2]))
            case "stale":
                return StaleEntry()
        return Missing()

    def record_requeue(
        self,
        job_id: str,
        entry_id: str,
        *,
        lost: bool = False,
        replaced: str = "",
        retries: int | None = None,
    ) -> str:
        """Name the requeue's entry as the job's (requeue_record.lua): a retry's once
        operate_requeue gave it one (`retries`: the job's after that retry), a payload_lost
        requeue's (`lost`; `replaced`: the entry it drops, '' none known) once appended.
        'recorded' | 'kept' (the job runs on `replaced`: drop the new entry, keep that one) |
        'moved' (a delivery, an end or another retry since) | 'missing'."""
        if not lost and retries is None:
            # the record step matches this retry by its count: without it, nothing is recorded
            raise TypeError("a retry's record needs the job's retries after that retry")
        mode = "lost" if lost else "retry"
        reply = self._run_on_job(
            "requeue_record",
            job_id,
            [keys.job(job_id)],
            [entry_id, mode, replaced, "" if retries is None else retries],
        )
        return reply[0]

    def requeue(
        self,
        namespace: str,
        queue: str,
        job_id: str,
        tier: Tier,
        *,
        min_id_ms: int,
        retries: int,
        previous_entry: str,
    ) -> str:
        """Give a retried job (now at `retries`) its one deliverable entry
        (operate_requeue.lua): the entry id appended, or '' when an entry of the job still in
        the stream runs it (or this retry's entry exists already: a retry sent again)."""
        reply = self._run(
            "operate_requeue",
            [
                keys.queue(namespace, queue),
                keys.queue_names(namespace),
                keys.kept_args(namespace, job_id),
                keys.kept_blobs(namespace, job_id),
                keys.requeued(namespace, job_id),
                keys.failed_jobs(namespace, queue),
            ],
            [
                f"{min_id_ms}-0",
                queue,
                keys.CONSUMER_GROUP,
                job_id,
                "i" if tier is Tier.INLINE else "s",
                retries,
                previous_entry,
                self._ttl * 1000,
                job_id_bytes(job_id),
            ],
        )
        return decoded([reply])[0]
