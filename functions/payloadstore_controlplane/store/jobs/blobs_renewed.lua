#!lua
-- blobs_renewed: a blob's object was copied onto itself (or found needed no copy): record its
-- new expiry and forget the needs it covers (namespace slot).
--
-- KEYS[1]  the namespace's blob needs (keys.blob_needs)   KEYS[2] the blob's record (keys.blob)
-- ARGV[1]  sha256, 32 raw bytes (the needs' member)
-- ARGV[2]  the object's expiry now (ms)
-- ARGV[3]  size (bytes), or '' when nothing was copied (the record is left as it is)
-- ARGV[4]  the record's new TTL (ms), with ARGV[3]
--
-- A copy keeps the object's tag and key: the record keeps the policy fingerprint it had (a
-- record that had expired comes back with the size alone).
--
-- The need is removed only if it is still at most the expiry: a reference made while the copy
-- ran may have raised it (ZADD GT), and then it stays for a later run. Returns the need left
-- (ms), or 0.
if ARGV[3] ~= '' then
  local old = redis.call('GET', KEYS[2])
  local verified = old and string.match(old, '(|.*)$') or ''
  redis.call('SET', KEYS[2], ARGV[3] .. verified, 'PX', ARGV[4])
end
local need = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not need then return 0 end
if tonumber(need) <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
return math.floor(tonumber(need))
