#!lua flags=no-writes
-- operate_args: an inline job's argument bytes, for an operator's look (namespace slot; read
-- only). Where they are depends on where the job is in its life:
--
-- KEYS[1]  queue stream   KEYS[2] the job's kept args (a failed or cancelled job's, kept by
--          completion_settle.lua)   KEYS[3] the job's requeue record (keys.requeued)
-- ARGV[1]  the job's entry id ('' or '*': not known)   ARGV[2] job id (text, as entries carry it)
-- ARGV[3]  where a search for its entry starts: the job's creation ms (an inline job's entry is
--          appended when its id is minted)   ARGV[4] the most entries the search reads
--
-- In order: its known entry; its kept args; the entry its latest retry appended; a bounded
-- search from its creation time (a queued inline job has no hash, so no entry id). Reads 10
-- entries at a time, so the script never holds more than 10 payloads.
-- Returns {'entry' | 'kept', bytes} | {'none'}
local function bytes_of(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'b' or fields[i] == 'inline' then return fields[i + 1] end
  end
  return nil
end
local function at(id)
  if id == nil or id == '' or id == '*' then return nil end
  local rows = redis.call('XRANGE', KEYS[1], id, id)
  if rows[1] then return bytes_of(rows[1][2]) end
  return nil
end
local found = at(ARGV[1])
if found then return {'entry', found} end
local kept = redis.call('GET', KEYS[2])
if kept then return {'kept', kept} end
local rec = redis.call('GET', KEYS[3])
if rec and not string.match(rec, '^%d+ %-$') then
  found = at(string.match(rec, '^%d+ =?(.*)$'))
  if found then return {'entry', found} end
end
local start = ARGV[3] .. '-0'
local left = tonumber(ARGV[4])
while left > 0 do
  local rows = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', math.min(10, left))
  if not rows[1] then break end
  for _, row in ipairs(rows) do
    local f = row[2]
    for i = 1, #f, 2 do
      if f[i] == 'j' and f[i + 1] == ARGV[2] then
        local b = bytes_of(f)
        if b then return {'entry', b} end
        return {'none'}
      end
    end
  end
  left = left - #rows
  start = '(' .. rows[#rows][1]
end
return {'none'}
