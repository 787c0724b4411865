#!lua flags=allow-oom
-- presign_result: record what the current delivery will upload as the job's result.
--
-- KEYS[1]  job hash
-- ARGV[1]  namespace of the caller
-- ARGV[2]  lease of the caller's delivery
-- ARGV[3…] field, value, … of the issue (rz, rn=1, rc?, rh?, rb?, ri)
--
-- A result issue belongs to one delivery (`ra` = the attempt that issued it). The current
-- delivery may replace an issue an earlier delivery left (its daemon died after presigning):
-- a redelivered job may compute a different result. Nothing else changes state.
-- Returns {'missing'} | {'legacy'} | {'not_running', state} | {'lease_mismatch', state}
--       | {'exists'}  this delivery issued a result already (a re-presign: same facts expected)
--       | {'ok', attempt}  recorded (new, or replacing an earlier delivery's); the key is that
--                        attempt's (payload_keys.key_for)
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'lt', 'a', 'ra', 'rz')
if f[1] ~= ARGV[1] then return {'missing'} end
if f[2] ~= 'running' then return {'not_running', f[2] or ''} end
-- A job delivered before leases existed (no `lt`) takes any lease.
if f[3] and f[3] ~= ARGV[2] then return {'lease_mismatch', f[2]} end
if f[6] and f[5] == f[4] then return {'exists'} end
redis.call('HDEL', KEYS[1], 'rc', 'rh', 'rb', 'rm')
redis.call('HSET', KEYS[1], 'ra', f[4] or '0', unpack(ARGV, 3))
return {'ok', f[4] or '0'}
