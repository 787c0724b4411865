#!lua flags=allow-oom
-- completion_lost_release: a payload_lost requeue's last step (namespace slot): the one of the
-- job's two entries it will not run the job from goes, but never from under a delivery that
-- may be starting the job from it.
--
-- KEYS[1]  queue stream
-- ARGV[1]  consumer group   ARGV[2] entry id
-- ARGV[3]  idle_ms: VISIBILITY_TIMEOUT_S in ms (a poll's XAUTOCLAIM takes entries idle as long)
--
-- Not in the pending list: no daemon holds it, so no delivery can start the job from it:
-- deleted. In the pending list: the reporting delivery's old entry, or one a poll took (back)
-- and may be about to start the job from (delivery_start.lua decides that in the job slot,
-- which this step cannot read; the job's `x` was '*' until the record step, and a retry since
-- may have made it '*' again): it stays, with its idle time set to ARGV[3] and its holder and
-- delivery count unchanged, so the next poll's pending-list scan takes it at once and
-- delivery_start.lua drops it as stale or runs the job from it.
-- allow-oom: it frees or keeps, never adds. Returns 'dropped' | 'released' | 'gone'
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) == 'table' and not p.err and p[1] ~= nil then
  redis.call('XCLAIM', KEYS[1], ARGV[1], p[1][2], 0, ARGV[2], 'IDLE', ARGV[3], 'JUSTID')
  return 'released'
end
if redis.call('XDEL', KEYS[1], ARGV[2]) == 1 then return 'dropped' end
return 'gone'
