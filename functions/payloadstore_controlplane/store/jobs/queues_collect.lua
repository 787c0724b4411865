#!lua flags=allow-oom
-- queues_collect: remove a queue nobody uses any more (namespace slot).
--
-- KEYS[1]  queue stream   KEYS[2] the namespace's queue-name set
-- ARGV[1]  queue name     ARGV[2] idle_before_ms: the newest entry ever added must be older
--
-- A stream with no entries, nothing pending in any group and no entry added since
-- idle_before_ms is deleted, and its name leaves the set; the next enqueue creates both again
-- (with the group). A name in the set without a stream is removed too.
-- Returns 1 removed | 0 kept.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.call('SREM', KEYS[2], ARGV[1])
end
if redis.call('XLEN', KEYS[1]) > 0 then return 0 end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  for j = 1, #g, 2 do
    if g[j] == 'pending' and tonumber(g[j + 1]) > 0 then return 0 end
  end
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for j = 1, #info, 2 do
  if info[j] == 'last-generated-id' then
    local ms = tonumber(string.match(info[j + 1], '^(%d+)'))
    if ms >= tonumber(ARGV[2]) then return 0 end
  end
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
