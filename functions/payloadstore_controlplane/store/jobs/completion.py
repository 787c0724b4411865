"""Completion: a running job ends with a result, an error or payload_corrupt
(completion_complete.lua), or its daemon reports payload_lost (completion_payload_lost.lua:
requeue once, or end). The job slot goes terminal first; the caller then drops the queue
entry (namespace slot). Result waiters block on the done list."""

from __future__ import annotations

import time
from typing import Any

import redis

from ...models.domain import JobStatus
from .. import keys
from ..records import (
    GROUP_OF_STATE,
    Completed,
    LeaseMismatch,
    LostForGood,
    Missing,
    NotRunning,
    OtherResult,
    Requeued,
    ResultForm,
    SamePost,
    job_id_bytes,
    number,
    text,
)
from ._base import StoreBase

# How often a result wait polls the done list while Redis refuses BLMOVE (past maxmemory).
DONE_POLL_S = 0.1
# How the result is kept (`rk`): inline bytes or error JSON in the done list, or the S3 key.
_RESULT_KIND = {"inline": "i", "s3": "s", "error": "e"}


def throughput_field(group: str | None, now_ms: int) -> str:
    """The field of keys.throughput an end counts in: `s<MM>` / `f<MM>` (minute of the hour),
    '' for a group not charted (cancelled) or no index entry."""
    if group not in ("succeeded", "failed"):
        return ""
    minute = (now_ms // 1000 % keys.THROUGHPUT_SPAN_S) // keys.THROUGHPUT_BUCKET_S
    return f"{group[0]}{minute:02d}"


class CompletionSteps(StoreBase):
    def complete(
        self,
        job_id: str,
        new_state: JobStatus,
        post_digest: bytes,
        now_ms: int,
        done_value: bytes | str,
        form: ResultForm,
        *,
        lease: str,
        cancel_ack: bool = False,
        namespace: str = "",
        result_blobs: list[str] | None = None,
    ) -> Completed | SamePost | OtherResult | NotRunning | LeaseMismatch | Missing:
        """Finish a running job (job slot). With `namespace`, a job of another namespace is
        Missing (callers that have not loaded the job first)."""
        flat: list[Any] = [
            new_state.value,
            post_digest,
            now_ms,
            self._ttl,
            done_value,
            lease,
            "1" if cancel_ack else "0",
            namespace,
            "rk",
            _RESULT_KIND[form],
        ]
        # The result's blobs, one field of 32 raw bytes each (values <= 64 B keep the hash a
        # listpack): about 37 B per blob in the hash.
        for i, sha in enumerate(result_blobs or ()):
            flat += [f"rb{i}", bytes.fromhex(sha)]
        reply = self._run_on_job(
            "completion_complete", job_id, [keys.job(job_id), keys.done(job_id)], flat
        )
        match reply[0]:
            case "ok":
                return Completed(
                    entry_id=reply[1],
                    queue=reply[2],
                    state=JobStatus(reply[3]),
                    retries=number(reply[4]),
                    consumer=reply[5] if len(reply) > 5 else "",
                )
            case "same":
                return SamePost(
                    entry_id=reply[1], queue=reply[2], state=reply[3], retries=number(reply[4])
                )
            case "conflict":
                return OtherResult(reply[1])
            case "not_running":
                return NotRunning(reply[1])
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
        return Missing()

    def payload_lost(
        self,
        job_id: str,
        max_requeues: int,
        post_digest: bytes,
        now_ms: int,
        error_json: str,
        *,
        lease: str,
    ) -> Requeued | LostForGood | SamePost | NotRunning | LeaseMismatch | Missing:
        reply = self._run_on_job(
            "completion_payload_lost",
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [max_requeues, post_digest, now_ms, self._ttl, error_json, lease],
        )
        match reply[0]:
            case "requeue":
                return Requeued(entry_id=reply[1], queue=reply[2])
            case "terminal":
                return LostForGood(
                    entry_id=reply[1],
                    queue=reply[2],
                    retries=number(reply[3]),
                    consumer=reply[4] if len(reply) > 4 else "",
                )
            case "same":
                return SamePost(
                    entry_id=reply[1], queue=reply[2], state=reply[3], retries=number(reply[4])
                )
            case "not_running":
                return NotRunning(reply[1])
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
        return Missing()

    def release_lost_entry(
        self, namespace: str, queue: str, stream_id: str, *, visibility_ms: int
    ) -> str:
        """The payload_lost requeue's entry it will not run the job from
        (completion_lost_release.lua): deleted if no daemon holds it, else left pending and
        made due for the next poll's pending-list scan, which drops it as stale or runs the job
        from it. 'dropped' | 'released' | 'gone'. Upkeep: reported to nobody, so no WAIT."""
        if not stream_id:
            return "gone"
        reply = self._run(
            "completion_lost_release",
            [keys.queue(namespace, queue)],
            [keys.CONSUMER_GROUP, stream_id, visibility_ms],
            acked=False,
        )
        return text(reply)

    def settle(
        self,
        namespace: str,
        queue: str,
        job_id: str,
        entry_id: str,
        *,
        state: str | None,
        retries: int,
        now_ms: int,
        index_once: bool = False,
        keep_args: bool = False,
        undelivered_only: bool = False,
        consumer: str = "",
    ) -> bool:
        """The namespace-slot half of a job's end (completion_settle.lua): drop its queue entry
        (if named), index it among the queue's ended jobs under `state`'s group (None: no index
        entry; `index_once`: only if this call dropped the entry, for a repeated post), and with
        `keep_args` keep the entry's inline bytes for a retry; `undelivered_only` leaves an
        entry a daemon took (purge). A retry that came after the end (`retries` is the job's
        when it ended) and relies on the entry keeps it deliverable: only the delivery holding it (`consumer`, the
        caller's; '' none) turns it into the retry's entry, any other holder's is left to it.
        True when this call dropped it."""
        group = GROUP_OF_STATE.get(JobStatus(state)) if state else None
        ttl_ms = self._ttl * 1000
        index = "" if group is None else ("if_dropped" if index_once else "add")
        return bool(
            self._run(
                "completion_settle",
                [
                    keys.queue(namespace, queue),
                    keys.ended(namespace, queue, group or "failed"),
                    keys.kept_args(namespace, job_id),
                    keys.kept_blobs(namespace, job_id),
                    keys.requeued(namespace, job_id),
                    keys.failed_jobs(namespace, queue),
                    keys.throughput(namespace, queue, now_ms / 1000),
                ],
                [
                    keys.CONSUMER_GROUP,
                    entry_id,
                    job_id_bytes(job_id),
                    index,
                    retries,
                    f"{max(now_ms - ttl_ms, 0)}-0",
                    ttl_ms,
                    "1" if keep_args else "0",
                    "1" if undelivered_only else "0",
                    consumer,
                    throughput_field(group if index else None, now_ms),
                    (2 * keys.THROUGHPUT_SPAN_S) * 1000,
                    now_ms,
                ],
            )
        )

    def done_value(self, job_id: str) -> bytes | None:
        """The done list's element: inline result bytes, error JSON, or b'' (S3 result)."""
        return self._r.lindex(keys.done(job_id), 0)

    def wait_done(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job's done list exists or the timeout passes.

        BLMOVE from the list to itself rotates a one-element list in place: every waiter sees
        the element and nobody consumes it (unlike BLPOP); a list costs far less than a
        one-entry stream (bench/RESULTS.md)."""
        key = keys.done(job_id)
        if timeout_s <= 0:
            return bool(self._r.exists(key))
        try:
            return self._r.blmove(key, key, timeout_s, "RIGHT", "LEFT") is not None
        except redis.exceptions.OutOfMemoryError:
            # Redis flags BLMOVE denyoom (though moving an element onto its own list adds
            # nothing): past maxmemory it refuses the wait, and a result read must not fail
            # because Redis is full (issue 43). EXISTS is allowed: poll it until the timeout.
            return self._poll_done(key, timeout_s)

    def _poll_done(self, key: str, timeout_s: float) -> bool:
        deadline = self._mono() + timeout_s
        while not self._r.exists(key):
            left = deadline - self._mono()
            if left <= 0:
                return False
            time.sleep(min(DONE_POLL_S, left))
        return True
