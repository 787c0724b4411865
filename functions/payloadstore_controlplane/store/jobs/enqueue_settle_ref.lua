#!lua flags=allow-oom
-- enqueue_settle_ref: the job-slot step of an S3-tier enqueue, run once its entry is appended
-- (enqueue_append.lua, the namespace slot): the job goes queued and names that entry in one
-- step, so no job reads `queued` without an entry to deliver it. A request cut off before this
-- step leaves the job `awaiting_upload`, as it was, and its entry, which a poll delivers as the
-- job's (delivery_start.lua) unless a later enqueue of the job was refused
-- (enqueue_refuse_ref.lua).
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] queue   ARGV[3] now_ms   ARGV[4] the entry id its append gave
-- ARGV[5]  the job's refused enqueues (`xr`) the request read before its checks
--
-- awaiting_upload -> queued (records the queue, tier s, created/updated at, the entry `x`),
-- unless an enqueue of the job was refused since the request read it (a concurrent re-send
-- refused for a policy changed meanwhile): then nothing changes ('refused'), and the entry,
-- which a poll drops too, is the caller's to drop. allow-oom: the entry is in the stream already; refusing these
-- few bytes under maxmemory would only leave the enqueue unanswered.
-- Returns {'missing'} | {'legacy'} | {'refused'} (a refusal overruled this try: drop the entry)
--       | {'created'} (queued on this entry, here or by a poll that met it first)
--       | {'exists'} (queued on an earlier request's entry: this one is not the job's, drop it)
--       | {'resumed'} (queued by an older control plane that never recorded its entry, which
--         appended before recording: this entry is the job's now)
--       | {'other_queue', queue} (this entry is not the job's, drop it)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return {'missing'} end
if redis.call('HGET', KEYS[1], 's') == 'awaiting_upload' then
  if tonumber(redis.call('HGET', KEYS[1], 'xr') or '0') > tonumber(ARGV[5]) then
    return {'refused'}
  end
  redis.call('HSET', KEYS[1], 's', 'queued', 'q', ARGV[2], 't', 's', 'ca', ARGV[3],
             'ua', ARGV[3], 'x', ARGV[4])
  redis.call('HDEL', KEYS[1], 'xr')
  return {'created'}
end
local f = redis.call('HMGET', KEYS[1], 'q', 'x')
if f[1] ~= ARGV[2] then return {'other_queue', f[1]} end
if f[2] == ARGV[4] then return {'created'} end
if f[2] then return {'exists'} end
redis.call('HSET', KEYS[1], 'x', ARGV[4])
return {'resumed'}
