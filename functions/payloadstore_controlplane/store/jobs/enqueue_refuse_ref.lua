#!lua flags=allow-oom
-- enqueue_refuse_ref: an S3-tier enqueue refused (a policy or limit changed since the upload, a
-- blob gone): what an earlier try of it appended must not run a job its client is told was
-- refused (job slot).
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] queue
--
-- A job still awaiting_upload counts the refusal (`xr` + 1). Every S3-tier enqueue appends its
-- entry with the count it read before its checks (field `r`): an entry with fewer is a try the
-- refusal overruled, which a poll drops (delivery_start.lua) and whose job step queues nothing
-- (enqueue_settle_ref.lua). A count, not a time: the entry's id comes from the queue's node and
-- this step runs on the job's, whose clocks differ in cluster mode and across a failover.
-- allow-oom: a few bytes, which keep a refused job from running.
-- Returns {'refused'} | {'queued'} (already queued on that queue, on a recorded entry: a poll met
-- an earlier try's entry first; the refused request answers the job instead)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'refused'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'refused'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'q', 'x')
if f[1] ~= ARGV[1] then return {'refused'} end
if f[2] == 'awaiting_upload' then
  redis.call('HINCRBY', KEYS[1], 'xr', 1)
  return {'refused'}
end
if f[3] == ARGV[2] and f[4] then return {'queued'} end
return {'refused'}
