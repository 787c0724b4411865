"""Jobs, queues and results in Redis. The only module that sends Redis commands.

The layout (job hash fields, keys) is documented in `keys.py` and, byte by byte, in
docs/design.md ("Redis layout"). Every Lua script touches keys of one hash tag (one cluster
slot). Steps that span the job slot and the namespace slot are ordered so a crash between them
leaves something the next request or the visibility timeout repairs, never a lost job and never
a job id handed out for a job that is in no queue:

- inline enqueue: one namespace-slot script (idempotency lookup in the inline index, XADD,
  index entry, queue set) -- all or nothing, so an answer with a job id means the entry exists.
- S3 enqueue: job hash `awaiting_upload` -> `queued` (job slot) -> XADD (namespace slot) ->
  record the entry id `x` if none is recorded yet (job slot). A retry of an enqueue whose `x`
  is missing appends again; a delivery whose entry id is not the recorded `x` drops that entry,
  so a doubled append never runs the job twice. An enqueue answers only after its own append.
- delivery: XREADGROUP (entry in the pending list) -> job hash `running` (job slot); a crash in
  between leaves the entry pending, and XAUTOCLAIM hands it out again after the visibility
  timeout.
- result/failure: the job hash goes terminal and the done list is written (job slot) -> XACK +
  XDEL (namespace slot); an entry left pending is reclaimed by XAUTOCLAIM, and a delivery of an
  entry whose job is already terminal only drops the entry.

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

from . import keys

DEFAULT_CONTENT_TYPE = "application/msgpack"
AWAITING_UPLOAD = "awaiting_upload"

# -- Lua (each script touches one slot) ------------------------------------------------------

# Legacy (layout 1) hashes have a `state` field; layout 2 hashes never do.
_LEGACY = "if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end\n"

# KEYS[1]=job  ARGV: ttl_s, field, value, ... -> 1 created, 0 exists
_CREATE_ARGS_ISSUE = """#!lua
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1]=job  ARGV: namespace, field, value, ...
# -> {'missing'} | {'legacy'} | {'not_running', state} | {'exists'} | {'ok'}
_CREATE_RESULT_ISSUE = (
    """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
"""
    + _LEGACY
    + """
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return {'missing'} end
local s = redis.call('HGET', KEYS[1], 's')
if s ~= 'running' then return {'not_running', s} end
if redis.call('HEXISTS', KEYS[1], 'rz') == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return {'ok'}
"""
)

# KEYS[1]=job  ARGV: count field (pn|rn), max_presigns
# -> new count, -1 when the cap is reached, 0 when nothing was issued
_BUMP_PRESIGN = """#!lua flags=allow-oom
local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then return 0 end
if tonumber(n) >= tonumber(ARGV[2]) then return -1 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
"""

# KEYS[1]=job  ARGV: namespace, queue, now_ms
# -> {'missing'} | {'legacy'} | {'created'} | {'resume'} | {'exists'} | {'other_queue', queue}
_BEGIN_REF_ENQUEUE = (
    """#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
"""
    + _LEGACY
    + """
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return {'missing'} end
if redis.call('HGET', KEYS[1], 's') == 'awaiting_upload' then
  redis.call('HSET', KEYS[1], 's', 'queued', 'q', ARGV[2], 't', 's', 'ca', ARGV[3], 'ua', ARGV[3])
  return {'created'}
end
local q = redis.call('HGET', KEYS[1], 'q')
if q ~= ARGV[2] then return {'other_queue', q} end
if redis.call('HEXISTS', KEYS[1], 'x') == 1 then return {'exists'} end
return {'resume'}
"""
)

# KEYS[1]=stream KEYS[2]=queue set  ARGV: min_id, queue, job_id[, inline bytes] -> entry id
_APPEND = """#!lua
local id
if ARGV[4] then
  id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', ARGV[3], 'b', ARGV[4])
else
  id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', ARGV[3])
end
redis.call('SADD', KEYS[2], ARGV[2])
return id
"""

