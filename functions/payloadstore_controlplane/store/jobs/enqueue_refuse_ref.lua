#!lua flags=allow-oom
-- enqueue_refuse_ref: an S3-tier enqueue refused (a policy or limit changed since the upload, a
-- blob gone): what an earlier try of it appended must not run a job its client is told was
-- refused (job slot).
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] queue
--
-- A job still awaiting_upload gets `xr`, the refusal's time by Redis's clock (the clock of entry
-- ids): a poll drops an entry of the job appended before it (delivery_start.lua); a later
-- enqueue that is accepted queues the job and spends the mark (enqueue_settle_ref.lua).
-- allow-oom: a few bytes, which keep a refused job from running.
-- Returns {'refused'} | {'queued'} (already queued on that queue, on a recorded entry: a poll met
-- an earlier try's entry first; the refused request answers the job instead)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'refused'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'refused'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'q', 'x')
if f[1] ~= ARGV[1] then return {'refused'} end
if f[2] == 'awaiting_upload' then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'xr', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  return {'refused'}
end
if f[3] == ARGV[2] and f[4] then return {'queued'} end
return {'refused'}
