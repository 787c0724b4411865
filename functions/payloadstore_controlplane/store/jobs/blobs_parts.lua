#!lua
-- blobs_parts: record the sha256 of parts about to be presigned for a blob's multipart upload.
--
-- KEYS[1]  the blob's upload hash (keys.blob_upload)
-- ARGV[1…] part number, sha256 (32 raw bytes), …
--
-- As presign_parts.lua for a job's key, a part already issued must repeat its sha256; unlike a
-- job's, asking again is not counted against MAX_PRESIGNS_PER_JOB: every uploader of the same
-- content in the namespace shares the upload (one that takes over a crashed one's asks every
-- part again), and the URLs sign the same bytes.
-- Returns {'single'} (no upload open for the blob) | {'differs', number} | {'ok', upload id}
local upload = redis.call('HGET', KEYS[1], 'u')
if not upload then return {'single'} end
for i = 1, #ARGV, 2 do
  local had = redis.call('HGET', KEYS[1], ARGV[i])
  if had and had ~= ARGV[i + 1] then return {'differs', ARGV[i]} end
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return {'ok', upload}
