"""Every Redis key the control plane uses, in one place.

Each key carries a hash tag (`{...}`) so every command that touches several keys touches one
cluster slot: the same code runs on one redis-server and on ElastiCache in cluster mode.

- Per job, tag `{j:<job_id>}`: the job hash and its done list. Presign, enqueue bookkeeping,
  delivery, result post and failure reports are single-slot Lua scripts on these two keys.
- Per namespace, tag `{ns:<namespace>}`: the queue streams of that namespace, the set of its
  queue names, and the inline index. A daemon polls several queues of one namespace with one
  XREADGROUP, which is only legal in cluster mode because all those streams share the slot; an
  inline enqueue is one script on this slot (index + XADD + queue set, all or nothing).

The job hash (layout 2; see docs/design.md "Redis layout" for the bytes). Field names are short
on purpose (they are stored in every hash); every value stays <= 64 bytes so the hash keeps the
listpack encoding (`hash-max-listpack-value 64`); bigger things (inline results, error JSON)
live in the done list.

    n   namespace                         s   state: awaiting_upload | queued | running |
    q   queue name                            succeeded | failed | payload_lost |
    t   tier: i (inline) | s (S3)             payload_corrupt | cancelled
    a   deliveries so far (attempt)       x   id of the job's current queue stream entry;
                                              '*' from a payload_lost requeue or a retry until
                                              requeue_record.lua names its entry: the first
                                              of its entries delivered becomes its entry
                                              (never a retry's `rq`)
    ca  enqueued at, ms since epoch       ua  last state change, ms since epoch
    pz  args size (bytes)                 rz  result size (issued at result presign)
    pc  args content type, only when      rc  result content type, only when not
        not application/msgpack               application/msgpack
    ph  args checksum: sha256 (32 raw     rh  result checksum, as ph
        bytes) or CRC64NVME (8 raw bytes)
    pn  args presign count                rn  result presign count
                                          ri  result key issued at, ms since epoch
                                          ra  attempt whose delivery issued the result key
    pb  args part size, multipart only    rb  result part size, multipart only
    pm  args composite sha256 (32 raw     rm  result composite sha256 or whole CRC, once
        bytes) or whole-object CRC64NVME      completed
        (8 raw bytes), once completed
    rk  result form: i (inline bytes in the done list) | s (S3, ref from r*) | e (error JSON
        in the done list)
    g   digest of the accepted result post (kind letter + 15 bytes of sha256), for repeats
    l   payload_lost requeues so far
    lq  from a payload_lost requeue until the job's next delivery: the entry it replaced (a
        re-sent report appends the new entry from it again)
    rt  retries so far (POST .../retry, redrive; absent: 0)
    ab  deliveries before the last retry (the delivery cap counts `a` - `ab` of them)
    rq  from a retry until the job's next delivery: the job's entry id before the retry, or 1
        when it had none of its own (a repeated retry is answered 'resume')
    xr  while awaiting_upload: S3-tier enqueues of the job refused so far; an entry whose `r`
        (the count its request read) is lower is a stray of an overruled try, dropped, not
        queued
    pd  retention `consume`: when the    rd  retention `consume`: when the result
        args object is deleted (ms),          object is deleted (ms), set at its first
        set at the job's success              complete read (consume_mark.lua)

Leases and cancel: `lt` lease token of the current delivery (kept after a payload_lost requeue,
so a re-sent report is answered as the first), `lx` lease expiry (ms), `d` the consumer holding
the entry, `cr` cancel requested (1). `a` is the delivery count. A queued inline job has no hash: cancelling it means
creating one (`n`, `q`, `t`=i, `s`=cancelled, with the TTL) and dropping its entry, found near its id's
time (lifecycle_find_entry.lua); delivery creates the hash only when
none exists, queues an S3-tier job still awaiting_upload on the entry its enqueue appended before
its job step (unless `xr` says an enqueue was refused since its request read the job), and
drops the entry of a job whose hash is in any other state but queued/running.

The bucket is one per stack and the S3 key derives from job id + kind (`payload_keys.key_for`),
so neither is stored. A job is created at args presign (state `awaiting_upload`), which replaces
the separate issue records of layout 1; an inline job has no hash until its first delivery (the
inline index answers for it while it is queued).

Layout 1 (before this one) used long field names (`state`, `namespace`, `stream_id`, ...), issue
records at `issue(job_id, kind)` and idempotency strings at `idempotency(ns, key)`; the store
converts such a job to layout 2 the first time it touches it (`redis_jobs.RedisJobStore.migrate`).
"""

from __future__ import annotations

PREFIX = "ps"
CONSUMER_GROUP = "daemons"
# The inline index is split into hashes of one hour of job ids each, so whole hours expire.
INLINE_INDEX_SPAN_MS = 3_600_000


def job(job_id: str) -> str:
    """HASH: the job (fields above)."""
    return f"{PREFIX}:{{j:{job_id}}}:job"


