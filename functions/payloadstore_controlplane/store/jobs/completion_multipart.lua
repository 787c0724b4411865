#!lua flags=allow-oom
-- completion_multipart: a multipart upload was completed and its composite checked, or it was
-- aborted (job slot).
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  field prefix: p (args) | r (result)
-- ARGV[2]  composite sha256 (32 raw bytes) or whole-object CRC64NVME (8 raw bytes) | '' the
--          upload was aborted: only forget it
-- ARGV[3]  the upload id the caller completed (or aborted)
-- ARGV[4]  r: the attempt whose delivery issued the result key the caller completed (`ra`,
--          absent: 0); ignored for p
--
-- No state change: the issue keeps the composite (`pm` | `rm`, 32 bytes) beside its part size,
-- and the parts hash (upload id and per-part checksums) is deleted. Only the upload still on
-- record is touched: a lapsed delivery whose completion ends after a redelivery presigned its
-- own result (`ra` moved on, the parts hash names another upload) writes nothing, so the
-- redelivery's upload stays open. Re-sent (the parts hash gone, the same composite kept):
-- answered 1 again.
-- Returns 1 | 0 no such job, the key's issue is not multipart, or the issue or upload is no
-- longer the caller's (nothing written).
local p = ARGV[1]
if redis.call('HEXISTS', KEYS[1], p .. 'b') == 0 then return 0 end
if p == 'r' and tonumber(redis.call('HGET', KEYS[1], 'ra') or '0') ~= tonumber(ARGV[4]) then
  return 0
end
local upload = redis.call('HGET', KEYS[2], 'u')
if upload ~= ARGV[3] then
  if not upload and ARGV[2] ~= '' and redis.call('HGET', KEYS[1], p .. 'm') == ARGV[2] then
    return 1
  end
  return 0
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], p .. 'm', ARGV[2]) end
redis.call('DEL', KEYS[2])
return 1
