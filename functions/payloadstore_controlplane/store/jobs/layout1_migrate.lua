#!lua flags=allow-oom
-- layout1_migrate: convert one layout-1 job (long field names, separate issue records) to
-- layout 2 in place. Everything for the layout-1 upgrade lives in store/jobs/layout1.py and here.
--
-- KEYS[1]  job hash   KEYS[2] done list   KEYS[3] layout-1 issue:args   KEYS[4] issue:result
-- ARGV[1]  default content type (not stored in layout 2)
--
-- Returns 1 converted | 0 nothing to do (not a layout-1 job).
if redis.call('HEXISTS', KEYS[1], 'state') == 0 then return 0 end
local function hash(key)
  local t = {}
  local raw = redis.call('HGETALL', key)
  for i = 1, #raw, 2 do t[raw[i]] = raw[i + 1] end
  return t
end
local function unhex(h)
  if not h or #h ~= 64 then return nil end
  return (h:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end
local function ms(v)
  if not v or v == '' then return nil end
  return math.floor(tonumber(v) * 1000)
end
local old, args, res = hash(KEYS[1]), hash(KEYS[3]), hash(KEYS[4])
local new = {}
local function put(k, v) if v ~= nil and v ~= false and v ~= '' then new[#new + 1] = k; new[#new + 1] = v end end
put('n', old['namespace'])
put('q', old['queue'])
put('s', old['state'])
put('t', old['tier'] == 'inline' and 'i' or 's')
put('a', old['attempts'])
put('x', old['stream_id'])
put('ca', ms(old['created_at']))
put('ua', ms(old['updated_at']))
put('l', old['lost_count'])
local pref = old['payload_ref'] and cjson.decode(old['payload_ref']) or {}
if args['size'] then
  put('pz', args['size'])
  if args['content_type'] ~= ARGV[1] then put('pc', args['content_type']) end
  put('ph', unhex(args['sha256']))
  put('pn', args['presigns'] or '1')
elseif pref['size'] then
  put('pz', pref['size'])
  if pref['contentType'] and pref['contentType'] ~= ARGV[1] then put('pc', pref['contentType']) end
  put('ph', unhex(pref['sha256']))
else
  put('pz', old['payload_size'])
end
local rref = old['result_ref'] and cjson.decode(old['result_ref']) or {}
if res['size'] then
  put('rz', res['size'])
  if res['content_type'] ~= ARGV[1] then put('rc', res['content_type']) end
  put('rh', unhex(res['sha256']))
  put('rn', res['presigns'] or '1')
  put('ri', ms(res['issued_at']))
elseif rref['size'] then
  put('rz', rref['size'])
  if rref['contentType'] and rref['contentType'] ~= ARGV[1] then put('rc', rref['contentType']) end
  put('rh', unhex(rref['sha256']))
  put('ri', ms(old['finished_at'] or old['updated_at']))
end
local kinds = {inline = 'i', ref = 'r', error = 'e', corrupt = 'c', lost = 'l'}
local digest = old['result_digest']
if digest then
  local kind, hex = digest:match('^(%a+):(%x+)$')
  if kind and kinds[kind] and #hex == 64 then put('g', kinds[kind] .. unhex(hex):sub(1, 15)) end
end
local done_value = nil
local rk = old['result_kind']
if rk == 'inline' then
  put('rk', 'i'); done_value = old['result_inline'] or ''
elseif rk == 's3' then
  put('rk', 's'); done_value = ''
elseif rk == 'error' or old['error'] then
  put('rk', 'e'); done_value = old['error'] or '{}'
elseif old['state'] == 'succeeded' then
  done_value = ''
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], unpack(new))
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
if done_value ~= nil and redis.call('EXISTS', KEYS[2]) == 1 then
  local dttl = redis.call('PTTL', KEYS[2])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], done_value)
  if dttl > 0 then redis.call('PEXPIRE', KEYS[2], dttl) end
end
return 1
