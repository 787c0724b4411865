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
from .records import QueueCounts, Throughput

# The throughput chart's span: the last hour, per minute.
THROUGHPUT_MINUTES = 60

# KEYS: queue streams of one namespace (one slot), then each queue's failed-jobs set, in the
# same order  ARGV[1]: consumer group  ARGV[2]: the failed count's start (ms: the retention's)
# -> per queue {exists, xlen, pending, oldest_undelivered_id or '', failed}
_QUEUE_STATS = """
local out = {}
local n = #KEYS / 2
for i = 1, n do
  local key = KEYS[i]
  local failed = redis.call('ZCOUNT', KEYS[n + i], ARGV[2], '+inf')
  if redis.call('EXISTS', key) == 0 then
    out[i] = {0, 0, 0, '', failed}
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
    out[i] = {1, len, pending, oldest, failed}
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

    def counts(
        self, namespace: str, queues: list[str], failed_since_ms: int = 0
    ) -> list[QueueCounts]:
        """Each queue's figures; `failed` counts the jobs that ended failed since
        `failed_since_ms` (the retention's start) and were not retried since."""
        if not queues:
            return []
        stream_keys = [keys.queue(namespace, q) for q in queues]
        failed_keys = [keys.failed_jobs(namespace, q) for q in queues]
        rows = self._stats(
            keys=stream_keys + failed_keys, args=[keys.CONSUMER_GROUP, failed_since_ms]
        )
        out = []
        for name, (exists, length, pending, oldest, failed) in zip(queues, rows, strict=True):
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
                    failed=int(failed),
                )
            )
        return out

    def throughput(self, namespace: str, queues: list[str], now_s: float) -> Throughput:
        """The jobs of `queues` that ended per minute over the last hour (60 minutes, the
        current one last), summed: two small hashes per queue (this hour's and the one
        before), one pipeline in the namespace's slot."""
        minutes = THROUGHPUT_MINUTES
        bucket = keys.THROUGHPUT_BUCKET_S
        now_minute = int(now_s) // bucket
        first_minute = now_minute - minutes + 1
        succeeded, failed = [0] * minutes, [0] * minutes
        hours = sorted({(m * bucket) // keys.THROUGHPUT_SPAN_S for m in (first_minute, now_minute)})
        if queues:
            pipe = self._r.pipeline(transaction=False)
            for q in queues:
                for hour in hours:
                    pipe.hgetall(keys.throughput(namespace, q, hour * keys.THROUGHPUT_SPAN_S))
            answers = pipe.execute()
            per_hour = keys.THROUGHPUT_SPAN_S // bucket
            for i, fields in enumerate(answers):
                hour = hours[i % len(hours)]
                for field, value in fields.items():
                    name = _s(field)
                    if len(name) < 2 or name[0] not in "sf" or not name[1:].isdigit():
                        continue
                    minute = hour * per_hour + int(name[1:])
                    if first_minute <= minute <= now_minute:
                        counts = succeeded if name[0] == "s" else failed
                        counts[minute - first_minute] += int(value)
        return Throughput(start_s=first_minute * bucket, succeeded=succeeded, failed=failed)

    def memory(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of the fullest node; maxmemory 0 means no limit is set."""
        info = self._r.info("memory")
        # A cluster client answers per node ({node: {...}}); one server answers flat.
        nodes = [v for v in info.values() if isinstance(v, dict)] or [info]
        figures = [(int(n.get("used_memory", 0)), int(n.get("maxmemory", 0))) for n in nodes]
        return max(figures, key=lambda f: (f[0] / f[1]) if f[1] else 0.0)
