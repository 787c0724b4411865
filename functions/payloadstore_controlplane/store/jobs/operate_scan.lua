#!lua flags=no-writes
-- operate_scan: a page of a queue's queued or running entries, newest first (namespace slot).
--
-- KEYS[1]  queue stream
-- ARGV[1]  consumer group   ARGV[2] 'queued' | 'running'
-- ARGV[3]  cursor: continue below this entry id ('' from the newest)   ARGV[4] count
--
-- queued: the entries after the group's last-delivered id (never handed out); running: the
-- entries up to it (handed out and not acknowledged: a finished job's entry is deleted). Reads
-- 10 entries at a time, so a page of inline entries never holds more than 10 payloads here.
-- Returns {next cursor ('' at the end), id, job id, inline size (-1: S3 tier), id, ...}
local function parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function below(a, b)  -- a < b
  local am, as = parts(a)
  local bm, bs = parts(b)
  return am < bm or (am == bm and as < bs)
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {''} end
local last = '0-0'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for j = 1, #g, 2 do f[g[j]] = g[j + 1] end
  if f['name'] == ARGV[1] then last = f['last-delivered-id'] end
end
local hi, lo
if ARGV[2] == 'queued' then
  hi = ARGV[3] ~= '' and '(' .. ARGV[3] or '+'
  lo = last ~= '0-0' and '(' .. last or '-'
else
  if last == '0-0' then return {''} end
  hi = last
  if ARGV[3] ~= '' and below(ARGV[3], last) then hi = '(' .. ARGV[3] end
  lo = '-'
end
local want = tonumber(ARGV[4])
local out, found, cursor = {''}, 0, ''
while found < want do
  local ask = math.min(10, want - found)
  local rows = redis.call('XREVRANGE', KEYS[1], hi, lo, 'COUNT', ask)
  for _, row in ipairs(rows) do
    local job, size = '', -1
    local f = row[2]
    for i = 1, #f, 2 do
      if f[i] == 'j' or f[i] == 'job' then job = f[i + 1] end
      if f[i] == 'b' or f[i] == 'inline' then size = #f[i + 1] end
    end
    out[#out + 1] = row[1]
    out[#out + 1] = job
    out[#out + 1] = size
    found = found + 1
    cursor = row[1]
  end
  if #rows < ask then cursor = ''; break end
  hi = '(' .. cursor
end
out[1] = cursor
return out
