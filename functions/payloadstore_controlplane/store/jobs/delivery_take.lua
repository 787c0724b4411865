#!lua flags=allow-oom
-- delivery_take: one entry for one consumer from the queues of one poll (namespace slot).
--
-- KEYS[1…n]  the polled queue streams
-- ARGV[1]    consumer group   ARGV[2] consumer (daemon id)   ARGV[3] min idle ms (visibility)
-- ARGV[4]    at most this many XAUTOCLAIM calls per stream (each scans up to 10 pending
--            entries)
-- ARGV[5]    room: the most inline bytes the entry taken may carry ('' any): a poll's answer
--            that already holds deliveries has only so much left (models/limits.py)
-- ARGV[6…]   per stream: the XAUTOCLAIM cursor to resume from ('0-0' from the start), or ''
--            to skip the pending list of that stream this time
--
-- First a delivery whose visibility timeout ran out (XAUTOCLAIM from the cursor, so a dead
-- daemon's entry behind any number of live, heartbeating ones is found within a few polls),
-- then a new entry (XREADGROUP COUNT 1, one stream at a time: never more than the one entry
-- answered is moved into the pending list). Nothing is created for a stream that does not
-- exist: queues are created at enqueue. A stream without the group (created before groups
-- were made at enqueue) gets it here.
-- With a room, an entry heavier than it is never taken: a new one is looked at (XRANGE past
-- the group's last-delivered id) before XREADGROUP would move it into a pending list, and a
-- timed-out one XAUTOCLAIM took is given back at once (idle past the timeout again, its
-- delivery count unchanged, held by this consumer, the cursor left on it), so the next poll
-- takes it. The job is never
-- touched: not leased, no attempt counted.
-- Returns {'claimed' | 'entry', stream number, entry id, fields, cursor…}  (claimed: from the
--         pending list, a timed-out delivery; entry: a new one)
--       | {'full', 0, '', {}, cursor…}: the next entry does not fit the room; nothing taken
--       | {'none', 0, '', {}, cursor…, wake id…}: wake id is where a blocking XREAD of that
--         stream starts (the group's last-delivered id; '0-0' for a stream that does not exist)
local group, consumer, min_idle, budget = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local room = tonumber(ARGV[5])
local n = #KEYS
local exists, cursors = {}, {}
for i = 1, n do exists[i] = redis.call('EXISTS', KEYS[i]) == 1 end

local function add_group(key)
  redis.call('XGROUP', 'CREATE', key, group, '0')
end

local function answer(status, i, id, fields, extra)
  local out = {status, i, id, fields}
  for j = 1, n do out[#out + 1] = cursors[j] end
  if extra then for j = 1, n do out[#out + 1] = extra[j] end end
  return out
end

for i = 1, n do cursors[i] = ARGV[5 + i] end

-- The inline bytes an entry carries (both layouts' field names; an S3 entry none).
local function inline_size(fields)
  fields = fields or {}
  for j = 1, #fields, 2 do
    if fields[j] == 'b' or fields[j] == 'inline' then return #fields[j + 1] end
  end
  return 0
end

local function too_heavy(fields)
  return room ~= nil and inline_size(fields) > room
end

local function last_delivered(key)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, last = nil, nil
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] end
      if g[j] == 'last-delivered-id' then last = g[j + 1] end
    end
    if name == group then return last end
  end
  return nil
end

for i = 1, n do
  local cursor = cursors[i]
  if cursor ~= '' and exists[i] then
    local calls = 0
    repeat
      local r = redis.pcall('XAUTOCLAIM', KEYS[i], group, consumer, min_idle, cursor, 'COUNT', 1)
      if type(r) == 'table' and r.err then
        if not string.find(r.err, 'NOGROUP') then return redis.error_reply(r.err) end
        add_group(KEYS[i])
        cursor = '0-0'
        break
      end
      cursor = r[1]
      local claimed = r[2][1]
      if claimed then
        if too_heavy(claimed[2]) then
          -- Given back as it was: XAUTOCLAIM counted a delivery that did not happen.
          local p = redis.call('XPENDING', KEYS[i], group, claimed[1], claimed[1], 1)
          local count = math.max(tonumber(p[1][4]) - 1, 0)
          redis.call('XCLAIM', KEYS[i], group, consumer, 0, claimed[1], 'IDLE', min_idle,
                     'RETRYCOUNT', count, 'JUSTID')
          cursors[i] = claimed[1]
          return answer('full', 0, '', {})
        end
        cursors[i] = cursor
        return answer('claimed', i, claimed[1], claimed[2])
      end
      calls = calls + 1
    until cursor == '0-0' or calls >= budget
    cursors[i] = cursor
  elseif cursor ~= '' then
    cursors[i] = '0-0'
  end
end

for i = 1, n do
  if exists[i] and room ~= nil then
    -- No group yet: XREADGROUP below makes it at id 0, from the first entry on.
    local last = last_delivered(KEYS[i]) or '0-0'
    local next_entry = redis.call('XRANGE', KEYS[i], '(' .. last, '+', 'COUNT', 1)[1]
    if next_entry and too_heavy(next_entry[2]) then return answer('full', 0, '', {}) end
  end
  if exists[i] then
    local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', KEYS[i], '>')
    if type(r) == 'table' and r.err then
      if not string.find(r.err, 'NOGROUP') then return redis.error_reply(r.err) end
      add_group(KEYS[i])
      r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', KEYS[i], '>')
    end
    if r and r[1] and r[1][2][1] then
      local e = r[1][2][1]
      return answer('entry', i, e[1], e[2])
    end
  end
end

local wake = {}
for i = 1, n do
  wake[i] = (exists[i] and last_delivered(KEYS[i])) or '0-0'
end
return answer('none', 0, '', {}, wake)
