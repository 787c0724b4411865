"""Jobs, issue records, queues and results in Redis. The only module that sends Redis commands.

Every Lua script touches keys of one hash tag (one cluster slot); see `keys.py`. Steps that span
the job slot and the namespace slot are ordered so a crash between them leaves something the
next request or the visibility timeout repairs, never a lost job:

- enqueue: create the job hash (state queued, `enqueuing_at`) -> XADD -> record `stream_id`;
  a retry of the same enqueue finds the job without `stream_id` and appends it again.
- result/failure: the job hash goes terminal first -> XACK + XDEL; an entry left in the PEL is
  reclaimed by XAUTOCLAIM, and poll drops entries whose job is already terminal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from ..models.domain import IssueRecord, PayloadKind
from . import keys

# -- Lua (each script touches one slot) ------------------------------------------------------

# KEYS[1]=issue  ARGV: ttl_s, field, value, ...
_CREATE_ISSUE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1]=issue  ARGV: max_presigns -> new count, or -1 when the cap is reached, 0 when missing
_BUMP_PRESIGN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = tonumber(redis.call('HGET', KEYS[1], 'presigns') or '0')
if n >= tonumber(ARGV[1]) then return -1 end
return redis.call('HINCRBY', KEYS[1], 'presigns', 1)
"""

# KEYS[1]=job  ARGV: now_ms, stale_ms, ttl_s, field, value, ...
# -> {'created'} | {'resume'} | {'busy'} | {'exists', stream_id}
_BEGIN_ENQUEUE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'enqueuing_at', ARGV[1], unpack(ARGV, 4))
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return {'created'}
end
local sid = redis.call('HGET', KEYS[1], 'stream_id')
if sid then return {'exists', sid} end
local t = tonumber(redis.call('HGET', KEYS[1], 'enqueuing_at') or '0')
if tonumber(ARGV[1]) - t < tonumber(ARGV[2]) then return {'busy'} end
redis.call('HSET', KEYS[1], 'enqueuing_at', ARGV[1])
return {'resume'}
"""

# KEYS[1]=job  ARGV: stream_id, daemon_id, now
# -> {'missing'} | {'terminal'} | {'ok', attempts}
_START_DELIVERY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return {'terminal'} end
redis.call('HSET', KEYS[1], 'state', 'running', 'stream_id', ARGV[1], 'daemon_id', ARGV[2],
           'started_at', ARGV[3], 'updated_at', ARGV[3])
return {'ok', redis.call('HINCRBY', KEYS[1], 'attempts', 1)}
"""

# KEYS[1]=job KEYS[2]=done  ARGV: new_state, digest, now, ttl_s, field, value, ...
# -> {'missing'} | {'same'} | {'conflict', state} | {'not_running', state} | {'ok', stream_id, queue}
_COMPLETE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then
  if state == 'queued' then return {'not_running', state} end
  if redis.call('HGET', KEYS[1], 'result_digest') == ARGV[2] then return {'same'} end
  return {'conflict', state}
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'result_digest', ARGV[2], 'finished_at', ARGV[3],
           'updated_at', ARGV[3], unpack(ARGV, 5))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'ok', redis.call('HGET', KEYS[1], 'stream_id') or '', redis.call('HGET', KEYS[1], 'queue')}
"""

# KEYS[1]=job KEYS[2]=done  ARGV: max_requeues, digest, now, ttl_s, error_json
# -> {'missing'} | {'same'} | {'not_running', state} | {'requeue', stream_id, queue}
#    | {'terminal', stream_id, queue}
_PAYLOAD_LOST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then
  if state ~= 'queued' and redis.call('HGET', KEYS[1], 'result_digest') == ARGV[2] then
    return {'same'}
  end
  return {'not_running', state}
end
local sid = redis.call('HGET', KEYS[1], 'stream_id') or ''
local queue = redis.call('HGET', KEYS[1], 'queue')
local lost = tonumber(redis.call('HGET', KEYS[1], 'lost_count') or '0')
if lost < tonumber(ARGV[1]) then
  redis.call('HINCRBY', KEYS[1], 'lost_count', 1)
  redis.call('HSET', KEYS[1], 'state', 'queued', 'updated_at', ARGV[3])
  redis.call('HDEL', KEYS[1], 'daemon_id')
  return {'requeue', sid, queue}
end
redis.call('HSET', KEYS[1], 'state', 'payload_lost', 'result_digest', ARGV[2], 'error', ARGV[5],
           'finished_at', ARGV[3], 'updated_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], 'payload_lost')
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'terminal', sid, queue}
"""


