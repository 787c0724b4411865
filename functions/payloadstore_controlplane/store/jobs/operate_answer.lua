#!lua
-- operate_answer: keep the answer of a client operation that claimed its Idempotency-Key
-- (operate_once.lua), so a request sent again with the key gets it.
-- Default flags: refused before it starts when Redis is full (the caller then drops the claim,
-- operate_once.lua's release, and answers all the same): an answer kept per key for the key's
-- hour is bytes per request, not per job, and requests that free nothing (a purge of an empty
-- queue, a redrive with nothing to retry, a cancel of a running job) would grow a full Redis
-- without bound. Under a full Redis a keyed operation is thus answered as one without a key:
-- its repeat runs again (a cancel or retry done then answers 409 with the job's state).
--
-- KEYS[1]  the key's record (keys.operation): HASH f = request fingerprint, a = the answer
-- ARGV[1]  the request's fingerprint   ARGV[2] ms the answer is kept
-- ARGV[3]  the answer ('<status> <json>')
-- Returns 1 when the answer was kept (0: the claim is gone or not this request's).
if redis.call('HGET', KEYS[1], 'f') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'a', ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
