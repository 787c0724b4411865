#!lua flags=no-writes
-- lifecycle_find_entry: the queue entry of a queued inline job that has no hash (so no entry id),
-- for a cancel to drop it at once (namespace slot; read only).
--
-- KEYS[1]  queue stream
-- ARGV[1]  job id (text, as entries carry it)
-- ARGV[2]  where the search starts (ms): a little before the job's id time (its entry is
--          appended when its id is minted; the id's clock is the control plane's, the entry's
--          Redis's)
-- ARGV[3]  the most entries the search reads
--
-- Reads 10 entries at a time and answers only the id, never the entries' bytes.
-- Returns the entry id | '' (not found within ARGV[3] entries)
local start = ARGV[2] .. '-0'
local left = tonumber(ARGV[3])
while left > 0 do
  local rows = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', math.min(10, left))
  if not rows[1] then break end
  for _, row in ipairs(rows) do
    local f = row[2]
    for i = 1, #f, 2 do
      if f[i] == 'j' and f[i + 1] == ARGV[1] then return row[1] end
    end
  end
  left = left - #rows
  start = '(' .. rows[#rows][1]
end
return ''