def _s(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Delivery:
    job_id: str
    queue: str
    stream_id: str
    attempt: int
    payload_ref: dict | None
    payload_inline: bytes | None


@dataclass(frozen=True)
class Outcome:
    """What a single-slot state change answered, e.g. ('ok', stream_id, queue)."""

    status: str
    args: tuple[str, ...] = ()


class RedisJobStore:
    def __init__(self, client: redis.Redis, *, result_ttl_s: int):
        self._r = client
        self._ttl = result_ttl_s
        self._create_issue = client.register_script(_CREATE_ISSUE)
        self._bump_presign = client.register_script(_BUMP_PRESIGN)
        self._begin_enqueue = client.register_script(_BEGIN_ENQUEUE)
        self._start_delivery = client.register_script(_START_DELIVERY)
        self._complete = client.register_script(_COMPLETE)
        self._payload_lost = client.register_script(_PAYLOAD_LOST)
        self._groups_ready: set[str] = set()

    # -- health --------------------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self._r.ping())

    # -- issue records -------------------------------------------------------------------

    def record_issue(self, issue: IssueRecord) -> bool:
        fields = {
            "namespace": issue.namespace,
            "job_id": issue.job_id,
            "kind": issue.kind.value,
            "key": issue.key,
            "bucket": issue.bucket,
            "size": issue.size,
            "content_type": issue.content_type,
            "sha256": issue.sha256 or "",
            "presigns": issue.presigns,
            "issued_at": repr(issue.issued_at),
        }
        flat: list[Any] = [self._ttl]
        for k, v in fields.items():
            flat += [k, v]
        return bool(
            self._create_issue(keys=[keys.issue(issue.job_id, issue.kind.value)], args=flat)
        )

    def bump_presign(self, job_id: str, kind: PayloadKind, max_presigns: int) -> int:
        """New presign count; -1 past the cap; 0 when no such issue record exists."""
        return int(self._bump_presign(keys=[keys.issue(job_id, kind.value)], args=[max_presigns]))

    def get_issue(self, job_id: str, kind: PayloadKind) -> IssueRecord | None:
        raw = self._r.hgetall(keys.issue(job_id, kind.value))
        if not raw:
            return None
        d = {_s(k): _s(v) for k, v in raw.items()}
        return IssueRecord(
            namespace=d["namespace"],
            job_id=d["job_id"],
            kind=PayloadKind(d["kind"]),
            key=d["key"],
            bucket=d["bucket"],
            size=int(d["size"]),
            content_type=d["content_type"],
            sha256=d.get("sha256") or None,
            presigns=int(d.get("presigns", 1)),
            issued_at=float(d["issued_at"]),
        )

    # -- jobs ----------------------------------------------------------------------------

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        raw = self._r.hgetall(keys.job(job_id))
        if not raw:
            return None
        job: dict[str, Any] = {}
        for k, v in raw.items():
            name = _s(k)
            job[name] = v if name == "result_inline" else _s(v)
        return job

    def begin_enqueue(
        self, job_id: str, fields: dict[str, Any], now_ms: int, stale_ms: int
    ) -> Outcome:
        flat: list[Any] = [now_ms, stale_ms, self._ttl]
        for k, v in fields.items():
            flat += [k, v]
        reply = self._begin_enqueue(keys=[keys.job(job_id)], args=flat)
        return Outcome(_s(reply[0]), tuple(_s(x) for x in reply[1:]))

    def append_to_queue(
        self,
        namespace: str,
        queue: str,
        job_id: str,
        *,
        inline: bytes | None,
        ref_json: str | None,
        min_id_ms: int,
    ) -> str:
        entry: dict[str, Any] = {"job": job_id}
        if inline is not None:
            entry["inline"] = inline
        if ref_json is not None:
            entry["ref"] = ref_json
        # MINID ~ drops entries older than the retention (their jobs have expired anyway);
        # approximate trimming is ~3x cheaper than exact and never touches recent entries.
        stream_id = self._r.xadd(
            keys.queue(namespace, queue), entry, minid=f"{min_id_ms}-0", approximate=True
        )
        self._r.hset(keys.job(job_id), "stream_id", stream_id)
        self._r.sadd(keys.queue_names(namespace), queue)
        return _s(stream_id)

    def claim_idempotency_key(self, namespace: str, key: str, job_id: str) -> str | None:
        """Remember job_id for key; returns the job id already stored, or None if we set it."""
        name = keys.idempotency(namespace, key)
        if self._r.set(name, job_id, nx=True, ex=self._ttl):
            return None
        existing = self._r.get(name)
        return _s(existing) if existing else None

    def release_idempotency_key(self, namespace: str, key: str, job_id: str) -> None:
        name = keys.idempotency(namespace, key)
        if _s(self._r.get(name)) == job_id:
            self._r.delete(name)

    # -- daemon side ---------------------------------------------------------------------

    def _ensure_groups(self, stream_keys: list[str]) -> None:
        for key in stream_keys:
            if key in self._groups_ready:
                continue
            try:
                # Id 0: a group created after jobs were queued still delivers them.
                self._r.xgroup_create(key, keys.CONSUMER_GROUP, id="0", mkstream=True)
            except redis.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise
            self._groups_ready.add(key)

    def _with_groups(self, stream_keys: list[str], call):
        self._ensure_groups(stream_keys)
        try:
            return call()
        except redis.ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            # The stream was deleted (or Redis restarted without persistence): recreate.
            self._groups_ready.difference_update(stream_keys)
            self._ensure_groups(stream_keys)
            return call()

    def _reclaim(self, stream_key: str, consumer: str, min_idle_ms: int):
        reply = self._with_groups(
            [stream_key],
            lambda: self._r.xautoclaim(
                stream_key, keys.CONSUMER_GROUP, consumer, min_idle_ms, start_id="0-0", count=1
            ),
        )
        claimed = reply[1] if reply else []
        return [e for e in claimed if e and e[1]]

    def read_next(
        self, namespace: str, queues: list[str], consumer: str, block_ms: int, min_idle_ms: int
    ) -> tuple[str, str, dict] | None:
        """One entry for this consumer: first a timed-out one (XAUTOCLAIM), then a new one."""
        stream_keys = [keys.queue(namespace, q) for q in queues]
        for queue, key in zip(queues, stream_keys):
            for entry_id, fields in self._reclaim(key, consumer, min_idle_ms):
                return queue, _s(entry_id), fields
        streams = {k: ">" for k in stream_keys}
        reply = self._with_groups(
            stream_keys,
            lambda: self._r.xreadgroup(
                keys.CONSUMER_GROUP,
                consumer,
                streams,
                count=1,
                block=block_ms if block_ms > 0 else None,
            ),
        )
        if not reply:
            return None
        picked: tuple[str, str, dict] | None = None
        for stream_key, entries in reply:
            stream_key = _s(stream_key)
            for entry_id, fields in entries:
                if picked is None:
                    picked = (queues[stream_keys.index(stream_key)], _s(entry_id), fields)
                else:
                    # One job per poll: hand extra entries back by making them look timed out,
                    # so the next poll (ours or another daemon's) reclaims them at once.
                    self._r.xclaim(
                        stream_key,
                        keys.CONSUMER_GROUP,
                        consumer,
                        0,
                        [entry_id],
                        idle=min_idle_ms + 1,
                    )
        return picked

    def start_delivery(self, job_id: str, stream_id: str, daemon_id: str, now: float) -> Outcome:
        reply = self._start_delivery(
            keys=[keys.job(job_id)], args=[stream_id, daemon_id, repr(now)]
        )
        return Outcome(_s(reply[0]), tuple(_s(x) for x in reply[1:]))

    def drop_entry(self, namespace: str, queue: str, stream_id: str) -> None:
        """Acknowledge and delete a queue entry (frees inline bytes at once)."""
        if not stream_id:
            return
        key = keys.queue(namespace, queue)
        pipe = self._r.pipeline(transaction=False)
        pipe.xack(key, keys.CONSUMER_GROUP, stream_id)
        pipe.xdel(key, stream_id)
        pipe.execute()

    def read_entry(self, namespace: str, queue: str, stream_id: str) -> dict | None:
        rows = self._r.xrange(keys.queue(namespace, queue), min=stream_id, max=stream_id, count=1)
        return rows[0][1] if rows else None

    def complete(
        self, job_id: str, new_state: str, digest: str, now: float, fields: dict[str, Any]
    ) -> Outcome:
        flat: list[Any] = [new_state, digest, repr(now), self._ttl]
        for k, v in fields.items():
            flat += [k, v]
        reply = self._complete(keys=[keys.job(job_id), keys.done(job_id)], args=flat)
        return Outcome(_s(reply[0]), tuple(_s(x) for x in reply[1:]))

    def payload_lost(
        self, job_id: str, max_requeues: int, digest: str, now: float, error_json: str
    ) -> Outcome:
        reply = self._payload_lost(
            keys=[keys.job(job_id), keys.done(job_id)],
            args=[max_requeues, digest, repr(now), self._ttl, error_json],
        )
        return Outcome(_s(reply[0]), tuple(_s(x) for x in reply[1:]))

    def wait_done(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job's done marker exists or the timeout passes.

        BLMOVE from the list to itself rotates a one-element list in place: every waiter sees
        the marker and nobody consumes it (unlike BLPOP), at ~0.1 KB per job versus ~4.4 KB for
        a one-entry stream (bench/RESULTS.md)."""
        key = keys.done(job_id)
        if timeout_s <= 0:
            return bool(self._r.exists(key))
        return self._r.blmove(key, key, timeout_s, "RIGHT", "LEFT") is not None


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
