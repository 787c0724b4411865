#!lua
-- enqueue_append: XADD one job's entry to its queue stream (namespace slot).
--
-- KEYS[1]  queue stream   KEYS[2] the namespace's queue-name set
-- ARGV[1]  min_id (entries older than the retention are trimmed, MINID ~)
-- ARGV[2]  queue name     ARGV[3] consumer group     ARGV[4] job_id
-- ARGV[5]  the raw sha256s (32 bytes each) of the blobs the job references ('' none)
-- ARGV[6]  an S3-tier job's refused enqueues its request saw (the job's `xr`; '' none): field
--          `r`, which tells a poll that meets the entry before the enqueue's job step whether
--          the entry was appended by a try a refusal has since overruled (delivery_start.lua)
-- ARGV[7]  inline bytes (absent for an S3-tier job)
--
-- A queue exists from its first enqueue: the stream and its consumer group are created here,
-- never by a poll (a poll of a name nobody enqueues to writes nothing). Default flags: refused
-- before it starts when Redis is full. Returns the entry id.
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local fields = {'j', ARGV[4]}
if ARGV[7] then fields[#fields + 1] = 'b'; fields[#fields + 1] = ARGV[7] end
if ARGV[6] ~= '' then fields[#fields + 1] = 'r'; fields[#fields + 1] = ARGV[6] end
if ARGV[5] ~= '' then fields[#fields + 1] = 'B'; fields[#fields + 1] = ARGV[5] end
local id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', unpack(fields))
-- Id 0: the group delivers every entry of the stream, this one included.
if fresh then redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[3], '0') end
redis.call('SADD', KEYS[2], ARGV[2])
return id
