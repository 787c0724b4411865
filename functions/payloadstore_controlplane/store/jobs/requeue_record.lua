#!lua flags=allow-oom
-- requeue_record: a requeue's entry becomes the job's recorded entry (`x`) once appended (job
-- slot; after operate_requeue.lua for a retry, after the payload_lost requeue's append).
--
-- KEYS[1]  job hash
-- ARGV[1]  the entry the requeue gave the job (appended, or the one a retry relies on)
-- ARGV[2]  'retry' | 'lost' (a payload_lost requeue)
-- ARGV[3]  'lost': the entry the requeue replaces, which the caller drops unless the job
--          still relies on it
-- ARGV[4]  'retry': the job's retries after this retry (`rt`, as operate_retry.lua answered)
--
-- Until this step the job's `x` is '*' and a poll may start it from any of its entries
-- (delivery_start.lua: a retried job never from `rq`, the entry of the end it was retried
-- from, whose settle step may still drop it). Recorded only while nothing was delivered since
-- the requeue: `x` still '*', and `rq` present for a retry (a delivery ends it) or absent for
-- a payload_lost requeue; and while the job is still queued by this requeue: `queued`, and
-- for a retry with this retry's `rt`. A purge or cancel may have ended the job since (it keeps
-- `x` = '*' and `rq`), and a later retry queued it again on an entry of its own: naming this
-- requeue's entry then would point the job at an entry the end dropped. After this step no
-- other entry can start the job, so the caller may drop the one it replaces: a poll that took
-- that entry back after its visibility timeout finds it stale. If a poll started the job from
-- the replaced entry first (`x` or, after an end and a retry since, `rq` names it), that entry
-- is kept and the new one is a stale double.
-- allow-oom: one short field. Returns {'recorded'} | {'kept'} (drop the new entry, keep the
-- replaced one) | {'moved'} (a delivery, an end or another retry since: the job's entry is
-- neither) | {'missing'} | {'legacy'}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HEXISTS', KEYS[1], 'state') == 1 then return {'legacy'} end
local f = redis.call('HMGET', KEYS[1], 'x', 'rq', 's', 'rt')
local x, rq, s, rt = f[1], f[2], f[3], f[4]
local ours = s == 'queued' and (ARGV[2] ~= 'retry' or rt == ARGV[4])
if ours and x == '*' and ((ARGV[2] == 'retry') == (rq ~= false)) then
  redis.call('HSET', KEYS[1], 'x', ARGV[1])
  return {'recorded'}
end
if ARGV[2] == 'lost' and ARGV[3] ~= '' and (x == ARGV[3] or rq == ARGV[3]) then
  return {'kept'}
end
return {'moved'}
