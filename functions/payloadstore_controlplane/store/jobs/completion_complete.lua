#!lua flags=allow-oom
-- completion_complete: finish a running job with a result, an error, or payload_corrupt.
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  new state   ARGV[2] digest of the post   ARGV[3] now_ms   ARGV[4] ttl_s
-- ARGV[5]  done value (inline result bytes, error JSON, or '' for an S3 result)
-- ARGV[6]  lease       ARGV[7] cancel_ack: '1' when the post is the error type Cancelled
-- ARGV[8]  namespace ('' any: callers that loaded the job first)
-- ARGV[9…] field, value, … to set (rk, …)
--
-- running -> new state (or cancelled, when a cancel was requested and this acknowledges it).
-- Only the current delivery's lease may finish the job; a job delivered before leases existed
-- (no `lt`) takes any lease. A repeat of the accepted post (same digest: an SDK retry, or this
-- script re-sent after a lost reply) is 'same' and names the entry again so it is dropped.
-- Returns {'missing'} | {'legacy'} | {'same', entry_id, queue, state, retries}
--       | {'conflict', state} | {'not_running', state} | {'lease_mismatch', state}
--       | {'ok', entry_id, queue, state, retries, consumer}   (retries: `rt`, for the ended-jobs
--         index; consumer: `d`, whose pending list holds the entry, for the settle step)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
if ARGV[8] ~= '' and redis.call('HGET', KEYS[1], 'n') ~= ARGV[8] then return {'missing'} end
local f = redis.call('HMGET', KEYS[1], 's', 'lt', 'x', 'q', 'g', 'cr', 'rt', 'd')
local s, entry = f[1], f[3] or ''
if entry == '*' then entry = '' end
if f[2] and f[2] ~= ARGV[6] then return {'lease_mismatch', s or ''} end
if s ~= 'running' then
  if s == 'queued' or s == 'awaiting_upload' then return {'not_running', s} end
  if f[5] == ARGV[2] then
    -- Written again (same value): a write, so the caller's WAIT on this connection covers the
    -- first run's too (replication is in order). A first run answered 503 because its WAIT
    -- timed out is then reported done only once a replica holds it.
    redis.call('HSET', KEYS[1], 'g', ARGV[2])
    return {'same', entry, f[4] or '', s, f[7] or '0'}
  end
  return {'conflict', s}
end
local state = ARGV[1]
if ARGV[7] == '1' and f[6] == '1' then state = 'cancelled' end
redis.call('HSET', KEYS[1], 's', state, 'g', ARGV[2], 'ua', ARGV[3], unpack(ARGV, 9))
redis.call('HDEL', KEYS[1], 'lx', 'd')
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'ok', entry, f[4], state, f[7] or '0', f[8] or ''}
