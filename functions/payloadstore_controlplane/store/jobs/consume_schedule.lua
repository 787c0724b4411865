#!lua flags=allow-oom
-- consume_schedule: record S3 keys of a retention `consume` namespace for deletion at a time
-- (the scheduled function deletes what is due, logic/policy.py drain_consumed).
--
-- KEYS[1]  the namespace's due set (keys.consume_due)
-- ARGV[1]  due at (ms since epoch)   ARGV[2..] the S3 keys
--
-- A key already recorded keeps its first time (ZADD NX): a re-sent post, a re-read or a
-- script re-sent after a lost reply changes nothing. allow-oom: a result read and a result
-- post must not fail because Redis is full (issue 43), and this adds at most one member per S3
-- object of a job that already exists (about 80 B, once), which the drain removes again.
-- Returns how many keys were added.
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i])
end
return added
