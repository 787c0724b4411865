"""The invariants, checked after every step over the whole Redis state (world.snapshot).

Each takes the snapshot, the model (what clients and daemons were answered) and the jobs an
operation in flight is in the middle of changing (`busy`: every job id its calls named so far):
the structural invariants skip those until the operation ends (a job is allowed to be
half-written between two steps of the one operation writing it; not after). The state-edge and
acknowledged-write invariants hold for every job at every step.

To add one: a function `(snap, prev, model, busy) -> list[(kind, detail)]` in INVARIANTS, with
`kind` a short name a shrunk failure is matched by (RELIABILITY.md, "The race explorer").
"""

from __future__ import annotations

from collections.abc import Callable

from tests.races.ops import Model
from tests.races.world import Snapshot

Violation = tuple[str, str]

TERMINAL = {"succeeded", "failed", "payload_lost", "payload_corrupt", "cancelled"}
RETRYABLE = {"failed", "payload_lost", "payload_corrupt", "cancelled"}
# docs/wire.md "Job states": queued -> running -> terminal; re-queued by a payload_lost report or
# a retry; running -> running is a redelivery after the lease lapsed. A job's first state is
# awaiting_upload (S3 tier, from its presign) or queued (inline; its hash is born running at
# its first delivery, or cancelled by a cancel while queued).
EDGES: dict[str | None, set[str]] = {
    None: {"awaiting_upload", "queued", "running", "cancelled"},
    # -> running: a poll met the entry an S3-tier enqueue appended before its job step and
    # queued the job on it as it delivered it (delivery_start.lua), one script.
    "awaiting_upload": {"queued", "running"},
    "queued": {"running", "cancelled", "failed"},
    "running": {"running", "queued"} | TERMINAL,
    "failed": {"queued"},
    "payload_lost": {"queued"},
    "payload_corrupt": {"queued"},
    "cancelled": {"queued"},
    "succeeded": set(),
}


def state_edges(snap: Snapshot, prev: dict[str, str | None], model: Model, busy: set[str]):
    out: list[Violation] = []
    for job_id in set(prev) | set(snap.jobs) | set(snap.inline_index):
        before, after = prev.get(job_id), snap.state(job_id)
        if before == after or after is None:
            continue  # a job that vanished is acked_writes' business
        if model.past_promise(job_id):
            continue  # what is left of a job past its promise (an index field) says nothing
        if after not in EDGES.get(before, set()):
            out.append(("state_edge", f"job {job_id} went {before} -> {after}"))
    return out


def _blob_list(model: Model, job_id: str) -> bytes | None:
    intent = model.intent(job_id)
    if intent is None:
        return None
    return b"".join(bytes.fromhex(s) for s in intent.blobs)


def queued_and_running(snap: Snapshot, prev, model: Model, busy: set[str]):
    """Every queued job has a deliverable entry (its `x`, or any of its entries after a retry or
    a payload_lost requeue: `x` = '*'), carrying its inline arguments and its full blob list;
    every running job's entry is in the pending list (a lapsed lease lets another daemon take
    it) with its arguments still in it."""
    out: list[Violation] = []
    for job_id in set(snap.jobs) | set(snap.inline_index):
        if job_id in busy or model.past_promise(job_id):
            continue
        state = snap.state(job_id)
        h = snap.jobs.get(job_id, {})
        inline = h.get("t", b"i") == b"i"
        x = h.get("x", b"").decode() or None
        blobs = _blob_list(model, job_id)
        if state == "queued":
            mine = [e for e in snap.entries_of(job_id)]
            deliverable = mine if x in (None, "*") else [e for e in mine if e.stream_id == x]
            if not deliverable:
                out.append(
                    (
                        "queued_without_entry",
                        (
                            f"job {job_id} is queued (x={x}) with no entry to deliver it "
                            f"({len(mine)} entries of it in its queue)"
                        ),
                    )
                )
            for e in deliverable:
                if inline and e.inline is None:
                    out.append(
                        (
                            "entry_without_args",
                            f"queued inline job {job_id}: entry {e.stream_id} has no bytes",
                        )
                    )
                if blobs is not None and (e.blobs or b"") != blobs:
                    out.append(
                        (
                            "entry_blob_list",
                            (
                                f"queued job {job_id}: entry {e.stream_id} names "
                                f"{len(e.blobs or b'') // 32} blobs, the job {len(blobs) // 32}"
                            ),
                        )
                    )
        elif state == "running":
            e = next((e for q in snap.entries.values() for e in q if e.stream_id == x), None)
            if e is None or e.pending is None or e.job_id != job_id:
                why = (
                    "gone"
                    if e is None
                    else "not pending"
                    if e.pending is None
                    else "deleted (pending without its message)"
                )
                out.append(
                    (
                        "running_without_pending",
                        (
                            f"job {job_id} is running (attempt {h.get('a', b'?').decode()}) "
                            f"but its entry {x} is {why}: a lapsed lease can never be taken "
                            "over"
                        ),
                    )
                )
            elif inline and e.inline is None:
                out.append(("entry_without_args", f"running inline job {job_id} lost its bytes"))
            elif blobs is not None and (e.blobs or b"") != blobs:
                out.append(
                    (
                        "entry_blob_list",
                        (
                            f"running job {job_id}: entry {x} names "
                            f"{len(e.blobs or b'') // 32} blobs, the job {len(blobs) // 32}"
                        ),
                    )
                )
    return out


