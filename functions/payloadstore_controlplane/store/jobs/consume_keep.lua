#!lua flags=allow-oom
-- consume_keep: a finished job of a namespace whose retention is longer than RESULT_TTL_S
-- (`7d`/`30d`) keeps its record that long from its end.
--
-- KEYS[1]  job hash   KEYS[2] done list
-- ARGV[1]  the retention (ms)   ARGV[2] now (ms): the end time when the hash has none
--
-- The expiry is the job's end (`ua`) plus the retention, never shortened (PEXPIREAT GT): a
-- re-sent post, or this script re-sent after a lost reply, sets the same time again. A key
-- that is gone is left gone. allow-oom: it adds no data.
-- Returns 1 when the hash exists, 0 otherwise.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ended = tonumber(redis.call('HGET', KEYS[1], 'ua')) or tonumber(ARGV[2])
local at = ended + tonumber(ARGV[1])
redis.call('PEXPIREAT', KEYS[1], at, 'GT')
redis.call('PEXPIREAT', KEYS[2], at, 'GT')
return 1
