#!lua flags=allow-oom
-- operate_once: one client operation per Idempotency-Key (redrive, purge, retry, cancel). The
-- first request claims the key; a request sent again with it (its answer was lost) gets the
-- first one's answer, and nothing is done twice. The answer is kept by operate_answer.lua.
-- allow-oom: the operations behind it end jobs (cancel, purge: memory freed) or move a job's
-- kept arguments into its queue (retry, redrive; ~100 B more each), and a retry cut between its
-- job step and its queue step is finished only by a re-send: refused here when Redis is full,
-- every keyed re-send answered 503 and the job read `queued` with no entry. A claim is ~100 B
-- and lives only while its request runs under a full Redis: dropped (release) when its request
-- fails, or when Redis, full, refuses to keep its answer (operate_answer.lua, default flags:
-- an answer kept per key for IDEMPOTENCY_TTL_S would let keyed requests that free nothing, a
-- purge of an empty queue, grow Redis past its maxmemory by ~330 B each).
--
-- KEYS[1]  the key's record (keys.operation): HASH f = request fingerprint, a = the answer
--          ('<status> <json>'), absent while the first request runs
-- ARGV[1]  mode: claim | release
-- ARGV[2]  the request's fingerprint (the route, its path and body, hashed)
-- ARGV[3]  claim: ms the claim holds while its request runs
--
-- Returns, claim: {'claimed'} | {'running'} (the first request has no answer yet) |
--   {'mismatch'} (the key was used for another request) | {'answer', a}.
-- release: 1 when a claim without an answer was dropped (its request failed: try again).
local mode, fingerprint = ARGV[1], ARGV[2]
local found = redis.call('HMGET', KEYS[1], 'f', 'a')
if mode == 'claim' then
  if not found[1] then
    redis.call('HSET', KEYS[1], 'f', fingerprint)
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
    return {'claimed'}
  end
  if found[1] ~= fingerprint then return {'mismatch'} end
  if not found[2] then return {'running'} end
  return {'answer', found[2]}
end
if found[1] ~= fingerprint then return 0 end
if found[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
