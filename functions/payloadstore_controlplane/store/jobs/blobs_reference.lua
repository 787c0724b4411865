#!lua
-- blobs_reference: check the blobs a job or a result references and record how long they are
-- needed (namespace slot). The request path's whole part in renewal: no S3 call, one script.
--
-- KEYS[1]     the namespace's blob needs (keys.blob_needs: zset, member = sha256 raw, score =
--             ms until which a reference needs the object)
-- KEYS[2…]    each blob's record (keys.blob: `<size>|<policy fingerprint>`, or `<size>`)
-- ARGV[1]     now (ms)   ARGV[2] need: until when these references need the objects (ms)
-- ARGV[3]     known margin (ms): a record expires this long before its object
-- ARGV[4]     the fingerprint of the namespace's policy now ('' none: any record will do)
-- ARGV[5…]    each blob's sha256, 32 raw bytes (the needs' members), in KEYS order
--
-- A record verified under another policy (its fingerprint differs; a record without one, of an
-- older release, is taken) is not the namespace's blob any more, as a payload uploaded under
-- the policy before a change is refused: it counts as missing (POST .../blobs uploads it again
-- under the current policy). A record's TTL tells its object's expiry (now + PTTL + margin).
-- Where the need goes past it, the need is added to the zset (ZADD GT: the latest need wins)
-- for the scheduled renewer; a blob whose object outlives the need writes nothing. Returns the
-- 1-based positions of the blobs the namespace does not have (empty: all known).
local now, need, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local policy = ARGV[4]
local missing = {}
for i = 2, #KEYS do
  local value = redis.call('GET', KEYS[i])
  local ttl = value and redis.call('PTTL', KEYS[i]) or -2
  local verified = value and string.match(value, '|(.*)$')
  if ttl == -2 or (policy ~= '' and verified and verified ~= policy) then
    missing[#missing + 1] = i - 1
  elseif ttl >= 0 and need > now + ttl + margin then
    redis.call('ZADD', KEYS[1], 'GT', need, ARGV[i + 3])
  end
end
return missing
