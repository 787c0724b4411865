"""Delivery: a daemon's poll takes one entry (delivery_take.lua, namespace slot), then the job
becomes a delivery with a fresh lease (delivery_start.lua, job slot). A crash in between leaves
the entry pending, and a later scan of the pending list hands it out again after the
visibility timeout.

Both steps wait for the replicas as every step does, but a shortfall does not refuse the
delivery (`lag_ok`): a delivery acknowledges no client write, and the entry is already in this
daemon's pending list on the primary, so a 503 would hold the job for VISIBILITY_TIMEOUT_S. If
the primary dies before the replica has the take, the promoted replica still has the job
queued and delivers it again (at least once); the first daemon's lease is then unknown there,
so its result post is refused (409 or 404) and only the second delivery's counts. A
result post is acknowledged only once replicated, and replication is in order: by then the
take and the start are on the replica too."""

from __future__ import annotations

from typing import Any

from ...models.domain import Tier
from .. import keys
from ..records import (
    DEFAULT_CONTENT_TYPE,
    CancelledAtDelivery,
    Delivered,
    DeliveryLimit,
    Ended,
    IssuedKey,
    Leased,
    Missing,
    QueueEntry,
    StaleEntry,
    checksum_of_hex,
    fixed_error_digest,
    number,
    text,
)
from ._base import StoreBase


def _fields(flat) -> dict:
    """A stream entry's fields as Lua answers them (a flat list) as redis-py's dict."""
    if isinstance(flat, dict):
        return flat
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


