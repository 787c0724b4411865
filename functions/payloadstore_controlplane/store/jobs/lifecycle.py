"""The life cycle beyond one delivery: heartbeats (lifecycle_heartbeat.lua), cancel
(lifecycle_cancel.lua), and the upkeep a poll does when it finds nothing: stale consumers and
unused queues (queues_collect.lua)."""

from __future__ import annotations

from typing import Any

import redis

from .. import keys
from ..records import (
    CancelledQueued,
    CancelRequested,
    Ended,
    HeartbeatTaken,
    LeaseMismatch,
    Missing,
    number,
    post_digest,
    text,
)
from ._base import StoreBase

# A cancel looks for a hashless inline job's entry from its id's time on, then back to this long
# before it (the id's clock is the control plane's, the entry's Redis's), through at most this
# many entries; one not found goes at its delivery, as before.
ENTRY_SEARCH_SLACK_MS = 1000
INLINE_ENTRY_SEARCH = 200


class LifecycleSteps(StoreBase):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._last_prune: dict[str, float] = {}
        self._last_collect: dict[str, float] = {}

    def heartbeat(
        self, job_id: str, namespace: str, lease: str, expires_ms: int
    ) -> HeartbeatTaken | LeaseMismatch | Missing:
        """Move the lease's expiry to `expires_ms` if `lease` is the running delivery's (and
        keep the job hash at least RESULT_TTL_S past it)."""
        reply = self._run_on_job(
            "lifecycle_heartbeat",
            job_id,
            [keys.job(job_id)],
            [namespace, lease, expires_ms, self._ttl],
        )
        match reply[0]:
            case "ok":
                return HeartbeatTaken(
                    cancel_requested=reply[1] == "1",
                    entry_id=reply[2],
                    queue=reply[3],
                    consumer=reply[4],
                )
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
        return Missing()

    def touch_entry(self, namespace: str, queue: str, stream_id: str, consumer: str) -> None:
        """Restart the pending entry's idle clock for its consumer (XCLAIM ... JUSTID keeps the
        delivery count), so pollers do not even try to reclaim a job whose lease is alive.

        The queue may be gone by now: the job ended between the heartbeat's script and this
        call, and an idle poll collected its empty queue (NOGROUP). Nothing is left to keep
        alive then, and the heartbeat answers from its script (the race explorer's race C)."""
        try:
            self._r.xclaim(
                keys.queue(namespace, queue),
                keys.CONSUMER_GROUP,
                consumer,
                0,
                [stream_id],
                justid=True,
            )
        except redis.ResponseError as e:
            if not str(e).startswith("NOGROUP"):
                raise

    def cancel(
        self,
        job_id: str,
        namespace: str,
        inline_queue: str,
        now_ms: int,
        error_json: str,
        created_ms: int,
    ) -> CancelledQueued | CancelRequested | Ended | Missing:
        """`inline_queue`: the queue of a queued inline job that has no hash yet ('' else)."""
        reply = self._run_on_job(
            "lifecycle_cancel",
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [
                namespace,
                inline_queue,
                now_ms,
                self._ttl,
                error_json,
                post_digest("error", error_json),
                created_ms,
            ],
        )
        match reply[0]:
            case "cancelled":
                return CancelledQueued(entry_id=reply[1], queue=reply[2], retries=number(reply[3]))
            case "requested":
                return CancelRequested(consumer=reply[1])
            case "terminal":
                return Ended(reply[1])
        return Missing()

    def find_inline_entry(self, namespace: str, queue: str, job_id: str, created_ms: int) -> str:
        """The queue entry of a queued inline job that has no hash (lifecycle_find_entry.lua):
        its id, or '' when it is not within INLINE_ENTRY_SEARCH entries of its creation time."""
        reply = self._script("lifecycle_find_entry")(
            keys=[keys.queue(namespace, queue)],
            args=[job_id, created_ms, ENTRY_SEARCH_SLACK_MS, INLINE_ENTRY_SEARCH],
        )
        return text(reply) or ""

    def signal_cancel(self, namespace: str, daemon_id: str, job_id: str, ttl_s: int) -> None:
        """Wake the leases long-poll of the daemon holding `job_id` (lifecycle_signal.lua). A
        wake-up only, reported to nobody: no wait for replicas."""
        self._run(
            "lifecycle_signal", [keys.cancels(namespace, daemon_id)], [job_id, ttl_s], acked=False
        )

    def wait_signal(self, namespace: str, daemon_id: str, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` for the daemon's cancel list to get an element; the job ids
        it held (emptied: the caller reads the job hashes, which are the truth)."""
        key = keys.cancels(namespace, daemon_id)
        if timeout_s > 0:
            # BLPOP's timeout 0 would block for ever: only ever called with time left.
            popped = self._r.blpop([key], timeout=max(timeout_s, 0.001))
            if popped is None:
                return []
            first = [text(popped[1])]
        else:
            first = []
        rest = self._r.lpop(key, 64) or []
        return first + [text(x) for x in rest]

    def forget_signals(self, namespace: str, daemon_id: str, job_ids: list[str]) -> None:
        """Drop the wake-ups of these jobs from the daemon's cancel list (answered already)."""
        key = keys.cancels(namespace, daemon_id)
        with self._r.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.lrem(key, 0, job_id)
            pipe.execute()

    def prune_consumers(
        self, namespace: str, queues: list[str], idle_ms: int, every_s: float
    ) -> list[str]:
        """Remove the group's consumers idle for `idle_ms` with nothing pending, at most once
        per `every_s` per stream and container. A consumer that reads again is created again."""
        removed: list[str] = []
        now = self._mono()
        for queue in queues:
            key = keys.queue(namespace, queue)
            if now - self._last_prune.get(key, float("-inf")) < every_s:
                continue
            self._last_prune[key] = now
            try:
                consumers = self._r.xinfo_consumers(key, keys.CONSUMER_GROUP)
            except redis.ResponseError:
                continue  # no stream or no group yet
            for c in consumers:
                if int(c.get("pending", 0)) == 0 and int(c.get("idle", 0)) >= idle_ms:
                    self._r.xgroup_delconsumer(key, keys.CONSUMER_GROUP, c["name"])
                    removed.append(text(c["name"]))
        return removed

    def collect_queues(
        self, namespace: str, queues: list[str], now_ms: int, idle_ms: int, every_s: float
    ) -> list[str]:
        """Delete the streams of `queues` that are empty, have nothing pending and had no entry
        added for `idle_ms` (and their names), at most once per `every_s` per stream and
        container. The next enqueue creates the queue again."""
        removed: list[str] = []
        now = self._mono()
        idle_before_ms = now_ms - idle_ms
        for queue in queues:
            key = keys.queue(namespace, queue)
            if now - self._last_collect.get(key, float("-inf")) < every_s:
                continue
            self._last_collect[key] = now
            names = keys.queue_names(namespace)
            # Upkeep: nothing is reported done, so nothing waits for replicas.
            if self._run("queues_collect", [key, names], [queue, idle_before_ms], acked=False):
                self.forget_stream(key)
                removed.append(queue)
        return removed
