#!lua
-- enqueue_inline: inline jobs of one queue, appended in request order by one script (one round
-- trip, one script start however many jobs: 100 scripts of one job each cost ~4x the server
-- time). Everything is in the namespace's slot: all or nothing, so an answer with a job id
-- means its entry exists.
--
-- KEYS[1]    queue stream   KEYS[2] the namespace's queue-name set
-- KEYS[3]    the namespace's keyed-since marker (STRING: the 10 time chars of the first minute
--            from which every keyed inline job also has its key field `k<tail>`)
-- KEYS[4…]   inline index hashes (one hour of job ids each), then layout-1 idempotency keys
-- ARGV[1]    min_id (MINID ~ trim)   ARGV[2] queue name
-- ARGV[3]    candidate minutes: the 10 time chars of each minute a repeated Idempotency-Key may
--            have created its job in, newest first (a candidate id is a minute's chars + the
--            key's tail)
-- ARGV[4]    their runs: per run of consecutive minutes in one index hash, its KEYS number and
--            the run's length (two digits each)
-- ARGV[5]    consumer group (created with the stream, as enqueue_append does)
-- ARGV[6]    the marker's value when it is absent: this minute's chars plus a grace for
--            instances of an older control plane still enqueueing without key fields
-- ARGV[7…]   per job, 7 values: job_id, bytes, KEYS number of its index hash, index expire-at
--            (ms), its key's 16-char tail ('' without a key: no lookup), KEYS number of its
--            layout-1 idempotency key (0: none), the raw sha256s (32 bytes each) of the blobs
--            it references ('' none: the entry gets no `B` field)
--
-- (none) -> queued (an inline job has no hash until its first delivery; the index answers).
-- Default flags: refused before it starts when Redis is full.
-- Returns per job: {'exists', job_id, queue} | {'legacy', job_id} | {'created', job_id, entry_id}
-- A job without an Idempotency-Key already in the index (this very script re-sent after a lost
-- reply) is answered 'created' again without a second entry; with a key it is 'exists'.
--
-- A repeated key is found with one HGET per index hash of the window (the hash of the job's
-- hour holds `k<tail>` -> the time chars of the newest job of that key: a keyed job's id is its
-- enqueue's ms chars + the tail; an older control plane's, its minute's), not one field per
-- candidate minute: 61 minutes of an hour window were 61 lookups, each a scan of the hash
-- while it is a listpack (up to hash-max-listpack-entries jobs an hour), ~250 us of the
-- server's one thread per enqueue at 300 jobs an hour. Minutes before the marker may hold jobs
-- written without a key field (an older control plane): only those are looked up one by one.
local queue, runs = ARGV[2], ARGV[4]
local minutes, index, counts = {}, {}, {}
for m = 1, #ARGV[3] / 10 do minutes[m] = string.sub(ARGV[3], m * 10 - 9, m * 10) end
for r = 1, #runs / 4 do
  index[r] = KEYS[tonumber(string.sub(runs, r * 4 - 3, r * 4 - 2))]
  counts[r] = tonumber(string.sub(runs, r * 4 - 1, r * 4))
end
local keyed_since = nil
if #minutes > 0 then
  keyed_since = redis.call('GET', KEYS[3])
  if not keyed_since then
    redis.call('SET', KEYS[3], ARGV[6])
    keyed_since = ARGV[6]
  end
end
local oldest = minutes[#minutes]
local function indexed(tail)
  -- newest first: an index hash's key field, then that hash's minutes from before the marker
  local seen = 0
  for r = 1, #index do
    local chars = redis.call('HGET', index[r], 'k' .. tail)
    if chars and chars >= oldest then
      local queue_of = redis.call('HGET', index[r], chars .. tail)
      if queue_of then return {'exists', chars .. tail, queue_of} end
    end
    local ids = {}
    for j = 1, counts[r] do
      local minute = minutes[seen + j]
      if minute < keyed_since then ids[#ids + 1] = minute .. tail end
    end
    if #ids > 0 then
      local found = redis.call('HMGET', index[r], unpack(ids))
      for j = 1, #ids do
        if found[j] then return {'exists', ids[j], found[j]} end
      end
    end
    seen = seen + counts[r]
  end
  return nil
end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local out, created = {}, false
for i = 7, #ARGV, 7 do
  local job_id, tail, legacy = ARGV[i], ARGV[i + 4], tonumber(ARGV[i + 5])
  local ix = KEYS[tonumber(ARGV[i + 2])]
  local answer = nil
  if tail ~= '' then answer = indexed(tail) end
  if not answer and redis.call('HEXISTS', ix, job_id) == 1 then answer = {'created', job_id, ''} end
  if not answer and legacy > 0 then
    local old = redis.call('GET', KEYS[legacy])
    if old then answer = {'legacy', old} end
  end
  if not answer then
    local id
    if ARGV[i + 6] ~= '' then
      id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', job_id,
                      'b', ARGV[i + 1], 'B', ARGV[i + 6])
    else
      id = redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', 'j', job_id,
                      'b', ARGV[i + 1])
    end
    if tail ~= '' then
      -- the key field: the newest job of this key in its hour
      redis.call('HSET', ix, job_id, queue, 'k' .. tail, string.sub(job_id, 1, 10))
    else
      redis.call('HSET', ix, job_id, queue)
    end
    redis.call('PEXPIREAT', ix, ARGV[i + 3])
    created = true
    answer = {'created', job_id, id}
  end
  out[#out + 1] = answer
end
if created then
  if fresh then redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[5], '0') end
  redis.call('SADD', KEYS[2], queue)
end
return out
