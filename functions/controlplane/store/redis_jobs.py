"""Jobs, queues and results in Redis: the store that runs the job life cycle.

The scripts are in `store/jobs/*.lua`, one file per step, each opening with its KEYS/ARGV
contract; this module registers them, builds their arguments and parses their answers. The
layout (job hash fields, keys) is documented in `keys.py` and, byte by byte, in docs/design.md
("Redis layout"). Every script touches keys of one hash tag (one cluster slot). Steps that span
the job slot and the namespace slot are ordered so a crash between them leaves something the
next request or the visibility timeout repairs, never a lost job and never a job id handed out
for a job that is in no queue:

- inline enqueue: one namespace-slot script (idempotency lookup in the inline index, XADD,
  index entry, queue set, the group of a new stream) -- all or nothing, so an answer with a job
  id means the entry exists.
- S3 enqueue: job hash `awaiting_upload` -> `queued` (job slot) -> XADD (namespace slot) ->
  record the entry id `x` if none is recorded yet (job slot). A retry of an enqueue whose `x`
  is missing appends again; a delivery whose entry id is not the recorded `x` drops that entry,
  so a doubled append never runs the job twice. An enqueue answers only after its own append.
- delivery: one namespace-slot script takes one entry (a timed-out delivery from the pending
  list, scanned from a cursor, else a new entry; never more than the one answered) -> job hash
  `running` (job slot); a crash in between leaves the entry pending, and the next scan hands it
  out again after the visibility timeout. Waiting for work is a plain XREAD BLOCK, which takes
  nothing.
- result/failure: the job hash goes terminal and the done list is written (job slot) -> XACK +
  XDEL (namespace slot); an entry left pending is reclaimed, and a delivery of an entry whose
  job is already terminal only drops the entry.
- payload_lost requeue: job hash `queued` with `x` = '*' (job slot) -> XADD a new entry, drop
  the old one (namespace slot): whichever entry is delivered first becomes the job's.

A client re-sends a command after a reply timeout, so every script answers a re-send for the
same lease, state and arguments as it answered the first time (see each script's header).

Scripts that add data (presign, enqueue) run with the default script flags: under `maxmemory`
Redis refuses them before they start (OutOfMemoryError, all or nothing). Scripts on the drain
path (delivery, completion, failure) carry `allow-oom`: they write a few bytes and lead to XDEL
of queue entries, so a full Redis can always be drained by the daemons. The high-water marks of
`logic/guard.py` keep enqueues from reaching the wall in the first place.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, overload

import redis

from . import jobs, keys

DEFAULT_CONTENT_TYPE = "application/msgpack"
AWAITING_UPLOAD = "awaiting_upload"


# Only a missing value decodes to None: a reply's ids, keys and statuses are never None.
@overload
def _s(value: None) -> None: ...
@overload
def _s(value: bytes | str) -> str: ...
def _s(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any, default: int = 0) -> int:
    return default if value in (None, b"", "") else int(value)


def sha_raw(hex_digest: str | None) -> bytes | None:
    return bytes.fromhex(hex_digest) if hex_digest else None


def sha_hex(raw: bytes | None) -> str | None:
    return raw.hex() if raw else None


def digest(kind: str, data: bytes | str) -> bytes:
    """What a result post is remembered by (16 bytes): its kind and sha256 of its content."""
    raw = data.encode() if isinstance(data, str) else data
    return kind[0].encode() + hashlib.sha256(raw).digest()[:15]


@lru_cache(maxsize=64)
def _error_digest(error_json: str) -> bytes:
    """digest() of the few fixed error bodies a delivery may write (limit, cancelled)."""
    return digest("error", error_json)


@dataclass(frozen=True)
class Issued:
    """What the CP issued for one S3 key of a job (args or result)."""

    size: int
    content_type: str
    sha256: str | None  # hex
    presigns: int
    issued_ms: int | None
    # The delivery (attempt) that presigned a result key; None for args and older issues.
    attempt: int | None = None


@dataclass(frozen=True)
class JobRecord:
    """A job as stored (layout 2), decoded. `fields` keeps the raw hash for later additions."""

    job_id: str
    namespace: str
    state: str
    queue: str | None
    tier: str  # "inline" | "s3"
    attempts: int
    stream_id: str | None
    created_ms: int | None
    updated_ms: int | None
    args: Issued | None
    result_issue: Issued | None
    result_kind: str | None  # "i" | "s" | "e"
    fields: dict[str, bytes] = field(default_factory=dict, repr=False)
    # The done list's element when it was read with the hash (`get_job(..., with_done=True)`).
    done: bytes | None = field(default=None, repr=False)
    done_read: bool = field(default=False, repr=False)


def _issued(f: dict[str, bytes], prefix: str, issued_ms: int | None) -> Issued | None:
    if prefix + "z" not in f:
        return None
    return Issued(
        size=int(f[prefix + "z"]),
        content_type=_s(f.get(prefix + "c")) or DEFAULT_CONTENT_TYPE,
        sha256=sha_hex(f.get(prefix + "h")),
        presigns=_int(f.get(prefix + "n"), 0),
        issued_ms=issued_ms,
        attempt=_int(f.get("ra"), 0) or None if prefix == "r" else None,
    )


def decode_job(
    job_id: str, raw: dict, done: bytes | None = None, *, done_read: bool = False
) -> JobRecord:
    f = {_s(k): v for k, v in raw.items()}
    tier = "inline" if f.get("t") == b"i" else "s3"
    args = _issued(f, "p", None) if tier == "s3" else None
    return JobRecord(
        job_id=job_id,
        namespace=_s(f.get("n")) or "",
        state=_s(f.get("s")) or "",
        queue=_s(f.get("q")),
        tier=tier,
        attempts=_int(f.get("a")),
        stream_id=_s(f.get("x")),
        created_ms=_int(f.get("ca"), 0) or None,
        updated_ms=_int(f.get("ua"), 0) or None,
        args=args,
        result_issue=_issued(f, "r", _int(f.get("ri"), 0) or None),
        result_kind=_s(f.get("rk")),
        fields=f,
        done=done,
        done_read=done_read,
    )


@dataclass(frozen=True)
class Delivery:
    """What start_delivery answered for an entry: ('ok', attempt, tier, args facts)."""

    status: str
    attempt: int = 0
    tier: str = ""
    args: Issued | None = None


@dataclass(frozen=True)
class Outcome:
    """What a single-slot state change answered, e.g. ('ok', stream_id, queue)."""

    status: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class InlineJob:
    """An inline job to append: its id and the ms its id carries, its bytes, when its inline
    index hash may expire, and for a job enqueued with an Idempotency-Key the key (layout-1
    lookup) and the 16-char tail every candidate id of that key ends with."""

    job_id: str
    job_ms: int
    data: bytes
    index_until_ms: int
    idempotency_key: str | None = None
    candidate_tail: str = ""


@dataclass(frozen=True)
class Entry:
    """One queue stream entry as read by a daemon's poll (both layouts' field names)."""

    queue: str
    stream_id: str
    job_id: str
    inline: bytes | None

    @classmethod
    def parse(cls, queue: str, stream_id: str, fields: dict) -> Entry:
        job = fields.get(b"j", fields.get(b"job", b""))
        inline = fields.get(b"b", fields.get(b"inline"))
        return cls(queue, stream_id, _s(job) or "", inline)


def _fields(flat) -> dict:
    """A stream entry's fields as Lua answers them (a flat list) as redis-py's dict."""
    if isinstance(flat, dict):
        return flat
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _outcome(reply) -> Outcome:
    return Outcome(_s(reply[0]), tuple(_s(x) if x is not None else "" for x in reply[1:]))


class RedisJobStore:
    # A container scans the pending list of one stream for timed-out deliveries at most this
    # often while the scans find nothing.
    RECLAIM_EVERY_S = 1.0
    # XAUTOCLAIM calls per stream and poll (each looks at up to 10 pending entries); the scan
    # resumes from its cursor at the next poll.
    RECLAIM_CALLS = 50
    # INFO memory is read at most this often per node.
    MEMORY_CACHE_S = 1.0

    def __init__(
        self,
        client: redis.Redis,
        *,
        result_ttl_s: int,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._r = client
        self._ttl = result_ttl_s
        self._mono = monotonic
        script = lambda name: client.register_script(jobs.source(name))
        self._create_args_issue = script("presign_args")
        self._create_result_issue = script("presign_result")
        self._bump_presign = script("presign_count")
        self._begin_ref_enqueue = script("enqueue_begin_ref")
        self._append = script("enqueue_append")
        self._enqueue_inline = script("enqueue_inline")
        self._record_entry = script("enqueue_record_entry")
        self._take = script("delivery_take")
        self._start_delivery = script("delivery_start")
        self._complete = script("completion_complete")
        self._payload_lost = script("completion_payload_lost")
        self._heartbeat = script("lifecycle_heartbeat")
        self._cancel = script("lifecycle_cancel")
        self._collect = script("queues_collect")
        self._migrate = script("layout1_migrate")
        self._last_prune: dict[str, float] = {}
        self._last_collect: dict[str, float] = {}
        # Per stream: where this container's next pending-list scan resumes (XAUTOCLAIM cursor).
        self._reclaim_cursor: dict[str, str] = {}
        self._last_reclaim: dict[str, float] = {}
        self._memory: dict[str, tuple[float, int, int]] = {}

    # -- health and memory -----------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self._r.ping())

    def memory(self, key: str | None = None) -> tuple[int, int]:
        """(used_memory, maxmemory) of the node holding `key` (any node when None), read from
        INFO memory at most once per MEMORY_CACHE_S per node. maxmemory 0 means no limit."""
        node = None
        cache_key = ""
        if key is not None and hasattr(self._r, "get_node_from_key"):
            node = self._r.get_node_from_key(key)
            cache_key = node.name
        now = self._mono()
        hit = self._memory.get(cache_key)
        if hit is not None and now - hit[0] < self.MEMORY_CACHE_S:
            return hit[1], hit[2]
        info = self._r.info("memory", target_nodes=node) if node else self._r.info("memory")
        if node is None and isinstance(info, dict) and "used_memory" not in info:
            # A cluster client asked without a key answers per node: take the fullest.
            info = max(
                info.values(), key=lambda i: i.get("used_memory", 0) / (i.get("maxmemory") or 1)
            )
        used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        self._memory[cache_key] = (now, used, limit)
        return used, limit

    # -- jobs ----------------------------------------------------------------------------

    def _hgetall(self, job_id: str) -> dict:
        raw = self._r.hgetall(keys.job(job_id))
        if raw and b"state" in raw:
            self.migrate(job_id)
            raw = self._r.hgetall(keys.job(job_id))
        return raw

    def get_job(self, job_id: str, *, with_done: bool = False) -> JobRecord | None:
        """The job hash, decoded; with_done also reads the done list's element in the same
        round trip (both keys are in the job's slot)."""
        if not with_done:
            raw = self._hgetall(job_id)
            return decode_job(job_id, raw) if raw else None
        raw, done = self._hgetall_done(job_id)
        if raw and b"state" in raw:
            self.migrate(job_id)
            raw, done = self._hgetall_done(job_id)
        return decode_job(job_id, raw, done, done_read=True) if raw else None

    def _hgetall_done(self, job_id: str) -> tuple[dict, bytes | None]:
        pipe = self._r.pipeline(transaction=False)
        pipe.hgetall(keys.job(job_id))
        pipe.lindex(keys.done(job_id), 0)
        raw, done = pipe.execute()
        return raw, done

    def queued_inline(self, namespace: str, job_id: str, job_ms: int) -> str | None:
        """Queue of an inline job that is (or was) queued and has no hash, from the index."""
        return _s(self._r.hget(keys.inline_index(namespace, job_ms), job_id))

    def done_value(self, job_id: str) -> bytes | None:
        """The done list's element: inline result bytes, error JSON, or b'' (S3 result)."""
        return self._r.lindex(keys.done(job_id), 0)

    def migrate(self, job_id: str) -> bool:
        """Convert a layout-1 job (and its issue records) to layout 2 in place; False if it was
        not a layout-1 job."""
        return bool(
            self._migrate(
                keys=[
                    keys.job(job_id),
                    keys.done(job_id),
                    keys.issue(job_id, "args"),
                    keys.issue(job_id, "result"),
                ],
                args=[DEFAULT_CONTENT_TYPE],
            )
        )

    def _call(self, script, job_id: str, keys_: list[str], args: list) -> Outcome:
        """Run a job-slot script; convert a layout-1 job once and run it again."""
        out = _outcome(script(keys=keys_, args=args))
        if out.status == "legacy":
            self.migrate(job_id)
            out = _outcome(script(keys=keys_, args=args))
        return out

    # -- presign (what the CP issued lives in the job hash) -------------------------------

    @staticmethod
    def _issue_fields(prefix: str, size: int, content_type: str, sha256: str | None) -> list:
        flat: list[Any] = [prefix + "z", size, prefix + "n", 1]
        if content_type != DEFAULT_CONTENT_TYPE:
            flat += [prefix + "c", content_type]
        if sha256:
            flat += [prefix + "h", sha_raw(sha256)]
        return flat

    def create_args_issue(
        self, job_id: str, namespace: str, size: int, content_type: str, sha256: str | None
    ) -> bool:
        """A new job in state awaiting_upload holding what was issued for its args key."""
        flat = [self._ttl, "n", namespace, "s", AWAITING_UPLOAD]
        flat += self._issue_fields("p", size, content_type, sha256)
        return bool(self._create_args_issue(keys=[keys.job(job_id)], args=flat))

    def create_result_issue(
        self,
        job_id: str,
        namespace: str,
        size: int,
        content_type: str,
        sha256: str | None,
        now_ms: int,
        *,
        lease: str,
    ) -> Outcome:
        """Record the result the delivery holding `lease` will upload (presign_result.lua):
        ('ok') recorded, replacing an earlier delivery's | ('exists') this delivery's issue is
        there already | ('lease_mismatch', state) | ('not_running', state) | ('missing')."""
        flat = [
            namespace,
            lease,
            *self._issue_fields("r", size, content_type, sha256),
            "ri",
            now_ms,
        ]
        return self._call(self._create_result_issue, job_id, [keys.job(job_id)], flat)

    def bump_presign(self, job_id: str, kind: str, max_presigns: int) -> int:
        """New presign count; -1 past the cap; 0 when no such key was issued."""
        count_field = "pn" if kind == "args" else "rn"
        return int(self._bump_presign(keys=[keys.job(job_id)], args=[count_field, max_presigns]))

    # -- enqueue -----------------------------------------------------------------------------

    def enqueue_inline(
        self,
        namespace: str,
        queue: str,
        job: InlineJob,
        *,
        min_id_ms: int,
        candidate_minutes: tuple[tuple[str, int], ...] = (),
    ) -> Outcome:
        """Append an inline job in one namespace-slot script, unless one of its key's candidate
        ids (a minute's 10 time chars + `job.candidate_tail`, for each (chars, ms) of
        `candidate_minutes`, newest first) is indexed already.
        -> ('created', job_id, entry_id) | ('exists', job_id, queue) | ('legacy', job_id)"""
        return self.enqueue_inline_many(
            namespace, queue, [job], min_id_ms=min_id_ms, candidate_minutes=candidate_minutes
        )[0]

    def enqueue_inline_many(
        self,
        namespace: str,
        queue: str,
        jobs: list[InlineJob],
        *,
        min_id_ms: int,
        candidate_minutes: tuple[tuple[str, int], ...] = (),
    ) -> list[Outcome]:
        """`enqueue_inline` for many jobs of one queue, in request order, by one script (one
        round trip, single node or cluster: every key is in the namespace's slot). Each job is
        answered as `enqueue_inline` would have answered it alone."""
        index_keys: list[str] = []
        numbers: dict[int, int] = {}  # index span -> KEYS number of its hash

        def index_number(ms: int) -> int:
            span = ms // keys.INLINE_INDEX_SPAN_MS
            number = numbers.get(span)
            if number is None:
                index_keys.append(keys.inline_index(namespace, ms))
                number = numbers[span] = 2 + len(index_keys)  # KEYS[3..]
            return number

        runs: list[list[int]] = []
        if any(job.candidate_tail for job in jobs):
            for _, ms in candidate_minutes:
                number = index_number(ms)
                if runs and runs[-1][0] == number and runs[-1][1] < 99:
                    runs[-1][1] += 1
                else:
                    runs.append([number, 1])
        args: list[Any] = [
            f"{min_id_ms}-0",
            queue,
            "".join([chars for chars, _ in candidate_minutes]) if runs else "",
            "".join([f"{number:02d}{count:02d}" for number, count in runs]),
            keys.CONSUMER_GROUP,
        ]
        legacy_keys: list[str] = []
        for job in jobs:
            legacy = 0
            if job.idempotency_key:
                legacy_keys.append(keys.idempotency(namespace, job.idempotency_key))
                legacy = -len(legacy_keys)  # numbered once the index hashes are all known
            args += [
                job.job_id,
                job.data,
                index_number(job.job_ms),
                job.index_until_ms,
                job.candidate_tail,
                legacy,
            ]
        legacy_base = 2 + len(index_keys)  # legacy_keys[n] is KEYS[legacy_base + n + 1]
        for i in range(5 + 5, len(args), 6):
            if args[i] < 0:
                args[i] = legacy_base - args[i]
        keys_ = [keys.queue(namespace, queue), keys.queue_names(namespace), *index_keys]
        replies = self._enqueue_inline(keys=[*keys_, *legacy_keys], args=args)
        return [_outcome(reply) for reply in replies]

    def find_inline_job(
        self, namespace: str, candidates: list[tuple[str, int]]
    ) -> tuple[str, str] | None:
        """The first of `candidates` ((job id, its ms)) indexed as an inline job of the namespace:
        (job id, queue), or None. Read-only, one round trip (every index is in the namespace's
        slot)."""
        if not candidates:
            return None
        # One HMGET per index hour, as the enqueue script looks them up.
        by_index: dict[str, list[str]] = {}
        for job_id, ms in candidates:
            by_index.setdefault(keys.inline_index(namespace, ms), []).append(job_id)
        pipe = self._r.pipeline(transaction=False)
        for index, ids in by_index.items():
            pipe.hmget(index, ids)
        found: dict[str, bytes | str] = {}
        for ids, queues in zip(by_index.values(), pipe.execute()):
            found.update((i, q) for i, q in zip(ids, queues) if q is not None)
        for job_id, _ in candidates:  # newest first
            if job_id in found:
                queue = found[job_id]
                return job_id, queue.decode() if isinstance(queue, bytes) else queue
        return None

    def begin_ref_enqueue(self, job_id: str, namespace: str, queue: str, now_ms: int) -> Outcome:
        return self._call(
            self._begin_ref_enqueue, job_id, [keys.job(job_id)], [namespace, queue, now_ms]
        )

    def append(
        self, namespace: str, queue: str, job_id: str, *, inline: bytes | None, min_id_ms: int
    ) -> str:
        """XADD the job's entry (and note the queue in the namespace's queue set)."""
        args: list[Any] = [f"{min_id_ms}-0", queue, keys.CONSUMER_GROUP, job_id]
        if inline is not None:
            args.append(inline)
        # MINID ~ drops entries older than the retention (their jobs have expired anyway);
        # approximate trimming is ~3x cheaper than exact and never touches recent entries.
        return _s(
            self._append(
                keys=[keys.queue(namespace, queue), keys.queue_names(namespace)], args=args
            )
        )

    def record_entry(self, job_id: str, stream_id: str, *, overwrite: bool = False) -> bool:
        """Remember the job's queue entry id; without overwrite only if none is recorded."""
        return bool(
            self._record_entry(keys=[keys.job(job_id)], args=[stream_id, 1 if overwrite else 0])
        )

    # -- daemon side ---------------------------------------------------------------------

    def _take_entry(
        self, stream_keys: list[str], consumer: str, min_idle_ms: int, *, reclaim: bool
    ) -> tuple[int, str, Any, list[str]]:
        """One run of delivery_take.lua: (stream number from 1 or 0, entry id, fields, wake ids).

        The pending list of a stream is scanned at most once per RECLAIM_EVERY_S per container
        while the scans find nothing; after a hit it is scanned again at once, so a backlog of
        timed-out entries drains at poll speed."""
        now = self._mono()
        cursors = []
        for key in stream_keys:
            due = now - self._last_reclaim.get(key, float("-inf")) >= self.RECLAIM_EVERY_S
            cursors.append(self._reclaim_cursor.get(key, "0-0") if reclaim and due else "")
        reply = self._take(
            keys=stream_keys,
            args=[keys.CONSUMER_GROUP, consumer, min_idle_ms, self.RECLAIM_CALLS, *cursors],
        )
        status, number, entry_id, fields = _s(reply[0]), int(reply[1]), reply[2], reply[3]
        n = len(stream_keys)
        for key, scanned, cursor in zip(stream_keys, cursors, reply[4 : 4 + n]):
            if scanned != "":
                self._reclaim_cursor[key] = _s(cursor)
                # Nothing timed out there (or the hit is not from it): the next scan waits.
                self._last_reclaim[key] = now
        if status == "claimed":
            # A timed-out delivery: scan that stream again at once (a backlog drains fast).
            self._last_reclaim.pop(stream_keys[number - 1], None)
        if status in ("claimed", "entry"):
            return number, _s(entry_id), _fields(fields), []
        return 0, "", None, [_s(w) for w in reply[4 + n : 4 + 2 * n]]

    def read_next(
        self, namespace: str, queues: list[str], consumer: str, block_ms: int, min_idle_ms: int
    ) -> Entry | None:
        """One entry for this consumer: first a timed-out delivery, then a new entry (one
        script, delivery_take.lua); with nothing there, wait up to `block_ms` for an entry to
        be added (XREAD BLOCK, which reads without taking) and try again."""
        stream_keys = [keys.queue(namespace, q) for q in queues]
        deadline = self._mono() + block_ms / 1000
        reclaim = True
        while True:
            number, entry_id, fields, wake = self._take_entry(
                stream_keys, consumer, min_idle_ms, reclaim=reclaim
            )
            if number:
                return Entry.parse(queues[number - 1], entry_id, fields)
            left_ms = int((deadline - self._mono()) * 1000)
            if left_ms <= 0:
                return None
            # Wake when any of the streams gets an entry past what its group delivered (a
            # stream that does not exist yet wakes this at its first enqueue). XREAD moves
            # nothing into a pending list: another daemon may take the entry first, and then
            # this poll simply waits on.
            woke = self._r.xread(dict(zip(stream_keys, wake)), count=1, block=left_ms)
            if not woke:
                return None
            reclaim = False

    def start_delivery(
        self,
        entry: Entry,
        namespace: str,
        now_ms: int,
        *,
        lease: str,
        lease_expires_ms: int,
        consumer: str,
        max_deliveries: int,
        limit_error: str,
        cancel_error: str,
    ) -> Delivery:
        size = "" if entry.inline is None else str(len(entry.inline))
        out = self._call(
            self._start_delivery,
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
                _error_digest(limit_error),
                cancel_error,
                _error_digest(cancel_error),
            ],
        )
        if out.status == "limit":
            return Delivery("limit", int(out.args[0]))
        if out.status != "ok":
            return Delivery(out.status)
        attempt, tier, size, content_type, sha256 = out.args[:5]
        tier = "inline" if tier == "i" else "s3"
        args = None
        if tier == "s3" and size:
            args = Issued(
                size=int(size),
                content_type=content_type or DEFAULT_CONTENT_TYPE,
                sha256=sha256 or None,
                presigns=0,
                issued_ms=None,
            )
        return Delivery("ok", int(attempt), tier, args)

    def drop_entry(self, namespace: str, queue: str, stream_id: str) -> None:
        """Acknowledge and delete a queue entry (frees inline bytes at once)."""
        if not stream_id:
            return
        key = keys.queue(namespace, queue)
        pipe = self._r.pipeline(transaction=False)
        pipe.xack(key, keys.CONSUMER_GROUP, stream_id)
        pipe.xdel(key, stream_id)
        pipe.execute()

    def read_entry(self, namespace: str, queue: str, stream_id: str) -> Entry | None:
        rows = self._r.xrange(keys.queue(namespace, queue), min=stream_id, max=stream_id, count=1)
        return Entry.parse(queue, _s(rows[0][0]), rows[0][1]) if rows else None

    def complete(
        self,
        job_id: str,
        new_state: str,
        digest_: bytes,
        now_ms: int,
        done_value: bytes | str,
        fields: dict[str, Any],
        *,
        lease: str,
        cancel_ack: bool = False,
        namespace: str = "",
    ) -> Outcome:
        """Finish a running job (job slot). With `namespace`, a job of another namespace is
        'missing' (callers that have not loaded the job first)."""
        flat: list[Any] = [
            new_state,
            digest_,
            now_ms,
            self._ttl,
            done_value,
            lease,
            "1" if cancel_ack else "0",
            namespace,
        ]
        for k, v in fields.items():
            flat += [k, v]
        return self._call(self._complete, job_id, [keys.job(job_id), keys.done(job_id)], flat)

    def payload_lost(
        self,
        job_id: str,
        max_requeues: int,
        digest_: bytes,
        now_ms: int,
        error_json: str,
        *,
        lease: str,
    ) -> Outcome:
        return self._call(
            self._payload_lost,
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [max_requeues, digest_, now_ms, self._ttl, error_json, lease],
        )

    # -- life cycle: heartbeats, cancel, stale consumers -------------------------------------

    def heartbeat(self, job_id: str, namespace: str, lease: str, expires_ms: int) -> Outcome:
        """Move the lease's expiry to `expires_ms` if `lease` is the running delivery's (and
        keep the job hash at least RESULT_TTL_S past it)."""
        return self._call(
            self._heartbeat, job_id, [keys.job(job_id)], [namespace, lease, expires_ms, self._ttl]
        )

    def touch_entry(self, namespace: str, queue: str, stream_id: str, consumer: str) -> None:
        """Restart the pending entry's idle clock for its consumer (XCLAIM ... JUSTID keeps the
        delivery count), so pollers do not even try to reclaim a job whose lease is alive."""
        self._r.xclaim(
            keys.queue(namespace, queue),
            keys.CONSUMER_GROUP,
            consumer,
            0,
            [stream_id],
            justid=True,
        )

    def cancel(
        self,
        job_id: str,
        namespace: str,
        inline_queue: str,
        now_ms: int,
        error_json: str,
        created_ms: int,
    ) -> Outcome:
        return self._call(
            self._cancel,
            job_id,
            [keys.job(job_id), keys.done(job_id)],
            [
                namespace,
                inline_queue,
                now_ms,
                self._ttl,
                error_json,
                digest("error", error_json),
                created_ms,
            ],
        )

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
                    removed.append(_s(c["name"]) or "")
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
            if self._collect(keys=[key, keys.queue_names(namespace)], args=[queue, idle_before_ms]):
                self._reclaim_cursor.pop(key, None)
                removed.append(queue)
        return removed

    def wait_done(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job's done list exists or the timeout passes.

        BLMOVE from the list to itself rotates a one-element list in place: every waiter sees
        the element and nobody consumes it (unlike BLPOP); a list costs far less than a
        one-entry stream (bench/RESULTS.md)."""
        key = keys.done(job_id)
        if timeout_s <= 0:
            return bool(self._r.exists(key))
        return self._r.blmove(key, key, timeout_s, "RIGHT", "LEFT") is not None


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
