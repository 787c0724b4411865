#!lua flags=allow-oom
-- consume_mark: remember on the job when a consumed payload of it is deleted (retention
-- `consume`), so a read past that time is answered 410 from the hash, without asking S3.
--
-- KEYS[1]  job hash
-- ARGV[1]  field: pd (arguments) | rd (result)   ARGV[2] deletion due at (ms since epoch)
--
-- The first time stays (as the due set's ZADD NX keeps it). A job whose hash is gone (expired)
-- is left alone: no hash is created without its TTL. allow-oom: one small field on a hash that
-- exists, written on the read and post paths, which never fail because Redis is full.
-- Returns 1 when written, 0 otherwise.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
