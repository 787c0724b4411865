#!lua flags=allow-oom
-- completion_settle: the namespace-slot half of a job's end (its job slot says it ended): drop
-- its queue entry, index it among the queue's ended jobs, and keep its inline args for a retry.
--
-- KEYS[1]  queue stream   KEYS[2] the queue's ended-jobs stream of the job's state group
-- KEYS[3]  the job's kept-args string   KEYS[4] the job's kept blob list
-- KEYS[5]  the job's requeue record (keys.requeued, written by operate_requeue.lua; this step
--          marks it `<retries> -` once the end of a retried job is settled)
-- ARGV[1]  consumer group   ARGV[2] entry id ('' none)   ARGV[3] job id (16 raw bytes)
-- ARGV[4]  index: 'add' | 'if_dropped' (only when this call dropped the entry: a repeat after a
--          lost reply, whose first run dropped and indexed it, adds nothing) | '' (none)
-- ARGV[5]  the job's retries (`rt`) when it ended
-- ARGV[6]  min_id of the ended-jobs stream (MINID ~: entries past the retention go)
-- ARGV[7]  ttl_ms: the ended-jobs stream and the kept args expire with the job
-- ARGV[8]  '1': keep the entry's inline bytes (`b`) in KEYS[3] and its blob list (`B`) in
--          KEYS[4] (a failed or cancelled job); an S3-tier entry keeps KEYS[4] even empty,
--          which tells a retry that this end was settled
-- ARGV[9]  '1': only an entry no daemon took (not in the pending list): purge's drop; an entry
--          taken since is its delivery's to decide
-- ARGV[10] the consumer whose delivery the caller settles ('' none: a cancel, purge, a repeated
--          post): see below
-- KEYS[6]  the queue's failed-jobs set (keys.failed_jobs)   KEYS[7] the queue's throughput hash
--          of this hour (keys.throughput)
-- ARGV[11] the throughput field counted with the index entry ('s<MM>' succeeded, 'f<MM>'
--          failed, '' none: cancelled)   ARGV[12] the throughput hash's expiry (ms)
-- ARGV[13] now (ms): a failed job's score in KEYS[6]; ends before ARGV[13] - ARGV[7] are pruned
--
-- A retry may have come between the job slot's end and this step (the record's retries are
-- above ARGV[5]). If it relied on this entry (`=<this id>`, or `=` with no id known): an entry
-- no daemon took is left to run the retry; one a daemon took (the poll that found the job
-- ended, or the ended delivery's own: consumer ARGV[10]) is dropped and the retry's entry
-- appended from its fields (the record then names it); one another consumer holds (a poll that
-- took it since a cancel, or that reclaimed it after a visibility timeout: it may be running
-- the retry) is left to that delivery, which runs the retry or settles it in turn. If the retry has an entry of its own, this one is dropped and
-- nothing kept. A record of an earlier retry is spent: marked `<retries> -` (a retried job) or
-- deleted.
-- No job state changes here. allow-oom: the drain path (the entry's bytes are freed or moved,
-- an index entry is a few tens of bytes). Returns 1 this call dropped the entry | 0 it was gone
-- already, left, or none was named.
local entry = ARGV[2]
local retry = nil  -- 'relied' | 'own': a retry after this end, and what its requeue did
local over = tonumber(ARGV[5])  -- the retries whose queued time is over
local rec = redis.call('GET', KEYS[5])
if rec then
  local rt, what = string.match(rec, '^(%d+) (.*)$')
  rt = tonumber(rt)
  if rt and rt > over and what == '-' then
    over = rt  -- a later retry that has ended too (this settle came late)
  elseif rt and rt > over then
    retry = 'own'
    if what == '=' or what == '=' .. entry then retry = 'relied' end
  end
end
if retry == nil then
  -- The record is spent. A retried job's end leaves its mark instead (`<retries> -`): a
  -- retry's requeue still on its way (paused before operate_requeue.lua while this end came)
  -- then does nothing, rather than take the kept args and blob list for an entry the job,
  -- ended, would never run from. A job never retried needs no mark: no requeue can be late.
  if over > 0 then
    redis.call('SET', KEYS[5], over .. ' -', 'PX', ARGV[7])
  elseif rec then
    redis.call('DEL', KEYS[5])
  end
end
local dropped = 0
if entry ~= '' then
  local rows = redis.call('XRANGE', KEYS[1], entry, entry)
  local pending, left = false, false
  local holder = ''
  if rows[1] and (ARGV[9] == '1' or retry == 'relied') then
    local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
    pending = type(p) == 'table' and not p.err and p[1] ~= nil
    if pending then holder = p[1][2] end
  end
  if rows[1] and ARGV[9] == '1' and pending then
    left = true
  elseif rows[1] and retry == 'relied' then
    if pending and ARGV[10] ~= '' and ARGV[10] == holder then
      local id = redis.call('XADD', KEYS[1], '*', unpack(rows[1][2]))
      redis.call('SET', KEYS[5], string.match(rec, '^%d+') .. ' ' .. id, 'PX', ARGV[7])
    else
      left = true
    end
  elseif rows[1] and ARGV[8] == '1' and retry == nil then
    local f, inline, blobs = rows[1][2], false, ''
    for i = 1, #f, 2 do
      if f[i] == 'b' or f[i] == 'inline' then
        inline = true
        redis.call('SET', KEYS[3], f[i + 1], 'PX', ARGV[7])
      elseif f[i] == 'B' then
        blobs = f[i + 1]
      end
    end
    if blobs ~= '' then
      redis.call('SET', KEYS[4], blobs, 'PX', ARGV[7])
    elseif not inline and redis.call('PEXPIRE', KEYS[4], ARGV[7]) == 0 then
      -- An entry without a blob list never replaces one kept before (a job's blob list does
      -- not change); a first end keeps it empty, which tells a retry this end was settled.
      redis.call('SET', KEYS[4], '', 'PX', ARGV[7])
    end
  end
  if not left and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('XACK', KEYS[1], ARGV[1], entry)
    dropped = redis.call('XDEL', KEYS[1], entry)
  end
end
if ARGV[4] == 'add' or (ARGV[4] == 'if_dropped' and dropped == 1) then
  redis.call('XADD', KEYS[2], 'MINID', '~', ARGV[6], '*', 'j', ARGV[3], 'r', ARGV[5])
  -- The dashboard's figures, counted once per end with its index entry (a few tens of bytes).
  if ARGV[11] ~= '' then
    redis.call('HINCRBY', KEYS[7], ARGV[11], 1)
    redis.call('PEXPIRE', KEYS[7], ARGV[12])
    -- A retry that came after this end (and may have run its requeue already) took the job
    -- out of the failed count: this end does not put it back.
    if string.sub(ARGV[11], 1, 1) == 'f' and retry == nil then
      local now = tonumber(ARGV[13])
      redis.call('ZADD', KEYS[6], now, ARGV[3])
      redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. (now - tonumber(ARGV[7])))
      redis.call('PEXPIRE', KEYS[6], ARGV[7])
    end
  end
end
-- Also on a repeat that adds nothing: a write, so the caller's WAIT covers the first run's
-- index entry and kept args (replication is in order), which a retry of the job needs.
if ARGV[4] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
return dropped