# Inline jobs of one queue, appended in request order by one script (one round trip, one
# script start however many jobs: 100 scripts of one job each cost ~4x the server time).
# KEYS[1]=stream KEYS[2]=queue set KEYS[3..]=inline index hashes, then layout-1 idempotency keys
# ARGV[1]=min_id ARGV[2]=queue
# ARGV[3]=candidate minutes: the 10 time chars of each minute a repeated Idempotency-Key may have
#         created its job in, newest first (a candidate job id is a minute's chars + the key's tail)
# ARGV[4]=their runs: per run of consecutive minutes in one index hash, its KEYS number and the
#         run's length (two digits each)
# then per job: job_id, bytes, KEYS number of its index hash, index expire-at (ms),
#               its key's 16-char tail ('' without a key: no lookup), KEYS number of its
#               layout-1 idempotency key (0: none)
# -> per job: {'exists', job_id, queue} | {'legacy', job_id} | {'created', job_id, entry_id}
# A key's candidates are looked up with one HMGET per index hash (an hour of minutes each).
_ENQUEUE_INLINE = """#!lua
local queue, runs = ARGV[2], ARGV[4]
local minutes, index, counts = {}, {}, {}
for m = 1, #ARGV[3] / 10 do minutes[m] = string.sub(ARGV[3], m * 10 - 9, m * 10) end
for r = 1, #runs / 4 do
  index[r] = KEYS[tonumber(string.sub(runs, r * 4 - 3, r * 4 - 2))]
  counts[r] = tonumber(string.sub(runs, r * 4 - 1, r * 4))
end
local function indexed(tail)
  local seen = 0
  for r = 1, #index do
    local ids = {}
    for j = 1, counts[r] do ids[j] = minutes[seen + j] .. tail end
    local found = redis.call('HMGET', index[r], unpack(ids))
    for j = 1, counts[r] do
      if found[j] then return {'exists', ids[j], found[j]} end
    end
    seen = seen + counts[r]
  end
  return nil
end
local out, created = {}, false
for i = 5, #ARGV, 6 do
  local job_id, tail, legacy = ARGV[i], ARGV[i + 4], tonumber(ARGV[i + 5])
  local answer = nil
  if tail ~= '' then answer = indexed(tail) end
  if not answer and legacy > 0 then
    local old = redis.call('GET', KEYS[legacy])
    if old then answer = {'legacy', old} end
  end
  if not answer then
    local id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', job_id,
                          'b', ARGV[i + 1])
    local ix = KEYS[tonumber(ARGV[i + 2])]
    redis.call('HSET', ix, job_id, queue)
    redis.call('PEXPIREAT', ix, ARGV[i + 3])
    created = true
    answer = {'created', job_id, id}
  end
  out[#out + 1] = answer
end
if created then redis.call('SADD', KEYS[2], queue) end
return out
"""

# KEYS[1]=job  ARGV: entry_id, overwrite (0|1) -> 1 recorded, 0 not
_RECORD_ENTRY = """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] == '1' or redis.call('HEXISTS', KEYS[1], 'x') == 0 then
  redis.call('HSET', KEYS[1], 'x', ARGV[1])
  return 1
end
return 0
"""

