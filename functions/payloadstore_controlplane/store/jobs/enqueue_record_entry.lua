#!lua flags=allow-oom
-- enqueue_record_entry: remember the job's queue entry id (`x`) once its XADD is done.
--
-- KEYS[1]  job hash
-- ARGV[1]  entry id   ARGV[2] overwrite: 1 always | 0 only when none is recorded
--
-- The S3-tier enqueue answers only after this: a job id is never handed out for a job that is
-- in no queue. Returns 1 recorded | 0 not (no hash, or an entry recorded already).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] == '1' or redis.call('HEXISTS', KEYS[1], 'x') == 0 then
  redis.call('HSET', KEYS[1], 'x', ARGV[1])
  return 1
end
return 0
