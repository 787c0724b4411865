#!lua
-- blobs_parts: record the sha256 of parts about to be presigned for a blob's multipart upload.
--
-- KEYS[1]  the blob's upload hash (keys.blob_upload)
-- ARGV[1]  max_presigns
-- ARGV[2…] part number, sha256 (32 raw bytes), …
--
-- As presign_parts.lua for a job's key: a part already issued must repeat its sha256; a call
-- that presigns any part again counts one (`n`) against max_presigns; first issues are free.
-- Returns {'single'} (no upload open for the blob) | {'differs', number} | {'cap'}
--       | {'ok', upload id}
local upload = redis.call('HGET', KEYS[1], 'u')
if not upload then return {'single'} end
local again = false
for i = 2, #ARGV, 2 do
  local had = redis.call('HGET', KEYS[1], ARGV[i])
  if had then
    if had ~= ARGV[i + 1] then return {'differs', ARGV[i]} end
    again = true
  end
end
if again then
  if tonumber(redis.call('HGET', KEYS[1], 'n') or '0') >= tonumber(ARGV[1]) then
    return {'cap'}
  end
  redis.call('HINCRBY', KEYS[1], 'n', 1)
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return {'ok', upload}
