#!lua
-- blobs_record: remember a verified blob of a namespace, or renew it (namespace slot).
--
-- KEYS[1]  the blob's record (keys.blob: namespace + sha256)
-- KEYS[2]  optional: the blob's upload hash (keys.blob_upload), deleted (its upload completed)
-- ARGV[1]  `<size>|<policy fingerprint>` (the policy it was verified under: models/policy.py)
-- ARGV[2]  ttl_ms (ends the known margin before the object's expiry)
--
-- Sets the record's value and its TTL (models/blob_lifetime.py record_ttl_s).
-- Default flags: refused before it starts when Redis is full. Returns 'ok'.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if KEYS[2] then redis.call('DEL', KEYS[2]) end
return 'ok'
