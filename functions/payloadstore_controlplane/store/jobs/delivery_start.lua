#!lua flags=allow-oom
-- delivery_start: turn a queue entry a poll took into a delivery of its job (job slot).
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  entry id            ARGV[2]  now_ms          ARGV[3] namespace   ARGV[4] queue
-- ARGV[5]  inline size ('' for an S3 entry)             ARGV[6] ttl_s
-- ARGV[7]  lease               ARGV[8]  lease expiry (ms)                   ARGV[9] consumer
-- ARGV[10] max_deliveries      ARGV[11] limit error JSON                    ARGV[12] its digest
-- ARGV[13] cancel error JSON   ARGV[14] its digest
-- ARGV[15] the entry's `r`: the job's refused enqueues its appending request saw ('' none)
--
-- queued -> running, or running (lease expired) -> running: a new lease (`lt`), its expiry
-- (`lx`) and the consumer holding the entry (`d`); the attempt count `a` goes up by one.
-- queued|running -> cancelled when a cancel was requested (`cr`); -> failed past max_deliveries
-- deliveries since the last retry (`a` - `ab`). A delivery ends a retry's `rq`.
-- The entry must be the job's current one (`x`), or `x` is '*' (requeued after payload_lost or
-- a retry, until requeue_record.lua names the requeue's entry: whichever of its entries is
-- delivered first becomes the job's) -- but never a retried job's `rq`, the entry of the end it
-- was retried from, while `x` is '*': that end's settle step may still drop it (a poll that
-- took it back after the visibility timeout would run the job on a deleted entry). Such an
-- entry is answered 'wait' and left pending: the retry's entry runs the job, or, once the
-- retry relies on this one and records it, it is taken back again after the timeout.
-- The hash lives at least RESULT_TTL_S past the lease's expiry: a job that waited long in its
-- queue does not vanish while it runs (heartbeats move this on).
-- Re-sent with the same lease (a reply lost to a timeout): answered as the first time.
-- An entry of a job still `awaiting_upload` (its enqueue's job step has not run) queues the job
-- and is delivered, unless an enqueue of the job was refused after its appending request read
-- the job ('terminal': dropped).
-- Returns {'missing'} | {'legacy'} | {'terminal', state, retries} | {'stale'} | {'leased'}
--       | {'wait'}
--       | {'cancelled', retries} | {'limit', deliveries, retries}
--       | {'ok', attempt, tier, pz, pc, ph hex, pb, pm hex}   (retries: `rt`, for the ended-jobs
--         index)
local keep_until = tonumber(ARGV[8]) + tonumber(ARGV[6]) * 1000
local function hex(raw)
  return raw and raw:gsub('.', function(c) return string.format('%02x', c:byte()) end) or false
end
local function args_facts(attempt)
  local f = redis.call('HMGET', KEYS[1], 't', 'pz', 'pc', 'ph', 'pb', 'pm')
  return {'ok', attempt, f[1], f[2], f[3], hex(f[4]), f[5], hex(f[6])}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[5] == '' then return {'missing'} end
  -- An inline job's hash is born at its first delivery.
  redis.call('HSET', KEYS[1], 'n', ARGV[3], 'q', ARGV[4], 't', 'i', 's', 'running', 'a', 1,
             'x', ARGV[1], 'pz', ARGV[5], 'ua', ARGV[2], 'lt', ARGV[7], 'lx', ARGV[8],
             'd', ARGV[9])
  redis.call('PEXPIREAT', KEYS[1], keep_until)
  return {'ok', 1, 'i', ARGV[5], false, false}
end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local s = redis.call('HGET', KEYS[1], 's')
if s == 'awaiting_upload' and redis.call('HGET', KEYS[1], 'n') == ARGV[3] then
  -- An S3-tier enqueue appends its entry only once the upload is verified, and its job step
  -- (enqueue_settle_ref.lua) then queues the job on it. An entry met before that step (a
  -- daemon's poll woken by the append, or an enqueue cut off between its steps and never sent
  -- again) is the job's: queued here, then delivered below. Unless an enqueue of the job was
  -- refused after the appending request read the job (a re-send refused for a policy or limit
  -- changed meanwhile: `xr` counts refusals, the entry's `r` those its request saw; a count,
  -- as the entry's id and this step come from two nodes' clocks in cluster mode): then it is
  -- a stray of an overruled try, dropped as a terminal job's entry is.
  local refused = tonumber(redis.call('HGET', KEYS[1], 'xr') or '0')
  if tonumber(ARGV[15] ~= '' and ARGV[15] or '0') >= refused then
    redis.call('HSET', KEYS[1], 's', 'queued', 'q', ARGV[4], 't', 's', 'ca', ARGV[2],
               'ua', ARGV[2])
    s = 'queued'
  end
end
if s ~= 'queued' and s ~= 'running' then
  return {'terminal', s, redis.call('HGET', KEYS[1], 'rt') or '0'}
end
local x = redis.call('HGET', KEYS[1], 'x')
if x and x ~= ARGV[1] and x ~= '*' then return {'stale'} end
if x == '*' and redis.call('HGET', KEYS[1], 'rq') == ARGV[1] then return {'wait'} end
if s == 'running' and redis.call('HGET', KEYS[1], 'lt') == ARGV[7] then
  return args_facts(tonumber(redis.call('HGET', KEYS[1], 'a')))
end
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
local retries = redis.call('HGET', KEYS[1], 'rt') or '0'
if redis.call('HGET', KEYS[1], 'cr') == '1' then
  finish('cancelled', ARGV[13], ARGV[14])
  return {'cancelled', retries}
end
local done = tonumber(redis.call('HGET', KEYS[1], 'a') or '0')
done = done - tonumber(redis.call('HGET', KEYS[1], 'ab') or '0')
if done >= tonumber(ARGV[10]) then
  finish('failed', ARGV[11], ARGV[12])
  return {'limit', done, retries}
end
redis.call('HSET', KEYS[1], 's', 'running', 'x', ARGV[1], 'ua', ARGV[2], 'lt', ARGV[7],
           'lx', ARGV[8], 'd', ARGV[9])
redis.call('HDEL', KEYS[1], 'rq', 'lq')
redis.call('PEXPIREAT', KEYS[1], keep_until, 'GT')
return args_facts(redis.call('HINCRBY', KEYS[1], 'a', 1))
