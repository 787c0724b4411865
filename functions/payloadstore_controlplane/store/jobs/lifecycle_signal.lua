#!lua flags=allow-oom
-- lifecycle_signal: wake a daemon's leases long-poll (a cancel was requested of a job it holds).
--
-- KEYS[1]  the daemon's cancel list (keys.cancels)
-- ARGV[1]  job id   ARGV[2] ttl_s (VISIBILITY_TIMEOUT_S: no long-poll of a live daemon is
--          further apart; the list of a daemon that is gone expires)
--
-- Only a wake-up: the job hash's `cr` is what the long-poll answers from. Re-sent after a lost
-- reply, it pushes the id once more: one more early answer, nothing else.
-- Returns the list's length.
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return n
