"""Every Redis key the control plane uses, in one place.

Each key carries a hash tag (`{...}`) so every command that touches several keys touches one
cluster slot: the same code runs on one redis-server and on ElastiCache in cluster mode.

- Per job, tag `{j:<job_id>}`: the job hash, the issue records of its two keys, its done list.
  Presign, enqueue bookkeeping, result post and failure reports are single-slot Lua scripts.
- Per namespace, tag `{ns:<namespace>}`: the queue streams of that namespace and its
  idempotency keys. A daemon polls several queues of one namespace with one XREADGROUP, which
  is only legal in cluster mode because all those streams share the slot.
"""

from __future__ import annotations

PREFIX = "ps"
CONSUMER_GROUP = "daemons"


def job(job_id: str) -> str:
    """HASH: state, queue, tier, attempts, refs, result, error, stream position."""
    return f"{PREFIX}:{{j:{job_id}}}:job"


def issue(job_id: str, kind: str) -> str:
    """HASH: what the CP issued for `payloads/.../<job_id>/<kind>` (namespace, size, sha256, count)."""
    return f"{PREFIX}:{{j:{job_id}}}:issue:{kind}"


def done(job_id: str) -> str:
    """LIST holding one marker once the job is terminal; result waiters block on it (BLMOVE)."""
    return f"{PREFIX}:{{j:{job_id}}}:done"


def queue(namespace: str, queue_name: str) -> str:
    """STREAM of queued jobs; entries carry the job id and, for the inline tier, the payload bytes."""
    return f"{PREFIX}:{{ns:{namespace}}}:q:{queue_name}"


def idempotency(namespace: str, idempotency_key: str) -> str:
    """STRING: job id created for an inline enqueue's Idempotency-Key."""
    return f"{PREFIX}:{{ns:{namespace}}}:idem:{idempotency_key}"


def queue_names(namespace: str) -> str:
    """SET of the queue names a namespace has used (added at enqueue): listed without a scan."""
    return f"{PREFIX}:{{ns:{namespace}}}:queues"