# KEYS[1]=job KEYS[2]=done
# ARGV: entry_id, now_ms, namespace, queue, inline size ('' for an S3 entry), ttl_s,
#       lease, lease expiry (ms), consumer, max_deliveries, limit error JSON, limit digest,
#       cancel error JSON, cancel digest
# -> {'missing'} | {'legacy'} | {'terminal', state} | {'stale'} | {'leased'}
#    | {'cancelled'} | {'limit', deliveries} | {'ok', attempt, tier, pz, pc, ph}
# Each delivery writes its lease (`lt`), the lease's expiry (`lx`, ms) and the consumer that
# holds the entry (`d`). A running job whose lease has not expired (heartbeats) is not
# redelivered; a job with a cancel requested (`cr`) ends cancelled instead of running again; a
# job already delivered max_deliveries times ends failed (DeliveryLimitExceeded).
_START_DELIVERY = (
    """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[5] == '' then return {'missing'} end
  -- An inline job's hash is born at its first delivery.
  redis.call('HSET', KEYS[1], 'n', ARGV[3], 'q', ARGV[4], 't', 'i', 's', 'running', 'a', 1,
             'x', ARGV[1], 'pz', ARGV[5], 'ua', ARGV[2], 'lt', ARGV[7], 'lx', ARGV[8],
             'd', ARGV[9])
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  return {'ok', 1, 'i', ARGV[5], false, false}
end
"""
    + _LEGACY
    + """
local s = redis.call('HGET', KEYS[1], 's')
if s ~= 'queued' and s ~= 'running' then return {'terminal', s} end
local x = redis.call('HGET', KEYS[1], 'x')
if x and x ~= ARGV[1] then return {'stale'} end
if s == 'running' and tonumber(redis.call('HGET', KEYS[1], 'lx') or '0') > tonumber(ARGV[2]) then
  return {'leased'}
end
local function finish(state, done_value, digest)
  redis.call('HSET', KEYS[1], 's', state, 'g', digest, 'rk', 'e', 'ua', ARGV[2])
  redis.call('HDEL', KEYS[1], 'lx', 'd')
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], done_value)
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
if redis.call('HGET', KEYS[1], 'cr') == '1' then
  finish('cancelled', ARGV[13], ARGV[14])
  return {'cancelled'}
end
local done = tonumber(redis.call('HGET', KEYS[1], 'a') or '0')
if done >= tonumber(ARGV[10]) then
  finish('failed', ARGV[11], ARGV[12])
  return {'limit', done}
end
redis.call('HSET', KEYS[1], 's', 'running', 'x', ARGV[1], 'ua', ARGV[2], 'lt', ARGV[7],
           'lx', ARGV[8], 'd', ARGV[9])
local a = redis.call('HINCRBY', KEYS[1], 'a', 1)
local f = redis.call('HMGET', KEYS[1], 't', 'pz', 'pc', 'ph')
local ph = f[4] and f[4]:gsub('.', function(c) return string.format('%02x', c:byte()) end) or false
return {'ok', a, f[1], f[2], f[3], ph}
"""
)

# Only the current delivery's lease may finish or fail a job. A job delivered before leases
# existed (no `lt`) takes any lease: its first post settles it as before.
_LEASE_CHECK = """
local le = redis.call('HGET', KEYS[1], 'lt')
if le and le ~= ARGV[LEASE] then return {'lease_mismatch', s or ''} end
"""

# KEYS[1]=job KEYS[2]=done
# ARGV: new_state, digest, now_ms, ttl_s, done_value, lease, cancel_ack, namespace ('': any),
#       field, value, ...
# cancel_ack '1': the post is the error type Cancelled; with a cancel requested the job ends
# `cancelled` rather than `failed`. A job of another namespace is 'missing'.
# -> {'missing'} | {'legacy'} | {'same'} | {'conflict', state} | {'not_running', state}
#    | {'lease_mismatch', state} | {'ok', entry_id, queue, state}
_COMPLETE = (
    """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
"""
    + _LEGACY
    + """
if ARGV[8] ~= '' and redis.call('HGET', KEYS[1], 'n') ~= ARGV[8] then return {'missing'} end
local s = redis.call('HGET', KEYS[1], 's')
"""
    + _LEASE_CHECK.replace("LEASE", "6")
    + """
if s ~= 'running' then
  if s == 'queued' or s == 'awaiting_upload' then return {'not_running', s} end
  if redis.call('HGET', KEYS[1], 'g') == ARGV[2] then return {'same'} end
  return {'conflict', s}
end
local state = ARGV[1]
if ARGV[7] == '1' and redis.call('HGET', KEYS[1], 'cr') == '1' then state = 'cancelled' end
redis.call('HSET', KEYS[1], 's', state, 'g', ARGV[2], 'ua', ARGV[3], unpack(ARGV, 9))
redis.call('HDEL', KEYS[1], 'lx', 'd')
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[4])
local f = redis.call('HMGET', KEYS[1], 'x', 'q')
return {'ok', f[1] or '', f[2], state}
"""
)