def done(job_id: str) -> str:
    """LIST holding one element once the job is terminal: the inline result bytes, the error JSON,
    or empty (S3 result). Result waiters block on it (BLMOVE to itself: nobody consumes it)."""
    return f"{PREFIX}:{{j:{job_id}}}:done"


def parts(job_id: str, kind: str) -> str:
    """HASH of a multipart upload in progress (kind `args` | `result`): `u` the S3 upload id,
    `k` = 'c' for a CRC64NVME (FULL_OBJECT) upload, and one field per issued part number holding
    the sha256 (32 raw bytes) signed into its URL (empty for a CRC64NVME upload's part). Deleted once the upload is completed; it lives no longer than the job hash. (Upload ids
    are longer than 64 bytes on S3: kept out of the job hash, which stays a listpack.)"""
    return f"{PREFIX}:{{j:{job_id}}}:parts:{kind}"


def queue(namespace: str, queue_name: str) -> str:
    """STREAM of queued jobs; entries carry `j` (job id) and, for the inline tier, `b` (bytes)."""
    return f"{PREFIX}:{{ns:{namespace}}}:q:{queue_name}"


def queue_names(namespace: str) -> str:
    """SET of the queue names a namespace has used (added at enqueue): listed without a scan."""
    return f"{PREFIX}:{{ns:{namespace}}}:queues"


def cancels(namespace: str, daemon_id: str) -> str:
    """LIST of job ids whose cancel was requested while this daemon (`d`, its consumer name)
    held them: the cancel route pushes (lifecycle_signal.lua), the daemon's leases long-poll
    BLPOPs it and answers early. Only a wake-up: the job hash's `cr` is the truth, so a lost or
    stale element costs at most one early answer. Expires VISIBILITY_TIMEOUT_S after its last
    push. In the namespace's slot."""
    return f"{PREFIX}:{{ns:{namespace}}}:c:{daemon_id}"


def namespaces() -> str:
    """SET of the namespaces that enqueued or polled (tag `{namespaces}`, a slot of its own): the
    metrics function's list of namespaces, so it never lists the token store. Added once per
    container per NAMESPACE_REMEMBER_S (redis_queues.RedisQueueStats.remember_namespace)."""
    return f"{PREFIX}:{{namespaces}}:set"


def blob(namespace: str, sha256_hex: str) -> bytes:
    """STRING: the blob's size, once its upload was verified (see docs/design.md "Blobs"), with
    a TTL ending `known margin` before its object's lifecycle expiry (models/blob_lifetime.py):
    the TTL tells the object's expiry, so no timestamp is stored. The key ends with the 32 raw
    bytes of the sha256 (not 64 hex characters, nor 43 of base64) so the record stays within
    128 B (MEMORY USAGE, cluster mode included) for namespaces up to 11 characters. In the
    namespace's slot."""
    return f"{PREFIX}:{{ns:{namespace}}}:b:".encode() + bytes.fromhex(sha256_hex)


def blob_needs(namespace: str) -> str:
    """ZSET of the namespace's blobs that a reference needs past their object's expiry: member
    the sha256 (32 raw bytes), score until when (ms since the epoch). Written by the request path
    (blobs_reference.lua, only when a need goes past the expiry), read and emptied by the
    scheduled renewer (logic/renewals.py), which copies each due blob onto itself. In the
    namespace's slot, beside the records."""
    return f"{PREFIX}:{{ns:{namespace}}}:bn"


def blob_upload(namespace: str, sha256_hex: str) -> bytes:
    """HASH of a blob's multipart upload in progress (a blob above MULTIPART_THRESHOLD): `u` the
    S3 upload id, `z` the blob's size, `b` its part size, `k` = 'c' for a CRC64NVME (FULL_OBJECT)
    upload, and one field per issued part number holding the sha256 (32 raw bytes) signed into
    its URL (empty for a CRC64NVME upload's part). Deleted when the upload is completed and the blob recorded; it expires after a day
    (the bucket's lifecycle aborts an incomplete upload then). In the namespace's slot, beside
    the blob's record."""
    return f"{PREFIX}:{{ns:{namespace}}}:bu:".encode() + bytes.fromhex(sha256_hex)


def inline_index(namespace: str, job_ms: int) -> str:
    """HASH job id -> queue name of the inline jobs created in one hour (by the job id's time).

    It answers status for an inline job that has no hash yet (still queued) and finds the job of
    a repeated Idempotency-Key; the whole hour expires after the retention."""
    return f"{PREFIX}:{{ns:{namespace}}}:ix:{job_ms // INLINE_INDEX_SPAN_MS}"


def inline_keyed_since(namespace: str) -> str:
    """STRING: the 10 time chars of the first minute from which every inline job enqueued with an
    Idempotency-Key also has its key field (`k<tail>` -> its minute's chars) in its index hash.
    Set once, by the first enqueue_inline.lua that looks a key up; minutes before it are looked
    up job id by job id, as jobs of an older control plane have no key field."""
    return f"{PREFIX}:{{ns:{namespace}}}:ixk"


