#!lua flags=allow-oom
-- completion_multipart: a multipart upload was completed and its composite checked.
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  field prefix: p (args) | r (result)
-- ARGV[2]  composite sha256 (32 raw bytes)
--
-- No state change: the issue keeps the composite (`pm` | `rm`, 32 bytes) beside its part size,
-- and the parts hash (upload id and per-part checksums) is deleted.
-- Returns 1 | 0 no such job, or the key's issue is not multipart (nothing written).
if redis.call('HEXISTS', KEYS[1], ARGV[1] .. 'b') == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1] .. 'm', ARGV[2])
redis.call('DEL', KEYS[2])
return 1
