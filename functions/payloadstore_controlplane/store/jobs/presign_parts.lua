#!lua
-- presign_parts: record the sha256 of parts about to be presigned for a multipart upload.
--
-- KEYS[1]  job hash   KEYS[2] parts hash of the key (keys.parts)
-- ARGV[1]  namespace of the caller
-- ARGV[2]  field prefix: p (args) | r (result)
-- ARGV[3]  lease of the caller's delivery ('' none; kind=result only)
-- ARGV[4]  max_presigns
-- ARGV[5…] part number, sha256 (32 raw bytes), …
--
-- No state change. A part already issued must repeat its sha256; a call that presigns any part
-- again (an expired URL) counts one presign of the key (pn | rn) against max_presigns: the cap
-- counts calls, not parts. A first issue of parts is not counted.
-- Returns {'missing'} | {'legacy'} | {'not_awaiting', state} (args already enqueued)
--       | {'not_running', state} | {'lease_mismatch', state} | {'single'} (no multipart upload)
--       | {'differs', number} | {'cap'} | {'ok', upload id}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local p = ARGV[2]
local f = redis.call('HMGET', KEYS[1], 'n', 's', 'lt', 'a', 'ra', p .. 'b', p .. 'n')
if f[1] ~= ARGV[1] then return {'missing'} end
if p == 'p' then
  if f[2] ~= 'awaiting_upload' then return {'not_awaiting', f[2] or ''} end
else
  if f[2] ~= 'running' then return {'not_running', f[2] or ''} end
  if ARGV[3] ~= '' and f[3] and f[3] ~= ARGV[3] then return {'lease_mismatch', f[2]} end
  -- The result issue is an earlier delivery's: not this delivery's to upload.
  if f[5] ~= f[4] then return {'missing'} end
end
if not f[6] then return {'single'} end
local upload = redis.call('HGET', KEYS[2], 'u')
if not upload then return {'single'} end
local again = false
for i = 5, #ARGV, 2 do
  local had = redis.call('HGET', KEYS[2], ARGV[i])
  if had then
    if had ~= ARGV[i + 1] then return {'differs', ARGV[i]} end
    again = true
  end
end
if again then
  if tonumber(f[7] or '0') >= tonumber(ARGV[4]) then return {'cap'} end
  redis.call('HINCRBY', KEYS[1], p .. 'n', 1)
end
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
return {'ok', upload}