def retryable_kept(snap: Snapshot, prev, model: Model, busy: set[str]):
    """A failed or cancelled job can be retried within the retention: its inline arguments and
    its blob list are still somewhere (an entry of it, or the kept copies)."""
    out: list[Violation] = []
    for job_id, h in snap.jobs.items():
        if job_id in busy or h.get("s", b"").decode() not in RETRYABLE:
            continue
        if model.past_promise(job_id):
            continue
        mine = [e for e in snap.entries_of(job_id)]
        if (
            h.get("t") == b"i"
            and job_id not in snap.kept_args
            and not any(e.inline is not None for e in mine)
        ):
            out.append(
                (
                    "retryable_args_lost",
                    f"{h['s'].decode()} inline job {job_id}: its arguments are gone",
                )
            )
        blobs = _blob_list(model, job_id)
        if (
            blobs
            and snap.kept_blobs.get(job_id) != blobs
            and not any(e.blobs == blobs for e in mine)
        ):
            out.append(
                ("retryable_blobs_lost", f"{h['s'].decode()} job {job_id}: its blob list is gone")
            )
    return out


def acked_writes(snap: Snapshot, prev, model: Model, busy: set[str]):
    """What a client or daemon was told is done stays done: an enqueued job exists; a result
    post answered 204 left the job succeeded. Both until the job is past its promise
    (ops.Model.past_promise: the shortest retention class and queue retention it lived
    under since its enqueue; a result, RESULT_TTL_S past its post): then gone is by design.

    No acknowledged job lost: a job the control plane itself ends `payload_lost` (no daemon
    reported it so) must be past its promise (`acked_job_lost`; an expiry of its class is an
    honest end then, as `arguments_expired` is)."""
    out: list[Violation] = []
    for intent in model.intents:
        if not (intent.acked and intent.job_id) or model.past_promise(intent.job_id):
            continue
        state = snap.state(intent.job_id)
        if state is None:
            out.append(("acked_job_missing", f"enqueued job {intent.job_id} is gone"))
        elif (
            state == "payload_lost"
            and intent.job_id not in busy
            and intent.job_id not in model.reported_lost
        ):
            out.append(
                (
                    "acked_job_lost",
                    (
                        f"job {intent.job_id} ended payload_lost with no daemon reporting it, "
                        f"{model.clock() - intent.enqueued_at:.0f} s after its enqueue (promised "
                        f"{intent.promise_s:.0f} s)"
                    ),
                )
            )
    for job_id, at in model.succeeded.items():
        if model.clock() >= at + model.result_ttl_s:
            # Its result's time is over: nothing is promised. (An inline job's hourly index
            # outlives its hash by up to an hour, which the raw snapshot reads as `queued`;
            # the control plane answers 404 there: RELIABILITY.md, "Also by design".)
            continue
        if snap.state(job_id) != "succeeded":
            out.append(
                (
                    "acked_result_lost",
                    f"job {job_id}: result post answered 204, state {snap.state(job_id)}",
                )
            )
    return out


