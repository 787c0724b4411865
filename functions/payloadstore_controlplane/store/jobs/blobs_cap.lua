#!lua
-- blobs_cap: shorten a blob's record to no more than a given TTL (namespace slot).
--
-- KEYS[1]  the blob's record (keys.blob: namespace + sha256)
-- ARGV[1]  ttl_ms: the longest the record may live from now
--
-- Before its object is replaced by an upload under another policy (a `kms_key` change), the
-- record must not promise the old object's days: the new object, of the current class, may
-- live less. Only shortens (a record already shorter, or gone, is left as it is); the value
-- (size and fingerprint) is kept, so a retry still takes it. Default flags: refused before it
-- starts when Redis is full. Returns 1 when the TTL was shortened, else 0.
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
if ttl == -1 or ttl > tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
