#!lua flags=allow-oom
-- operate_purge: purge's decision for one entry it scanned as queued (job slot): cancel the job
-- only if it is still queued on that entry, in one step against its current state.
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  namespace   ARGV[2] the entry id purge scanned   ARGV[3] queue
-- ARGV[4]  '1': the entry is inline (its job has no hash before its first delivery)
-- ARGV[5]  now_ms   ARGV[6] ttl_s   ARGV[7] error JSON   ARGV[8] its digest   ARGV[9] created_ms
--
-- queued (on this entry: `x` is it, '*', or absent) -> cancelled, as lifecycle_cancel does; a
-- queued inline job with no hash is born cancelled. A job a daemon took since purge scanned
-- (running, on this entry) is left alone: no cancel is requested, purge only cancels queued
-- jobs. The caller then drops the entry if no daemon took it (completion_settle.lua, purge's
-- mode). Re-sent after a lost reply, it answers 'ended' (the job is cancelled; the caller drops
-- the entry all the same, uncounted: telling a re-send by its time would take a cancel made the
-- same millisecond for purge's own). allow-oom: ending a job frees memory (a born-cancelled
-- hash is ~100 B).
-- Returns {'missing'} | {'legacy'} | {'stale'} the entry is not the job's (drop it)
--       | {'started'} running or uploading: left alone | {'ended', state, retries}
--       | {'cancelled', retries}
local function finish()
  redis.call('HSET', KEYS[1], 's', 'cancelled', 'cr', '1', 'g', ARGV[8], 'rk', 'e', 'ua', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[7])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[4] ~= '1' then return {'missing'} end
  redis.call('HSET', KEYS[1], 'n', ARGV[1], 'q', ARGV[3], 't', 'i', 'a', 0, 'ca', ARGV[9])
  finish()
  return {'cancelled', '0'}
end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'x', 'rt')
if f[1] ~= ARGV[1] then return {'missing'} end
local s, x, retries = f[2] or '', f[3], f[4] or '0'
if x and x ~= '*' and x ~= ARGV[2] then return {'stale'} end
if s == 'queued' then
  finish()
  return {'cancelled', retries}
end
if s == 'running' or s == 'awaiting_upload' then return {'started'} end
return {'ended', s, retries}