def blobs_alive(snap: Snapshot, prev, model: Model, busy: set[str]):
    """Every blob a queued or running job references is still recorded in its namespace."""
    out: list[Violation] = []
    if model.shift_s:
        # Days passed in this run: the explorer does not run the scheduled renewals function
        # (its copies count from the handlers' clock, which days passing does not move), so a
        # blob a queued job needs is let go with its record. Renewal across days is proven by
        # tests/integration/test_blob_renewals.py and tests/e2e/test_blob_lifetimes.py; what is
        # checked here after days pass is blob_record_outlives_object (no record promises past
        # its object).
        return out
    for intent in model.jobs():
        if intent.job_id in busy or snap.state(intent.job_id or "") not in ("queued", "running"):
            continue
        if model.past_promise(intent.job_id or ""):
            continue
        for sha in intent.blobs:
            if sha not in snap.blob_records:
                out.append(
                    (
                        "blob_gone",
                        (
                            f"job {intent.job_id} references blob {sha[:12]}…, "
                            "which the namespace no longer has"
                        ),
                    )
                )
    return out


def key_fields_name_their_jobs(snap: Snapshot, prev, model: Model, busy: set[str]):
    """An Idempotency-Key's field in an inline index hash names a job indexed in that hash: the
    key's job is one lookup away, never a dangling minute (enqueue_inline.lua writes both in
    one HSET)."""
    return [
        ("key_field_dangling", f"key field k{tail} names minute {chars}: no such job indexed")
        for tail, chars, indexed in snap.key_fields
        if not indexed
    ]


# Seconds a record may seem to outlive its object by the clocks' grain (S3's Last-Modified is
# whole seconds; a step's own calls take some).
LIFETIME_SLACK_S = 60
_object_cache: dict[tuple[str, str, int, float], tuple[str, str] | None] = {}


