#!lua flags=allow-oom
-- lifecycle_cancel: a client cancels a job.
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  namespace
-- ARGV[2]  queue of a queued inline job that has no hash yet ('' otherwise)
-- ARGV[3]  now_ms   ARGV[4] ttl_s   ARGV[5] error JSON   ARGV[6] its digest   ARGV[7] created_ms
--
-- queued -> cancelled (the caller drops the entry); running -> running with `cr` = 1 (the
-- caller wakes the holder `d`'s leases long-poll; a redelivery ends it cancelled instead).
-- Re-sent after a lost reply (same now_ms, the job cancelled by it): answered as the first time.
-- awaiting_upload -> awaiting_upload, a refusal counted (`xr`): 'missing'.
-- Returns {'missing'} | {'legacy'} | {'terminal', state} | {'requested', consumer}
--       | {'cancelled', entry_id, queue, retries}   (retries: `rt`, for the ended-jobs index)
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
  return {'cancelled', '', ARGV[2], '0'}
end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'x', 'q', 'ua', 'rt', 'd')
if f[1] ~= ARGV[1] then return {'missing'} end
if f[2] == 'awaiting_upload' then
  -- No job yet (404), and none from an enqueue sent before this cancel: an entry a cut-off try
  -- appended is overruled as a refused re-send's is (`xr`, enqueue_refuse_ref.lua), so the
  -- client told "no such job" never sees it run; an enqueue sent after is accepted.
  redis.call('HINCRBY', KEYS[1], 'xr', 1)
  return {'missing'}
end
local entry = f[3] or ''
if entry == '*' then entry = '' end
if f[2] == 'running' then
  redis.call('HSET', KEYS[1], 'cr', '1', 'ua', ARGV[3])
  return {'requested', f[7] or ''}
end
if f[2] == 'cancelled' and f[5] == ARGV[3] then return {'cancelled', entry, f[4] or '', f[6] or '0'} end
if f[2] ~= 'queued' then return {'terminal', f[2] or ''} end
finish()
return {'cancelled', entry, f[4] or '', f[6] or '0'}
