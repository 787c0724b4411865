#!lua flags=allow-oom
-- operate_requeue: the namespace-slot half of a retry: the retried job gets exactly one
-- deliverable entry with its whole arguments (inline bytes, blob list).
--
-- KEYS[1]  queue stream   KEYS[2] the namespace's queue-name set   KEYS[3] the job's kept args
-- KEYS[4]  the job's kept blob list (kept by the settle step of its end, even empty for an
--          S3-tier job: it exists once that end was settled)
-- KEYS[5]  the job's requeue record (keys.requeued: `<retries> <entry id>` | `<retries> =<id>`
--          | `<retries> -`: the job's end at that count was settled)
-- ARGV[1]  min_id (MINID ~)   ARGV[2] queue name   ARGV[3] consumer group   ARGV[4] job_id
-- ARGV[5]  tier: 'i' inline | 's' S3   ARGV[6] the job's retries after this retry (`rt`)
-- ARGV[7]  the job's entry id before the retry ('' none known: cancelled while queued before
--          any delivery, or after a requeue)   ARGV[8] ttl_ms (the record's)
-- KEYS[6]  the queue's failed-jobs set (keys.failed_jobs)   ARGV[9] the job id (16 raw bytes):
--          a retried job no longer counts as failed
--
-- In order:
-- 1. This retry's record exists (a retry sent again, or this script re-sent): nothing more is
--    done, its answer is given again. A second entry would have no args left to carry. A
--    record of a later retry, or an end's mark (`<retries> -`, completion_settle.lua) at this
--    retry's count or above: the job ended since this retry queued it (a purge or cancel came
--    before this step), so nothing is done and nothing answered: the kept args and blob list
--    stay for the next retry.
-- 2. The job's previous entry is still in the stream (its end not settled yet, or it never was
--    delivered). In a pending list (a daemon took it: the delivery that ended, or a poll that
--    found the job ended or took it back after its visibility timeout): the retry's entry is
--    appended from its fields (`j`, `b`, `B`) and the settle step of the end drops the old one
--    (the record names the new one); a poll holding it never starts the retry from it
--    (delivery_start.lua answers 'wait', then 'stale' once requeue_record.lua named the new
--    one). Else (cancelled while queued, never taken): that entry runs the retry; a settle
--    step that finds it taken since leaves it to its delivery (completion_settle.lua).
-- 3. The end was settled (kept args or kept blob list exist): an entry is appended from them
--    (as enqueue_append: a queue is created with its group at its first entry), and they go.
-- 4. No entry id known and nothing settled: the job's entry is still in the stream, somewhere
--    (the job was cancelled while queued): relied on as in 2.
-- 5. Otherwise the entry is gone unsettled (trimmed past the retention): an S3-tier job gets an
--    entry with no blob list, an inline one nothing (its bytes are gone).
-- allow-oom: it finishes a retry whose job step (operate_retry.lua) already made the job
-- `queued`; refused when Redis is full, the job read `queued` with no entry to deliver it, and a
-- later redrive (another key) skips a queued job. It adds at most one entry of one job's kept
-- arguments (at most INLINE_THRESHOLD bytes), and only after a job step that Redis accepted.
-- Returns the entry id appended | '' nothing appended (an entry of the job's runs it).
local rec = redis.call('GET', KEYS[5])
if rec then
  local rt, what = string.match(rec, '^(%d+) (.*)$')
  rt = tonumber(rt)
  local mine = tonumber(ARGV[6])
  -- A later retry's record, or the end of this retry or a later one (`-`): this retry's
  -- queued time is over, and what it would append (from the kept args and blob list the end
  -- just kept) would take them from the job, leaving it ended with nothing to retry from.
  if rt and (rt > mine or (rt == mine and what == '-')) then return '' end
  if rt == mine then
    if string.sub(what, 1, 1) == '=' then return '' end
    return what
  end
end
redis.call('ZREM', KEYS[6], ARGV[9])
local function record(what)
  redis.call('SET', KEYS[5], ARGV[6] .. ' ' .. what, 'PX', ARGV[8])
end
local prev = ARGV[7]
local rows = prev ~= '' and redis.call('XRANGE', KEYS[1], prev, prev) or {}
if rows[1] then
  local p = redis.pcall('XPENDING', KEYS[1], ARGV[3], prev, prev, 1)
  if not (type(p) == 'table' and not p.err and p[1] ~= nil) then
    record('=' .. prev)
    return ''
  end
  local id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', unpack(rows[1][2]))
  redis.call('SADD', KEYS[2], ARGV[2])
  record(id)
  return id
end
local args = redis.call('GET', KEYS[3])
local blobs = redis.call('GET', KEYS[4])
if not args and not blobs and prev == '' then
  record('=')
  return ''
end
if ARGV[5] == 'i' and not args then return '' end
local fields = {'j', ARGV[4]}
if ARGV[5] == 'i' then fields[#fields + 1] = 'b'; fields[#fields + 1] = args end
if blobs and blobs ~= '' then fields[#fields + 1] = 'B'; fields[#fields + 1] = blobs end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', unpack(fields))
if fresh then redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[3], '0') end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4])
record(id)
return id