# KEYS[1]=job KEYS[2]=done  ARGV: max_requeues, digest, now_ms, ttl_s, error_json, lease
# -> {'missing'} | {'legacy'} | {'same'} | {'not_running', state} | {'lease_mismatch', state}
#    | {'requeue', entry_id, queue} | {'terminal', entry_id, queue}
_PAYLOAD_LOST = (
    """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
"""
    + _LEGACY
    + """
local s = redis.call('HGET', KEYS[1], 's')
"""
    + _LEASE_CHECK.replace("LEASE", "6")
    + """
if s ~= 'running' then
  if s ~= 'queued' and s ~= 'awaiting_upload' and redis.call('HGET', KEYS[1], 'g') == ARGV[2] then
    return {'same'}
  end
  return {'not_running', s}
end
local f = redis.call('HMGET', KEYS[1], 'x', 'q', 'l')
local sid, queue, lost = f[1] or '', f[2], tonumber(f[3] or '0')
if lost < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'l', lost + 1, 's', 'queued', 'ua', ARGV[3])
  redis.call('HDEL', KEYS[1], 'lx', 'd')
  return {'requeue', sid, queue}
end
redis.call('HSET', KEYS[1], 's', 'payload_lost', 'g', ARGV[2], 'rk', 'e', 'ua', ARGV[3])
redis.call('HDEL', KEYS[1], 'lx', 'd')
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'terminal', sid, queue}
"""
)

# KEYS[1]=job  ARGV: namespace, lease, new lease expiry (ms)
# -> {'missing'} | {'legacy'} | {'lease_mismatch', state}
#    | {'ok', cancel_requested, entry_id, queue, consumer}
_HEARTBEAT = (
    """#!lua flags=allow-oom
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
"""
    + _LEGACY
    + """
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'lt', 'cr', 'x', 'q', 'd')
if f[1] ~= ARGV[1] then return {'missing'} end
if f[2] ~= 'running' or f[3] ~= ARGV[2] then return {'lease_mismatch', f[2] or ''} end
redis.call('HSET', KEYS[1], 'lx', ARGV[3])
return {'ok', f[4] or '0', f[5] or '', f[6] or '', f[7] or ''}
"""
)

# KEYS[1]=job KEYS[2]=done
# ARGV: namespace, queue of a queued inline job without a hash (''), now_ms, ttl_s,
#       error JSON, digest, created_ms
# -> {'missing'} | {'legacy'} | {'terminal', state} | {'requested'} | {'cancelled', entry_id, queue}
_CANCEL = (
    """#!lua flags=allow-oom
local function finish()
  redis.call('HSET', KEYS[1], 's', 'cancelled', 'cr', '1', 'g', ARGV[6], 'rk', 'e', 'ua', ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[2] == '' then return {'missing'} end
  -- A queued inline job (no hash before its first delivery): born cancelled; its delivery will
  -- find it terminal and drop the entry.
  redis.call('HSET', KEYS[1], 'n', ARGV[1], 'q', ARGV[2], 't', 'i', 'a', 0, 'ca', ARGV[7])
  finish()
  return {'cancelled', '', ARGV[2]}
end
"""
    + _LEGACY
    + """
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'x', 'q')
if f[1] ~= ARGV[1] or f[2] == 'awaiting_upload' then return {'missing'} end
if f[2] == 'running' then
  redis.call('HSET', KEYS[1], 'cr', '1', 'ua', ARGV[3])
  return {'requested'}
end
if f[2] ~= 'queued' then return {'terminal', f[2] or ''} end
finish()
return {'cancelled', f[3] or '', f[4] or ''}
"""
)

# KEYS[1..n]=streams  ARGV: group -> number of groups created
_ENSURE_GROUPS = """#!lua flags=allow-oom
local made = 0
for _, key in ipairs(KEYS) do
  local found = false
  if redis.call('EXISTS', key) == 1 then
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
      for i = 1, #g, 2 do
        if g[i] == 'name' and g[i + 1] == ARGV[1] then found = true end
      end
    end
  end
  if not found then
    -- Id 0: a group created after jobs were queued still delivers them.
    redis.call('XGROUP', 'CREATE', key, ARGV[1], '0', 'MKSTREAM')
    made = made + 1
  end
end
return made
"""

