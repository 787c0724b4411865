#!lua
-- presign_args: a new S3-tier job, born at its args presign, holding what was issued for its key.
--
-- KEYS[1]  job hash
-- ARGV[1]  ttl_s of the hash
-- ARGV[2…] field, value, … (n, s=awaiting_upload, pz, pn, pc?, ph?, pb?)
--
-- (none) -> awaiting_upload.  Default flags: refused before it starts when Redis is full.
-- Returns 1 created | 0 a hash with this id exists (nothing changed).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
