#!lua flags=allow-oom
-- lifecycle_heartbeat: the current delivery says it is alive; its lease runs on.
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace   ARGV[2] lease   ARGV[3] new lease expiry (ms)   ARGV[4] ttl_s
--
-- running -> running with `lx` moved on, and the hash kept at least RESULT_TTL_S past it (a
-- job may run for longer than the retention counted from its enqueue). Idempotent.
-- Returns {'missing'} | {'legacy'} | {'lease_mismatch', state}
--       | {'ok', cancel_requested, entry_id, queue, consumer}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'lt', 'cr', 'x', 'q', 'd')
if f[1] ~= ARGV[1] then return {'missing'} end
if f[2] ~= 'running' or f[3] ~= ARGV[2] then return {'lease_mismatch', f[2] or ''} end
redis.call('HSET', KEYS[1], 'lx', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]) * 1000, 'GT')
return {'ok', f[4] or '0', f[5] or '', f[6] or '', f[7] or ''}