class DeliverySteps(StoreBase):
    # A container scans the pending list of one stream for timed-out deliveries at most this
    # often while the scans find nothing.
    RECLAIM_EVERY_S = 1.0
    # XAUTOCLAIM calls per stream and poll (each looks at up to 10 pending entries); the scan
    # resumes from its cursor at the next poll.
    RECLAIM_CALLS = 50

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Per stream: where this container's next pending-list scan resumes (XAUTOCLAIM cursor).
        self._reclaim_cursor: dict[str, str] = {}
        self._last_reclaim: dict[str, float] = {}

    def forget_stream(self, key: str) -> None:
        super().forget_stream(key)
        self._reclaim_cursor.pop(key, None)
        self._last_reclaim.pop(key, None)

    def _take_entry(
        self,
        stream_keys: list[str],
        consumer: str,
        min_idle_ms: int,
        *,
        reclaim: bool,
        room: int | None = None,
    ) -> tuple[str, int, str, Any, list[str]]:
        """One run of delivery_take.lua: (status, stream number from 1 or 0, entry id, fields,
        wake ids). `room`: the most inline bytes the entry may carry (None: any).

        The pending list of a stream is scanned at most once per RECLAIM_EVERY_S per container
        while the scans find nothing; after a hit it is scanned again at once, so a backlog of
        timed-out entries drains at poll speed."""
        now = self._mono()
        cursors = []
        for key in stream_keys:
            due = now - self._last_reclaim.get(key, float("-inf")) >= self.RECLAIM_EVERY_S
            cursors.append(self._reclaim_cursor.get(key, "0-0") if reclaim and due else "")
        # lag_ok: the entry is in this consumer's pending list on the primary whatever the
        # replicas say; refusing it now would hold it for the visibility timeout.
        reply = self._run(
            "delivery_take",
            stream_keys,
            [
                keys.CONSUMER_GROUP,
                consumer,
                min_idle_ms,
                self.RECLAIM_CALLS,
                "" if room is None else max(room, 0),
                *cursors,
            ],
            lag_ok=True,
        )
        status, number, entry_id, fields = text(reply[0]), int(reply[1]), reply[2], reply[3]
        n = len(stream_keys)
        for key, scanned, cursor in zip(stream_keys, cursors, reply[4 : 4 + n], strict=True):
            if scanned != "":
                self._reclaim_cursor[key] = text(cursor)
                # Nothing timed out there (or the hit is not from it): the next scan waits.
                self._last_reclaim[key] = now
        if status == "claimed":
            # A timed-out delivery: scan that stream again at once (a backlog drains fast).
            self._last_reclaim.pop(stream_keys[number - 1], None)
        if status == "full":
            # A timed-out delivery may have been given back (the cursor is on it): the next
            # poll scans again at once.
            for key in stream_keys:
                self._last_reclaim.pop(key, None)
        if status in ("claimed", "entry"):
            return status, number, text(entry_id), _fields(fields), []
        return status, 0, "", None, [text(w) for w in reply[4 + n : 4 + 2 * n]]

    def read_next(
        self,
        namespace: str,
        queues: list[str],
        consumer: str,
        block_ms: int,
        min_idle_ms: int,
        room: int | None = None,
    ) -> QueueEntry | None:
        """One entry for this consumer: first a timed-out delivery, then a new entry (one
        script, delivery_take.lua); with nothing there, wait up to `block_ms` for an entry to
        be added (XREAD BLOCK, which reads without taking) and try again.
        `room`: the most inline bytes the entry may carry (None: any); an entry heavier than
        that is left where it is, and None is answered at once."""
        stream_keys = [keys.queue(namespace, q) for q in queues]
        deadline = self._mono() + block_ms / 1000
        reclaim = True
        while True:
            status, number, entry_id, fields, wake = self._take_entry(
                stream_keys, consumer, min_idle_ms, reclaim=reclaim, room=room
            )
            if number:
                return QueueEntry.parse(queues[number - 1], entry_id, fields)
            if status == "full":
                return None
            left_ms = int((deadline - self._mono()) * 1000)
            if left_ms <= 0:
                return None
            # Wake when any of the streams gets an entry past what its group delivered (a
            # stream that does not exist yet wakes this at its first enqueue). XREAD moves
            # nothing into a pending list: another daemon may take the entry first, and then
            # this poll simply waits on.
            woke = self._r.xread(dict(zip(stream_keys, wake, strict=True)), count=1, block=left_ms)
            if not woke:
                return None
            reclaim = False

    def start_delivery(
        self,
        entry: QueueEntry,
        namespace: str,
        now_ms: int,
        *,
        lease: str,
        lease_expires_ms: int,
        consumer: str,
        max_deliveries: int,
        limit_error: str,
        cancel_error: str,
    ) -> Delivered | StaleEntry | Leased | Ended | CancelledAtDelivery | DeliveryLimit | Missing:
        size = "" if entry.inline is None else str(len(entry.inline))
        reply = self._run_on_job(
            "delivery_start",
            entry.job_id,
            [keys.job(entry.job_id), keys.done(entry.job_id)],
            [
                entry.stream_id,
                now_ms,
                namespace,
                entry.queue,
                size,
                self._ttl,
                lease,
                lease_expires_ms,
                consumer,
                max_deliveries,
                limit_error,
                fixed_error_digest(limit_error),
                cancel_error,
                fixed_error_digest(cancel_error),
                entry.refusals or "",
            ],
            lag_ok=True,
        )
        match reply[0]:
            case "ok":
                attempt, tier_code, args_size, content_type, checksum = reply[1:6]
                part_bytes, whole = (reply[6:8] + ["", ""])[:2]
                sha256, crc = checksum_of_hex(checksum or None)
                composite, whole_crc = checksum_of_hex(whole or None)
                tier = Tier.INLINE if tier_code == "i" else Tier.S3
                args = None
                if tier is Tier.S3 and args_size:
                    args = IssuedKey(
                        size=int(args_size),
                        content_type=content_type or DEFAULT_CONTENT_TYPE,
                        sha256=sha256,
                        presigns=0,
                        issued_ms=None,
                        part_bytes=int(part_bytes) if part_bytes else None,
                        composite_sha256=composite,
                        crc64nvme=crc or whole_crc,
                    )
                return Delivered(attempt=int(attempt), tier=tier, args=args)
            case "stale":
                return StaleEntry()
            case "leased" | "wait":
                # 'wait': a retried job's entry before the retry, not yet the retry's: left
                # pending as a live lease's is (delivery_start.lua).
                return Leased()
            case "terminal":
                return Ended(reply[1], retries=number(reply[2]) if len(reply) > 2 else 0)
            case "cancelled":
                return CancelledAtDelivery(retries=number(reply[1]))
            case "limit":
                return DeliveryLimit(int(reply[1]), retries=number(reply[2]))
        return Missing()

    def drop_entry(self, namespace: str, queue: str, stream_id: str) -> None:
        """Acknowledge and delete a queue entry (frees inline bytes at once)."""
        if not stream_id:
            return
        key = keys.queue(namespace, queue)
        pipe = self._r.pipeline(transaction=False)
        pipe.xack(key, keys.CONSUMER_GROUP, stream_id)
        pipe.xdel(key, stream_id)
        pipe.execute()

    def read_entry(self, namespace: str, queue: str, stream_id: str) -> QueueEntry | None:
        rows = self._r.xrange(keys.queue(namespace, queue), min=stream_id, max=stream_id, count=1)
        return QueueEntry.parse(queue, text(rows[0][0]), rows[0][1]) if rows else None
