#!lua flags=no-writes
-- lifecycle_find_entry: the queue entry of a queued inline job that has no hash (so no entry id),
-- for a cancel to drop it at once (namespace slot; read only).
--
-- KEYS[1]  queue stream
-- ARGV[1]  job id (text, as entries carry it)
-- ARGV[2]  the job id's time (ms): its entry is appended just after its id is minted
-- ARGV[3]  how far before that time the entry may be (ms: the id's clock is the control
--          plane's, the entry's Redis's)
-- ARGV[4]  the most entries the search reads
--
-- Forward from the id's time first, then backward from just before it through the slack: the
-- entry is the first or nearly (only jobs enqueued in the same ms come before it), however
-- busy the second before it was (a search from the slack's start read every job of that
-- second first: past 200 a second, a cancel never found its entry).
-- Reads 10 entries at a time and answers only the id, never the entries' bytes.
-- Returns the entry id | '' (not found within ARGV[4] entries)
local left = tonumber(ARGV[4])
local function search(command, from, to)
  while left > 0 do
    local rows = redis.call(command, KEYS[1], from, to, 'COUNT', math.min(10, left))
    if not rows[1] then return nil end
    for _, row in ipairs(rows) do
      local f = row[2]
      for i = 1, #f, 2 do
        if f[i] == 'j' and f[i + 1] == ARGV[1] then return row[1] end
      end
    end
    left = left - #rows
    from = '(' .. rows[#rows][1]
  end
  return nil
end
local at = tonumber(ARGV[2])
local found = search('XRANGE', at .. '-0', '+')
if not found and at > 0 then
  found = search('XREVRANGE', (at - 1) .. '-18446744073709551615',
                 math.max(at - tonumber(ARGV[3]), 0) .. '-0')
end
return found or ''
