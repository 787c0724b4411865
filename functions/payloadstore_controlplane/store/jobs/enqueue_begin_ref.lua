#!lua
-- enqueue_begin_ref: the job-slot half of an S3-tier enqueue (the XADD is enqueue_append).
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] queue   ARGV[3] now_ms
--
-- awaiting_upload -> queued (records the queue, tier s, created/updated at).
-- Returns {'missing'} | {'legacy'} | {'created'} | {'exists'} (its entry is recorded)
--       | {'resume'} (queued by an earlier request that never recorded its entry: append it)
--       | {'other_queue', queue}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return {'missing'} end
if redis.call('HGET', KEYS[1], 's') == 'awaiting_upload' then
  redis.call('HSET', KEYS[1], 's', 'queued', 'q', ARGV[2], 't', 's', 'ca', ARGV[3], 'ua', ARGV[3])
  return {'created'}
end
local q = redis.call('HGET', KEYS[1], 'q')
if q ~= ARGV[2] then return {'other_queue', q} end
if redis.call('HEXISTS', KEYS[1], 'x') == 1 then return {'exists'} end
return {'resume'}
