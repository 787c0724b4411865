#!lua
-- operate_requeue: append a retried job's entry to its queue (namespace slot).
--
-- KEYS[1]  queue stream   KEYS[2] the namespace's queue-name set   KEYS[3] the job's kept args
-- KEYS[4]  the job's kept blob list (the entry gets it back as `B`, and it is then deleted)
-- ARGV[1]  min_id (MINID ~)   ARGV[2] queue name   ARGV[3] consumer group   ARGV[4] job_id
-- ARGV[5]  tier: 'i' inline (the bytes come from KEYS[3], which is then deleted) | 's' S3
--
-- As enqueue_append (a queue is created with its group at its first entry). An inline job
-- whose args are not kept here still has its first entry in the stream (it was cancelled
-- while queued, before any delivery): nothing is appended, that entry runs it.
-- Default flags: refused before it starts when Redis is full.
-- Returns the entry id | '' nothing appended.
local fields = {'j', ARGV[4]}
if ARGV[5] == 'i' then
  local bytes = redis.call('GET', KEYS[3])
  if not bytes then return '' end
  fields = {'j', ARGV[4], 'b', bytes}
end
local blobs = redis.call('GET', KEYS[4])
if blobs then fields[#fields + 1] = 'B'; fields[#fields + 1] = blobs end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', unpack(fields))
if fresh then redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[3], '0') end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4])
return id
