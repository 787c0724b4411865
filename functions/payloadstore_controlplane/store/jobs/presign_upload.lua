#!lua
-- presign_upload: remember the S3 multipart upload created for an issued key.
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  upload id
-- ARGV[2]  checksum: 'c' CRC64NVME (FULL_OBJECT) | '' SHA256 (COMPOSITE)
-- ARGV[3…] part numbers whose URLs go with the presign answer (CRC64NVME: no checksum each)
--
-- No state change. Any earlier upload of the key (an earlier delivery's result) is forgotten:
-- its parts are never completed (the bucket's lifecycle aborts it). The parts hash (`u` the
-- upload id, `k` the checksum, one field per issued part) expires with the job hash.
-- Returns 1 recorded | 0 no such job (nothing written).
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'u', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], 'k', ARGV[2]) end
for i = 3, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], '') end
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
