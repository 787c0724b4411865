#!lua flags=allow-oom
-- enqueue_settle_ref: the job-slot step of an S3-tier enqueue, run once its entry is appended
-- (enqueue_append.lua, the namespace slot): the job goes queued and names that entry in one
-- step, so no job reads `queued` without an entry to deliver it. A request cut off before this
-- step (its answer lost, and then never sent again, or sent again and refused for a policy or
-- limit changed meanwhile) leaves the job `awaiting_upload`, as it was, and at most an entry
-- naming it, which delivery_start.lua drops (after a grace) and purge leaves alone.
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] queue   ARGV[3] now_ms   ARGV[4] the entry id its append gave
--
-- awaiting_upload -> queued (records the queue, tier s, created/updated at, the entry `x`).
-- allow-oom: the entry is in the stream already; refusing these few bytes under maxmemory would
-- only leave it stray and the enqueue unanswered.
-- Returns {'missing'} | {'legacy'} | {'created'}
--       | {'exists'} (queued by an earlier request: this entry is not the job's, drop it)
--       | {'resumed'} (queued by an older control plane that never recorded its entry, which
--         appended before recording: this entry is the job's now)
--       | {'other_queue', queue} (this entry is not the job's, drop it)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return {'missing'} end
if redis.call('HGET', KEYS[1], 's') == 'awaiting_upload' then
  redis.call('HSET', KEYS[1], 's', 'queued', 'q', ARGV[2], 't', 's', 'ca', ARGV[3],
             'ua', ARGV[3], 'x', ARGV[4])
  return {'created'}
end
local q = redis.call('HGET', KEYS[1], 'q')
if q ~= ARGV[2] then return {'other_queue', q} end
if redis.call('HEXISTS', KEYS[1], 'x') == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'x', ARGV[4])
return {'resumed'}
