#!lua flags=allow-oom
-- completion_settle: the namespace-slot half of a job's end (its job slot says it ended): drop
-- its queue entry, index it among the queue's ended jobs, and keep its inline args for a retry.
--
-- KEYS[1]  queue stream   KEYS[2] the queue's ended-jobs stream of the job's state group
-- KEYS[3]  the job's kept-args string   KEYS[4] the job's kept blob list
-- ARGV[1]  consumer group   ARGV[2] entry id ('' none)   ARGV[3] job id (16 raw bytes)
-- ARGV[4]  index: 'add' | 'if_dropped' (only when this call dropped the entry: a repeat after a
--          lost reply, whose first run dropped and indexed it, adds nothing) | '' (none)
-- ARGV[5]  the job's retries (`rt`) when it ended
-- ARGV[6]  min_id of the ended-jobs stream (MINID ~: entries past the retention go)
-- ARGV[7]  ttl_ms: the ended-jobs stream and the kept args expire with the job
-- ARGV[8]  '1': keep the entry's inline bytes (`b`) in KEYS[3] and its blob list (`B`) in
--          KEYS[4] (a failed or cancelled job)
--
-- No job state changes here. allow-oom: the drain path (the entry's bytes are freed or moved,
-- an index entry is a few tens of bytes). Returns 1 this call dropped the entry | 0 it was gone
-- already, or none was named.
local dropped = 0
if ARGV[2] ~= '' then
  if ARGV[8] == '1' then
    local rows = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
    if rows[1] then
      local f = rows[1][2]
      for i = 1, #f, 2 do
        if f[i] == 'b' or f[i] == 'inline' then
          redis.call('SET', KEYS[3], f[i + 1], 'PX', ARGV[7])
        elseif f[i] == 'B' then
          redis.call('SET', KEYS[4], f[i + 1], 'PX', ARGV[7])
        end
      end
    end
  end
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
    dropped = redis.call('XDEL', KEYS[1], ARGV[2])
  end
end
if ARGV[4] == 'add' or (ARGV[4] == 'if_dropped' and dropped == 1) then
  redis.call('XADD', KEYS[2], 'MINID', '~', ARGV[6], '*', 'j', ARGV[3], 'r', ARGV[5])
end
-- Also on a repeat that adds nothing: a write, so the caller's WAIT covers the first run's
-- index entry and kept args (replication is in order), which a retry of the job needs.
if ARGV[4] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
return dropped