# Layout 1 -> layout 2, in place. KEYS[1]=job KEYS[2]=done KEYS[3]=issue:args
# KEYS[4]=issue:result  ARGV: default content type -> 1 converted, 0 nothing to do
_MIGRATE = """#!lua flags=allow-oom
if redis.call('HEXISTS', KEYS[1], 'state') == 0 then return 0 end
local function hash(key)
  local t = {}
  local raw = redis.call('HGETALL', key)
  for i = 1, #raw, 2 do t[raw[i]] = raw[i + 1] end
  return t
end
local function unhex(h)
  if not h or #h ~= 64 then return nil end
  return (h:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end
local function ms(v)
  if not v or v == '' then return nil end
  return math.floor(tonumber(v) * 1000)
end
local old, args, res = hash(KEYS[1]), hash(KEYS[3]), hash(KEYS[4])
local new = {}
local function put(k, v) if v ~= nil and v ~= false and v ~= '' then new[#new + 1] = k; new[#new + 1] = v end end
put('n', old['namespace'])
put('q', old['queue'])
put('s', old['state'])
put('t', old['tier'] == 'inline' and 'i' or 's')
put('a', old['attempts'])
put('x', old['stream_id'])
put('ca', ms(old['created_at']))
put('ua', ms(old['updated_at']))
put('l', old['lost_count'])
local pref = old['payload_ref'] and cjson.decode(old['payload_ref']) or {}
if args['size'] then
  put('pz', args['size'])
  if args['content_type'] ~= ARGV[1] then put('pc', args['content_type']) end
  put('ph', unhex(args['sha256']))
  put('pn', args['presigns'] or '1')
elseif pref['size'] then
  put('pz', pref['size'])
  if pref['contentType'] and pref['contentType'] ~= ARGV[1] then put('pc', pref['contentType']) end
  put('ph', unhex(pref['sha256']))
else
  put('pz', old['payload_size'])
end
local rref = old['result_ref'] and cjson.decode(old['result_ref']) or {}
if res['size'] then
  put('rz', res['size'])
  if res['content_type'] ~= ARGV[1] then put('rc', res['content_type']) end
  put('rh', unhex(res['sha256']))
  put('rn', res['presigns'] or '1')
  put('ri', ms(res['issued_at']))
elseif rref['size'] then
  put('rz', rref['size'])
  if rref['contentType'] and rref['contentType'] ~= ARGV[1] then put('rc', rref['contentType']) end
  put('rh', unhex(rref['sha256']))
  put('ri', ms(old['finished_at'] or old['updated_at']))
end
local kinds = {inline = 'i', ref = 'r', error = 'e', corrupt = 'c', lost = 'l'}
local digest = old['result_digest']
if digest then
  local kind, hex = digest:match('^(%a+):(%x+)$')
  if kind and kinds[kind] and #hex == 64 then put('g', kinds[kind] .. unhex(hex):sub(1, 15)) end
end
local done_value = nil
local rk = old['result_kind']
if rk == 'inline' then
  put('rk', 'i'); done_value = old['result_inline'] or ''
elseif rk == 's3' then
  put('rk', 's'); done_value = ''
elseif rk == 'error' or old['error'] then
  put('rk', 'e'); done_value = old['error'] or '{}'
elseif old['state'] == 'succeeded' then
  done_value = ''
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], unpack(new))
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
if done_value ~= nil and redis.call('EXISTS', KEYS[2]) == 1 then
  local dttl = redis.call('PTTL', KEYS[2])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], done_value)
  if dttl > 0 then redis.call('PEXPIRE', KEYS[2], dttl) end
end
return 1
"""


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


def _outcome(reply) -> Outcome:
    return Outcome(_s(reply[0]), tuple(_s(x) if x is not None else "" for x in reply[1:]))