def blob_records_within_their_objects(snap: Snapshot, prev, model: Model, busy: set[str]):
    """No object deleted while a record promises it: a blob's record (what makes it
    referenceable) expires no later than the lifecycle rule of its object's retention tag
    deletes the object (written at Last-Modified, gone `days` lifecycle days later; no tag: the
    `blobs/` backstop, the longest class). Compared in Redis's own time, which a record's TTL
    counts in, and S3's (the same machine)."""
    import time as _time

    from botocore.exceptions import ClientError

    from payloadstore_controlplane.models.policy import RETENTION_DAYS, RETENTION_TAG
    from tests.races.world import BUCKET

    s3 = model.s3
    if s3 is None:
        return []
    out: list[Violation] = []
    now = _time.time() + model.shift_s
    for sha, ttl_ms in snap.blob_ttl_ms.items():
        if ttl_ms < 0:
            continue
        until = now + ttl_ms / 1000
        key = f"blobs/{model.namespace}/{sha}"
        cache_key = (model.namespace, sha, int(until // 10), model.shift_s)
        if cache_key not in _object_cache:
            try:
                head = s3.head_object(Bucket=BUCKET, Key=key)
                tags = s3.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"]
                tag = next((t["Value"] for t in tags if t["Key"] == RETENTION_TAG), "")
                days = RETENTION_DAYS.get(tag, max(RETENTION_DAYS.values()))
                written = model.written(head["LastModified"].timestamp())
                expiry = written + days * 86_400
                # The days that passed since the write, which the handlers' clock did not see
                # (world.Stack.advance): a record verified after them is that much too long by
                # the explorer's doing, not theirs.
                unseen = model.shift_s - (written - head["LastModified"].timestamp())
                _object_cache[cache_key] = (f"{tag or 'untagged'}:{expiry}", str(unseen))
            except ClientError:
                _object_cache[cache_key] = None
        found = _object_cache[cache_key]
        if found is None and sha in model.blobs_verified_across_days:
            # Deleted by days that passed inside the request that recorded it (between its HEAD
            # and its record), which no request lives through and its clock did not see.
            continue
        if found is None:
            out.append(
                (
                    "blob_object_gone",
                    (
                        f"blob {sha[:12]}… is recorded (for {ttl_ms / 86_400_000:.2f} days more) "
                        "but its object is gone"
                    ),
                )
            )
            continue
        tag, expiry_s = found[0].split(":", 1)
        expiry = float(expiry_s)
        if until > expiry + LIFETIME_SLACK_S + float(found[1]):
            out.append(
                (
                    "blob_record_outlives_object",
                    (
                        f"blob {sha[:12]}…: its record promises it for "
                        f"{(until - now) / 86_400:.2f} days, its object (tag {tag}) is deleted in "
                        f"{(expiry - now) / 86_400:.2f}"
                    ),
                )
            )
    if len(_object_cache) > 10_000:
        _object_cache.clear()
    return out


INVARIANTS: list[Callable[..., list[Violation]]] = [
    state_edges,
    queued_and_running,
    retryable_kept,
    acked_writes,
    blobs_alive,
    key_fields_name_their_jobs,
    blob_records_within_their_objects,
]


def check(snap: Snapshot, prev: dict[str, str | None], model: Model, busy: set[str]):
    out: list[Violation] = []
    for invariant in INVARIANTS:
        out += invariant(snap, prev, model, busy)
    return out


def states(snap: Snapshot) -> dict[str, str | None]:
    return {j: snap.state(j) for j in set(snap.jobs) | set(snap.inline_index)}


def s3_after_run(world, model: Model, snap: Snapshot) -> list[Violation]:
    """Once a run has drained (no operation in flight), what S3 must still hold: the result
    object of every result post answered 204/200, the args object of every queued or running
    S3-tier job, and every blob such a job references."""
    from botocore.exceptions import ClientError

    from tests.races.world import BUCKET

    def exists(key: str) -> bool:
        try:
            world.s3.head_object(Bucket=BUCKET, Key=key)
            return True
        except ClientError:
            return False

    out: list[Violation] = []
    for job_id in sorted(model.succeeded):
        if model.clock() >= model.succeeded[job_id] + model.result_ttl_s:
            continue
        r = model.cp.result(job_id)
        ref = (r.json or {}).get("resultRef") if r.status == 200 else None
        if ref and not exists(ref["key"]):
            out.append(("acked_result_object_missing", f"job {job_id}: {ref['key']} is gone"))
    for intent in model.jobs():
        if snap.state(intent.job_id or "") not in ("queued", "running"):
            continue
        if model.past_promise(intent.job_id or ""):
            continue
        if intent.tier != "inline":
            r = model.cp.status(intent.job_id)
            ref = (r.json or {}).get("payloadRef") if r.status == 200 else None
            if ref and not exists(ref["key"]):
                out.append(("args_object_gone", f"job {intent.job_id}: {ref['key']} is gone"))
        # (after days passed, blobs are not renewed in the explorer: see blobs_alive)
        for sha in intent.blobs if not model.shift_s else ():
            if not exists(f"blobs/{model.namespace}/{sha}"):
                out.append(("blob_object_gone", f"job {intent.job_id}: blob {sha[:12]}… is gone"))
    out += _stranded(model, snap)
    return out


def _stranded(model: Model, snap: Snapshot) -> list[Violation]:
    """No acknowledged job stranded: one that ended failed `DeliveryLimitExceeded` was told to
    daemons MAX_DELIVERIES times (each told delivery that lapsed counts; a delivery leased in
    an answer no daemon got, over Lambda's 6 MB, does not)."""
    from tests.races.world import SETTINGS

    limit = int(SETTINGS["MAX_DELIVERIES"])
    out: list[Violation] = []
    for intent in model.jobs():
        job_id = intent.job_id or ""
        if snap.state(job_id) != "failed" or model.told.get(job_id, 0) >= limit:
            continue
        if model.cuts:
            # A poll whose connection was cut after its delivery step ran answered 503: that
            # delivery counted against MAX_DELIVERIES with no daemon told, as one that died
            # with it would (at least once; RELIABILITY.md).
            continue
        r = model.cp.status(job_id)
        error = ((r.json or {}).get("error") or {}) if r.status == 200 else {}
        if error.get("type") == "DeliveryLimitExceeded":
            out.append(
                (
                    "acked_job_stranded",
                    (
                        f"job {job_id} failed DeliveryLimitExceeded, told to daemons "
                        f"{model.told.get(job_id, 0)} times of {limit}"
                    ),
                )
            )
    return out
