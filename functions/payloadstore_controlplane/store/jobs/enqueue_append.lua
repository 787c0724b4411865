#!lua
-- enqueue_append: XADD one job's entry to its queue stream (namespace slot).
--
-- KEYS[1]  queue stream   KEYS[2] the namespace's queue-name set
-- ARGV[1]  min_id (entries older than the retention are trimmed, MINID ~)
-- ARGV[2]  queue name     ARGV[3] consumer group     ARGV[4] job_id
-- ARGV[5]  inline bytes (absent for an S3-tier job)
--
-- A queue exists from its first enqueue: the stream and its consumer group are created here,
-- never by a poll (a poll of a name nobody enqueues to writes nothing). Default flags: refused
-- before it starts when Redis is full. Returns the entry id.
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local id
if ARGV[5] then
  id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', ARGV[4], 'b', ARGV[5])
else
  id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', ARGV[4])
end
-- Id 0: the group delivers every entry of the stream, this one included.
if fresh then redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[3], '0') end
redis.call('SADD', KEYS[2], ARGV[2])
return id
