#!lua flags=allow-oom
-- operate_retry: a client retries a failed or cancelled job (job slot).
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  namespace   ARGV[2] now_ms   ARGV[3] ttl_s
-- ARGV[4]  the states it may leave, comma-separated (e.g. 'failed,payload_lost,cancelled')
--
-- failed|payload_lost|payload_corrupt|cancelled -> queued, with `x` = '*' (whichever of its
-- entries is delivered first becomes its entry, as after a payload_lost requeue, but never
-- `rq`: delivery_start.lua) and `rq` = the job's entry id before the retry (1: it had none of
-- its own) until that delivery; the caller then appends an entry, or relies on that one if it
-- is still in the stream and no daemon holds it (operate_requeue.lua), and records the entry
-- as the job's `x` (requeue_record.lua). Kept: the id, `ca`, `a` (attempts go on counting), the result issue;
-- `ab` = `a` so the delivery cap counts again from here; `rt` goes up by one. Dropped: the
-- outcome (`g`, `rk`, the done list), `cr`, `l`, `lx`, `d`. The hash lives at least ttl_s from
-- now. A retry of a job still queued from a retry (`rq`) is answered 'resume' with the same
-- facts (the caller's requeue then finds its own record and appends nothing more, or appends
-- what a crash left undone). allow-oom: a retry adds a few fields and drops the end's done list
-- (its error text), and its queue step moves the kept arguments into the queue
-- (operate_requeue.lua): no payload byte more. Refused when Redis is full, the resume of a retry
-- cut between its steps could never run, and the job read `queued` with no entry until memory
-- came back and somebody sent the retry again.
-- Returns {'missing'} | {'legacy'} | {'refused', state}
--       | {'ok' | 'resume', attempts, retries, tier, queue, previous entry id ('' none)}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'a', 'rt', 'rq', 't', 'q', 'x')
if f[1] ~= ARGV[1] then return {'missing'} end
local s, attempts, retries = f[2] or '', f[3] or '0', tonumber(f[4] or '0')
local function previous(rq) return (rq and rq ~= '1') and rq or '' end
if s == 'queued' and f[5] then
  return {'resume', attempts, retries, f[6], f[7], previous(f[5])}
end
local allowed = false
for state in string.gmatch(ARGV[4], '[^,]+') do
  if state == s then allowed = true end
end
if not allowed then return {'refused', s} end
retries = retries + 1
local rq = (f[8] and f[8] ~= '*') and f[8] or '1'
redis.call('HSET', KEYS[1], 's', 'queued', 'x', '*', 'rq', rq, 'rt', retries, 'ab', attempts,
           'ua', ARGV[2])
redis.call('HDEL', KEYS[1], 'g', 'rk', 'cr', 'l', 'lx', 'd')
redis.call('DEL', KEYS[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) * 1000 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return {'ok', attempts, retries, f[6], f[7], previous(rq)}
