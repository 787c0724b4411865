#!lua
-- blobs_upload: remember the S3 multipart upload created for a blob (namespace slot).
--
-- KEYS[1]  the blob's upload hash (keys.blob_upload: namespace + sha256)
-- ARGV[1]  upload id   ARGV[2] size (bytes)   ARGV[3] part size (bytes)   ARGV[4] ttl_s
--
-- An upload already open for the blob (a concurrent uploader created one first) wins: its id,
-- size and part size are answered and nothing is written (the caller aborts its own). The hash
-- expires after ttl_s (a day: the bucket's lifecycle aborts an incomplete upload then).
-- Returns {upload id, size, part size} of the upload to use.
local had = redis.call('HMGET', KEYS[1], 'u', 'z', 'b')
if had[1] then return had end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'z', ARGV[2], 'b', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {ARGV[1], ARGV[2], ARGV[3]}
