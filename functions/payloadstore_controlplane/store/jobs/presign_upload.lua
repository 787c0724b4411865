#!lua
-- presign_upload: remember the S3 multipart upload created for an issued key.
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  upload id
-- ARGV[2]  checksum: 'c' CRC64NVME (FULL_OBJECT) | '' SHA256 (COMPOSITE)
-- ARGV[3]  a result's: the attempt whose delivery issued the key the upload was created for
--          (`ra` then); '' for args
-- ARGV[4…] part numbers whose URLs go with the presign answer (CRC64NVME: no checksum each)
--
-- No state change. Any earlier upload of the key (an earlier delivery's result) is forgotten:
-- its parts are never completed (the bucket's lifecycle aborts it). The parts hash (`u` the
-- upload id, `k` the checksum, one field per issued part) expires with the job hash. A
-- result's upload is recorded only while its attempt still owns the result issue (`ra`): a
-- lapsed delivery whose S3 call was slow must not replace the upload of the redelivery that
-- issued its own result since.
-- Returns 1 recorded | 0 no such job | -1 the result issue is another attempt's (nothing
-- written either way).
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
if ARGV[3] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'ra') or '0') ~= tonumber(ARGV[3]) then
  return -1
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'u', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], 'k', ARGV[2]) end
for i = 4, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], '') end
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
