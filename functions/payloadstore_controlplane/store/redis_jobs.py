"""Jobs, queues and results in Redis: the store that runs the job life cycle.

`RedisJobStore` is one object made of one module per life-cycle step (`store/jobs/`): presign,
enqueue, delivery, completion, life cycle (heartbeat, cancel, upkeep), and the layout-1 upgrade.
Each step's Lua scripts sit beside its module (`store/jobs/<step>_*.lua`), each opening with its
KEYS/ARGV contract; the step module builds their arguments and turns their answers into the
types of `store/records.py`, which is what logic matches on. The layout (job hash fields, keys)
is documented in `keys.py` and, byte by byte, in docs/design.md ("Redis layout").

Every script touches keys of one hash tag (one cluster slot). Steps that span the job slot and
the namespace slot are ordered so a crash between them leaves something the next request or the
visibility timeout repairs, never a lost job and never a job id handed out for a job that is in
no queue:

- inline enqueue: one namespace-slot script (idempotency lookup in the inline index, XADD,
  index entry, queue set, the group of a new stream) -- all or nothing, so an answer with a job
  id means the entry exists.
- S3 enqueue: XADD (namespace slot), only once the upload is verified -> job hash
  `awaiting_upload` -> `queued` naming that entry `x`, in one step (job slot), so no job reads
  `queued` without an entry. A request cut off in between leaves the job `awaiting_upload` and
  its entry, which a poll queues and delivers as the job's (the entry was appended for a
  verified upload), unless a re-send was refused since its request read the job (`xr` counts
  refusals, the entry's `r` those its request saw; enqueue_refuse_ref.lua): then it is
  dropped. A re-send whose job is queued already drops its own entry, and a delivery whose
  entry id is not the recorded `x` drops that entry, so a doubled append never runs the job
  twice. An enqueue answers only after its job step.
- delivery: one namespace-slot script takes one entry (a timed-out delivery from the pending
  list, scanned from a cursor, else a new entry; never more than the one answered) -> job hash
  `running` (job slot); a crash in between leaves the entry pending, and the next scan hands it
  out again after the visibility timeout. Waiting for work is a plain XREAD BLOCK, which takes
  nothing.
- result/failure: the job hash goes terminal and the done list is written (job slot) -> XACK +
  XDEL (namespace slot); an entry left pending is reclaimed, and a delivery of an entry whose
  job is already terminal only drops the entry.
- payload_lost requeue: job hash `queued` with `x` = '*' (job slot) -> XADD a new entry, drop
  the old one (namespace slot): whichever entry is delivered first becomes the job's.

A client re-sends a command after a reply timeout, so every script answers a re-send for the
same lease, state and arguments as it answered the first time (see each script's header).

Scripts that add data (presign, enqueue) run with the default script flags: under `maxmemory`
Redis refuses them before they start (OutOfMemoryError, all or nothing). Scripts on the drain
path (delivery, completion, failure) carry `allow-oom`: they write a few bytes and lead to XDEL
of queue entries, so a full Redis can always be drained by the daemons. The high-water marks of
`logic/guard.py` keep enqueues from reaching the wall in the first place.
"""

from __future__ import annotations

from typing import Any

from . import keys
from .job_hash import decode_job
from .jobs import layout1
from .jobs.blobs import BlobSteps
from .jobs.completion import CompletionSteps
from .jobs.consume import ConsumeSteps
from .jobs.delivery import DeliverySteps
from .jobs.enqueue import EnqueueSteps
from .jobs.lifecycle import LifecycleSteps
from .jobs.operate import OperateSteps
from .jobs.presign import PresignSteps
from .records import JobRecord

__all__ = ["RedisJobStore", "decode_job"]


class RedisJobStore(
    PresignSteps,
    EnqueueSteps,
    DeliverySteps,
    CompletionSteps,
    LifecycleSteps,
    BlobSteps,
    OperateSteps,
    ConsumeSteps,
):
    # INFO memory is read at most this often per node.
    MEMORY_CACHE_S = 1.0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._memory: dict[str, tuple[float, int, int]] = {}

    # -- health and memory -----------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self._r.ping())

    def memory(self, key: str | None = None) -> tuple[int, int]:
        """(used_memory, maxmemory) of the node holding `key` (any node when None), read from
        INFO memory at most once per MEMORY_CACHE_S per node. maxmemory 0 means no limit."""
        node = None
        cache_key = ""
        if key is not None and hasattr(self._r, "get_node_from_key"):
            node = self._r.get_node_from_key(key)
            cache_key = node.name
        now = self._mono()
        hit = self._memory.get(cache_key)
        if hit is not None and now - hit[0] < self.MEMORY_CACHE_S:
            return hit[1], hit[2]
        info = self._r.info("memory", target_nodes=node) if node else self._r.info("memory")
        if node is None and isinstance(info, dict) and "used_memory" not in info:
            # A cluster client asked without a key answers per node: take the fullest.
            info = max(
                info.values(), key=lambda i: i.get("used_memory", 0) / (i.get("maxmemory") or 1)
            )
        used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        self._memory[cache_key] = (now, used, limit)
        return used, limit

    def job_memory(self, job_id: str) -> tuple[int, int]:
        """memory() of the node that holds the job's keys."""
        return self.memory(keys.job(job_id))

    def namespace_memory(self, namespace: str) -> tuple[int, int]:
        """memory() of the node that holds the namespace's queues."""
        return self.memory(keys.queue_names(namespace))

    # -- reading a job -------------------------------------------------------------------

    def get_job(self, job_id: str, *, with_done: bool = False) -> JobRecord | None:
        """The job hash, decoded; with_done also reads the done list's element in the same
        round trip (both keys are in the job's slot)."""
        raw, done = self._read(job_id, with_done)
        if layout1.is_legacy(raw):
            layout1.migrate(self, job_id)
            raw, done = self._read(job_id, with_done)
        if not raw:
            return None
        return decode_job(job_id, raw, done, done_read=with_done)

    def _read(self, job_id: str, with_done: bool) -> tuple[dict, bytes | None]:
        if not with_done:
            return self._r.hgetall(keys.job(job_id)), None
        pipe = self._r.pipeline(transaction=False)
        pipe.hgetall(keys.job(job_id))
        pipe.lindex(keys.done(job_id), 0)
        raw, done = pipe.execute()
        return raw, done

    def migrate(self, job_id: str) -> bool:
        """Convert a layout-1 job to layout 2 in place (jobs/layout1.py)."""
        return layout1.migrate(self, job_id)
