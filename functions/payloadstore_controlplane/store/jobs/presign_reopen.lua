#!lua
-- presign_reopen: forget the kept completion of a result's multipart upload whose object the
-- namespace's policy now refuses (job slot).
--
-- KEYS[1]  job hash
-- ARGV[1]  the attempt whose delivery issued the result key (`ra`)
-- ARGV[2]  the checksum kept at its completion (`rm`: 32 raw bytes of a composite sha256, or 8
--          of a whole-object CRC64NVME)
--
-- A post that completed and verified the upload, then failed before storing the result (a
-- 503), leaves the completion kept; a policy change before the re-post refuses the object
-- (policy_mismatch). With the completion forgotten, the delivery's re-presign opens a fresh
-- upload under the current policy (logic/presign.py) instead of answering "completed
-- already". Only while the job still runs that attempt's issue with that very completion: a
-- stored result (the job no longer running) is never reopened. No state change.
-- Default flags: refused before it starts when Redis is full.
-- Returns 1 forgotten | 0 nothing written.
local f = redis.call('HMGET', KEYS[1], 's', 'ra', 'rm')
if f[1] ~= 'running' then return 0 end
if tonumber(f[2] or '0') ~= tonumber(ARGV[1]) then return 0 end
if f[3] ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'rm')
return 1