def ended(namespace: str, queue_name: str, group: str) -> str:
    """STREAM of a queue's jobs that ended in one group of states (`succeeded`, `failed`:
    failed, payload_lost and payload_corrupt, `cancelled`), newest last: one small entry per
    job (`j` = the job id as 16 raw bytes, `r` = its retries when it ended), trimmed by age
    (MINID ~) and expiring with its newest job. A job retried since is told by its `rt`."""
    return f"{PREFIX}:{{ns:{namespace}}}:e:{queue_name}:{group}"


def failed_jobs(namespace: str, queue_name: str) -> str:
    """ZSET of a queue's jobs that ended failed (failed, payload_lost, payload_corrupt): member
    the job id as 16 raw bytes, score when it ended (ms). Added where its ended-jobs index entry
    is (completion_settle.lua), removed by a retry (operate_requeue.lua), pruned of ends older
    than the retention at each add: ZCOUNT answers the queue's failed count in O(log n).
    Expires with its newest job."""
    return f"{PREFIX}:{{ns:{namespace}}}:f:{queue_name}"


# Throughput is counted per minute in hashes of one hour each, so whole hours expire.
THROUGHPUT_SPAN_S = 3600
THROUGHPUT_BUCKET_S = 60


def throughput(namespace: str, queue_name: str, epoch_s: float) -> str:
    """HASH of the jobs of a queue that ended in the hour holding `epoch_s`, per minute:
    field `s<MM>` succeeded, `f<MM>` failed (MM the minute of the hour, 00-59), at most 120
    small fields (a listpack). HINCRBY in completion_settle.lua; expires two hours after its
    last count, so the last hour is always this hour's hash and the one before."""
    return f"{PREFIX}:{{ns:{namespace}}}:tp:{queue_name}:{int(epoch_s) // THROUGHPUT_SPAN_S}"


def kept_args(namespace: str, job_id: str) -> str:
    """STRING: the inline args of a failed or cancelled job, moved out of its queue entry when
    the entry is dropped, so the job can be retried until its retention ends (same TTL)."""
    return f"{PREFIX}:{{ns:{namespace}}}:a:{job_id}"


def kept_blobs(namespace: str, job_id: str) -> str:
    """STRING: the blob list (`B`: 32 raw bytes per blob) of a failed or cancelled job's queue
    entry, kept beside its args when the entry is dropped, so a retry's entry names its blobs
    again (same TTL). An S3-tier job's end keeps it even when empty: its existence says the
    job's entry was settled (operate_requeue.lua reads it so)."""
    return f"{PREFIX}:{{ns:{namespace}}}:a:{job_id}:B"


def requeued(namespace: str, job_id: str) -> str:
    """STRING: what the namespace slot did for the job's latest retry (operate_requeue.lua),
    `<retries> <entry id>` (the entry it appended) or `<retries> =<entry id>` (it relied on the
    job's entry still in the stream; `=` alone: an entry whose id the job slot does not know),
    so a retry sent again appends nothing more, and the settle step that drops a relied-on
    entry a daemon took appends the retry's entry from it (completion_settle.lua). Spent at the
    job's next end, which marks it `<retries> -`: a retry's requeue that comes later (paused
    while a purge or cancel ended the job it queued) then appends nothing and leaves the kept
    args and blob list for the next retry. Expires with the job (RESULT_TTL_S)."""
    return f"{PREFIX}:{{ns:{namespace}}}:a:{job_id}:R"


def consume_due(namespace: str) -> str:
    """ZSET of the S3 keys of a retention `consume` namespace that are due for deletion, scored
    by when (ms since epoch): a succeeded job's args, a read result. Added on the request path
    (ZADD NX: a key keeps its first time), drained by the scheduled function (logic/policy.py).
    In the namespace's slot."""
    return f"{PREFIX}:{{ns:{namespace}}}:del"


# -- layout 1 (read only, for jobs written before the upgrade) ------------------------------


def issue(job_id: str, kind: str) -> str:
    """Layout 1: HASH of what the CP issued for `payloads/.../<job_id>/<kind>`."""
    return f"{PREFIX}:{{j:{job_id}}}:issue:{kind}"


def idempotency(namespace: str, idempotency_key: str) -> str:
    """Layout 1: STRING job id created for an inline enqueue's Idempotency-Key."""
    return f"{PREFIX}:{{ns:{namespace}}}:idem:{idempotency_key}"


def operation(namespace: str, idempotency_key: str) -> str:
    """HASH of a client operation sent with an Idempotency-Key (redrive, purge, retry, cancel):
    the request's fingerprint and, once it ended, its answer; expires after IDEMPOTENCY_TTL_S
    (operate_once.lua; its answer: operate_answer.lua)."""
    return f"{PREFIX}:{{ns:{namespace}}}:op:{idempotency_key}"


def next_taken(namespace: str, idempotency_key: str) -> str:
    """STRING: the deliveries a result post or failure report with `next` and an
    Idempotency-Key took (`<job id>:<lease>,...`), so the post sent again after a lost answer
    gets the same ones; expires NEXT_TAKEN_TTL_S after."""
    return f"{PREFIX}:{{ns:{namespace}}}:nx:{idempotency_key}"
