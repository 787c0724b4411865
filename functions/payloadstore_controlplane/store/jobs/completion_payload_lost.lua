#!lua flags=allow-oom
-- completion_payload_lost: a daemon found the job's args object gone (S3 404).
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  max_requeues   ARGV[2] digest   ARGV[3] now_ms   ARGV[4] ttl_s
-- ARGV[5]  error JSON     ARGV[6] lease
--
-- running -> queued (requeue, up to max_requeues: the caller then appends a new entry, records
-- it as the job's (requeue_record.lua) and lets the old one go, or the new one if a poll
-- started the job from the old one first: completion_lost_release.lua) or running ->
-- payload_lost. A requeue sets `x` to '*' here, in the same step: whichever of the job's
-- entries is delivered first becomes its entry, so a daemon blocked on the queue that takes
-- the new entry before anything else happens runs the job (it is never taken for a stale
-- double). The requeueing lease stays in `lt` (the job is not
-- running, so it finishes nothing) and the entry it replaces in `lq` (until the next
-- delivery), so that this script re-sent after a lost reply answers 'requeue' with the same
-- entry: the caller's append is then done again from it, and a doubled entry is dropped as
-- stale.
-- Returns {'missing'} | {'legacy'} | {'same', entry_id, queue, state, retries}
--       | {'not_running', state} | {'lease_mismatch', state} | {'requeue', entry_id, queue}
--       | {'terminal', entry_id, queue, retries, consumer}   (retries: `rt`, for the ended-jobs
--         index; consumer: `d`, whose pending list holds the entry, for the settle step)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 's', 'lt', 'x', 'q', 'l', 'g', 'rt', 'd')
local s, entry, queue, lost = f[1], f[3] or '', f[4], tonumber(f[5] or '0')
if entry == '*' then entry = '' end
if f[2] and f[2] ~= ARGV[6] then return {'lease_mismatch', s or ''} end
if s ~= 'running' then
  if s == 'queued' and f[2] == ARGV[6] and lost > 0 then
    return {'requeue', redis.call('HGET', KEYS[1], 'lq') or '', queue}
  end
  if s ~= 'queued' and s ~= 'awaiting_upload' and f[6] == ARGV[2] then
    -- Written again: the caller's WAIT then covers the first run (see completion_complete).
    redis.call('HSET', KEYS[1], 'g', ARGV[2])
    return {'same', entry, queue or '', s, f[7] or '0'}
  end
  return {'not_running', s}
end
if lost < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'l', lost + 1, 's', 'queued', 'x', '*', 'ua', ARGV[3], 'lq', entry)
  redis.call('HDEL', KEYS[1], 'lx', 'd')
  return {'requeue', entry, queue}
end
redis.call('HSET', KEYS[1], 's', 'payload_lost', 'g', ARGV[2], 'rk', 'e', 'ua', ARGV[3])
redis.call('HDEL', KEYS[1], 'lx', 'd')
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'terminal', entry, queue, f[7] or '0', f[8] or ''}
