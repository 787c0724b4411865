"""Queue depth, in-flight count and oldest queued entry, read from the streams themselves.

Nothing is scanned: per queue it is XLEN, the consumer group's summary (XINFO GROUPS: pending
count and last-delivered id) and at most one XRANGE for the first entry not yet delivered. All
queues of a namespace share its hash tag, so one script answers for all of them in one round
trip, on one redis-server or on a cluster.

The namespace set (keys.namespaces) is kept here too: the namespaces the metrics function
publishes, added by the enqueue and poll paths (once per container per NAMESPACE_REMEMBER_S:
one SADD, not one per request).
"""

from __future__ import annotations

import threading
import time

import redis

from . import keys
from .records import QueueCounts

# KEYS: queue streams of one namespace (one slot)  ARGV[1]: consumer group
# -> per key {exists, xlen, pending, oldest_undelivered_id or ''}
_QUEUE_STATS = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 0 then
    out[i] = {0, 0, 0, ''}
  else
    local len = redis.call('XLEN', key)
    local pending, last = 0, nil
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
      local f = {}
      for j = 1, #g, 2 do f[g[j]] = g[j + 1] end
      if f['name'] == ARGV[1] then
        pending = tonumber(f['pending']) or 0
        last = f['last-delivered-id']
      end
    end
    local first
    if last then
      first = redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 1)
    else
      first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)
    end
    local oldest = ''
    if first[1] then oldest = first[1][1] end
    out[i] = {1, len, pending, oldest}
  end
end
return out
"""


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# A namespace already added is added again after this long (a set emptied by hand fills up).
NAMESPACE_REMEMBER_S = 300.0


class RedisQueueStats:
    """Reads, and the namespace set: the job store writes the streams and the queue-name set."""

    def __init__(self, client: redis.Redis):
        self._r = client
        self._stats = client.register_script(_QUEUE_STATS)
        self._remembered: dict[str, float] = {}
        self._remembered_lock = threading.Lock()

    def remember_namespace(self, namespace: str) -> None:
        """Add the namespace to the set the metrics function lists, at most once per
        NAMESPACE_REMEMBER_S per container. Never fails the request that asks."""
        now = time.monotonic()
        with self._remembered_lock:
            if now - self._remembered.get(namespace, float("-inf")) < NAMESPACE_REMEMBER_S:
                return
            self._remembered[namespace] = now
        try:
            self._r.sadd(keys.namespaces(), namespace)
        except redis.RedisError:
            # Best effort: a full or unreachable Redis answers the request itself; the next
            # request of this namespace tries again.
            with self._remembered_lock:
                self._remembered.pop(namespace, None)

    def namespaces(self) -> list[str]:
        """Every namespace that enqueued or polled (the metrics function's list)."""
        return sorted(_s(m) for m in self._r.smembers(keys.namespaces()))

    def queue_names(self, namespace: str) -> list[str]:
        return sorted(_s(m) for m in self._r.smembers(keys.queue_names(namespace)))

    def counts(self, namespace: str, queues: list[str]) -> list[QueueCounts]:
        if not queues:
            return []
        stream_keys = [keys.queue(namespace, q) for q in queues]
        rows = self._stats(keys=stream_keys, args=[keys.CONSUMER_GROUP])
        out = []
        for name, (exists, length, pending, oldest) in zip(queues, rows, strict=True):
            oldest_id = _s(oldest)
            length, pending = int(length), int(pending)
            out.append(
                QueueCounts(
                    name=name,
                    exists=bool(int(exists)),
                    # Finished entries are deleted (XACK + XDEL), so what is left is either
                    # pending (in flight) or not yet delivered.
                    queued=max(length - pending, 0),
                    in_flight=pending,
                    oldest_queued_ms=int(oldest_id.split("-")[0]) if oldest_id else None,
                )
            )
        return out

    def memory(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of the fullest node; maxmemory 0 means no limit is set."""
        info = self._r.info("memory")
        # A cluster client answers per node ({node: {...}}); one server answers flat.
        nodes = [v for v in info.values() if isinstance(v, dict)] or [info]
        figures = [(int(n.get("used_memory", 0)), int(n.get("maxmemory", 0))) for n in nodes]
        return max(figures, key=lambda f: (f[0] / f[1]) if f[1] else 0.0)