class RedisJobStore:
    # A container reclaims timed-out entries of one stream at most this often (XAUTOCLAIM scans).
    RECLAIM_EVERY_S = 1.0
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
        self._create_args_issue = client.register_script(_CREATE_ARGS_ISSUE)
        self._create_result_issue = client.register_script(_CREATE_RESULT_ISSUE)
        self._bump_presign = client.register_script(_BUMP_PRESIGN)
        self._begin_ref_enqueue = client.register_script(_BEGIN_REF_ENQUEUE)
        self._append = client.register_script(_APPEND)
        self._enqueue_inline = client.register_script(_ENQUEUE_INLINE)
        self._record_entry = client.register_script(_RECORD_ENTRY)
        self._start_delivery = client.register_script(_START_DELIVERY)
        self._complete = client.register_script(_COMPLETE)
        self._payload_lost = client.register_script(_PAYLOAD_LOST)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._cancel = client.register_script(_CANCEL)
        self._last_prune: dict[str, float] = {}
        self._ensure_groups_script = client.register_script(_ENSURE_GROUPS)
        self._migrate = client.register_script(_MIGRATE)
        self._groups_ready: set[str] = set()
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
    ) -> Outcome:
        flat = [namespace, *self._issue_fields("r", size, content_type, sha256), "ri", now_ms]
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
        for i in range(4 + 5, len(args), 6):
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
        args: list[Any] = [f"{min_id_ms}-0", queue, job_id]
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

    def _ensure_groups(self, stream_keys: list[str], *, force: bool = False) -> None:
        missing = [k for k in stream_keys if force or k not in self._groups_ready]
        if not missing:
            return
        # One script per key: in cluster mode every stream of a namespace shares a slot anyway.
        self._ensure_groups_script(keys=missing, args=[keys.CONSUMER_GROUP])
        self._groups_ready.update(missing)

    def _with_groups(self, stream_keys: list[str], call):
        self._ensure_groups(stream_keys)
        try:
            return call()
        except redis.ResponseError as e:
            if isinstance(e, redis.exceptions.OutOfMemoryError):
                raise
            # NOGROUP: the stream was deleted (or Redis restarted without persistence).
            # Recreate what is missing (a no-op otherwise) and try once more.
            self._groups_ready.difference_update(stream_keys)
            self._ensure_groups(stream_keys, force=True)
            return call()

    def _reclaim(self, stream_key: str, consumer: str, min_idle_ms: int):
        now = self._mono()
        if now - self._last_reclaim.get(stream_key, float("-inf")) < self.RECLAIM_EVERY_S:
            return []
        reply = self._with_groups(
            [stream_key],
            lambda: self._r.xautoclaim(
                stream_key, keys.CONSUMER_GROUP, consumer, min_idle_ms, start_id="0-0", count=1
            ),
        )
        claimed = [e for e in (reply[1] if reply else []) if e and e[1]]
        if not claimed:
            # Nothing timed out: leave the scan to the next second. After a hit, scan again at
            # once, so a backlog of timed-out entries drains at poll speed.
            self._last_reclaim[stream_key] = now
        return claimed

    def read_next(
        self, namespace: str, queues: list[str], consumer: str, block_ms: int, min_idle_ms: int
    ) -> Entry | None:
        """One entry for this consumer: first a timed-out one (XAUTOCLAIM), then a new one."""
        stream_keys = [keys.queue(namespace, q) for q in queues]
        for queue, key in zip(queues, stream_keys):
            for entry_id, fields in self._reclaim(key, consumer, min_idle_ms):
                return Entry.parse(queue, _s(entry_id), fields)
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
        picked: Entry | None = None
        for stream_key, entries in reply:
            stream_key = _s(stream_key)
            for entry_id, fields in entries:
                if picked is None:
                    queue = queues[stream_keys.index(stream_key)]
                    picked = Entry.parse(queue, _s(entry_id), fields)
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
                    self._last_reclaim.pop(stream_key, None)
        return picked

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
        """Move the lease's expiry to `expires_ms` if `lease` is the running delivery's."""
        return self._call(
            self._heartbeat, job_id, [keys.job(job_id)], [namespace, lease, expires_ms]
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
