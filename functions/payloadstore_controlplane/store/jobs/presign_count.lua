#!lua flags=allow-oom
-- presign_count: count one more presign of an issued key, up to MAX_PRESIGNS_PER_JOB.
--
-- KEYS[1]  job hash
-- ARGV[1]  count field: pn (args) | rn (result)
-- ARGV[2]  max_presigns
--
-- No state change. Returns the new count | -1 the cap is reached | 0 nothing was issued.
local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then return 0 end
if tonumber(n) >= tonumber(ARGV[2]) then return -1 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
