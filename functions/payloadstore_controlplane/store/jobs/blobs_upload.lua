#!lua
-- blobs_upload: remember the S3 multipart upload created for a blob (namespace slot).
--
-- KEYS[1]  the blob's upload hash (keys.blob_upload: namespace + sha256)
-- ARGV[1]  upload id   ARGV[2] size (bytes)   ARGV[3] part size (bytes)   ARGV[4] ttl_s
-- ARGV[5]  checksum: 'c' CRC64NVME (FULL_OBJECT) | '' SHA256 (COMPOSITE); kept as `k`
--
-- An upload already open for the blob (a concurrent uploader created one first) wins: its id,
-- size, part size and checksum are answered and nothing is written (the caller aborts its
-- own). The hash expires after ttl_s (a day: the bucket's lifecycle aborts an incomplete upload
-- then).
-- Returns {upload id, size, part size, checksum ('c' | '')} of the upload to use.
local had = redis.call('HMGET', KEYS[1], 'u', 'z', 'b', 'k')
if had[1] then return {had[1], had[2], had[3], had[4] or ''} end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'z', ARGV[2], 'b', ARGV[3])
if (ARGV[5] or '') ~= '' then redis.call('HSET', KEYS[1], 'k', ARGV[5]) end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {ARGV[1], ARGV[2], ARGV[3], ARGV[5] or ''}
