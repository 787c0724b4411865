#!lua flags=allow-oom
-- operate_once: one client operation per Idempotency-Key (redrive, purge, retry, cancel). The
-- first request claims the key; a request sent again with it (its answer was lost) gets the
-- first one's answer, and nothing is done twice.
-- allow-oom: the operations behind it end jobs (cancel, purge: memory freed) or move a job's
-- kept arguments into its queue (retry, redrive; ~100 B more each), and a retry cut between its
-- job step and its queue step is finished only by a re-send: refused here when Redis is full,
-- every keyed re-send answered 503 and the job read `queued` with no entry. A claim is ~100 B,
-- dropped when its request fails, kept with its answer for the key's hour when it succeeds.
--
-- KEYS[1]  the key's record (keys.operation): HASH f = request fingerprint, a = the answer
--          ('<status> <json>'), absent while the first request runs
-- ARGV[1]  mode: claim | done | release
-- ARGV[2]  the request's fingerprint (the route, its path and body, hashed)
-- ARGV[3]  claim: ms the claim holds while its request runs; done: ms the answer is kept
-- ARGV[4]  done: the answer
--
-- Returns, claim: {'claimed'} | {'running'} (the first request has no answer yet) |
--   {'mismatch'} (the key was used for another request) | {'answer', a}.
-- done: 1 when the answer was kept (0: the claim is gone or not this request's).
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
if mode == 'done' then
  redis.call('HSET', KEYS[1], 'a', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  return 1
end
if found[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
