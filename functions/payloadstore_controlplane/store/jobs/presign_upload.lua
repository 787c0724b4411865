#!lua
-- presign_upload: remember the S3 multipart upload created for an issued key.
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  upload id
--
-- No state change. Any earlier upload of the key (an earlier delivery's result) is forgotten:
-- its parts are never completed (the bucket's lifecycle aborts it). The parts hash expires
-- with the job hash.
-- Returns 1 recorded | 0 no such job (nothing written).
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'u', ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
