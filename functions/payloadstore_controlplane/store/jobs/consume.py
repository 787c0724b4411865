"""Namespace policies in Redis: the due deletions of retention `consume` namespaces
(keys.consume_due, plain sorted-set commands on the namespace's slot), and the longer life of a
finished job of a `7d`/`30d` namespace (EXPIRE of its hash and done list, the job's slot). Each
step is one command, or two on one slot, but the mark of a consumed payload on its job's hash
(consume_mark.lua: only on a hash that exists)."""

from __future__ import annotations

from .. import keys
from ..records import text
from ._base import StoreBase


class ConsumeSteps(StoreBase):
    def schedule_deletions(self, namespace: str, object_keys: list[str], due_ms: int) -> None:
        """Record S3 keys for deletion at due_ms; a key already recorded keeps its time (NX)."""
        if object_keys:
            self._r.zadd(keys.consume_due(namespace), dict.fromkeys(object_keys, due_ms), nx=True)

    def mark_consumed(self, job_id: str, field: str, due_ms: int) -> None:
        """Record on the job's hash (`pd` arguments, `rd` result) when its payload is deleted;
        the first time stays. Reads past it answer 410 from the hash alone."""
        self._run("consume_mark", [keys.job(job_id)], [field, due_ms])

    def due_deletions(self, namespace: str, now_ms: int, limit: int) -> list[str]:
        """Up to `limit` keys due by now_ms, oldest first."""
        found = self._r.zrangebyscore(keys.consume_due(namespace), "-inf", now_ms, 0, limit)
        return [text(k) or "" for k in found]

    def forget_deletions(self, namespace: str, object_keys: list[str]) -> None:
        if object_keys:
            self._r.zrem(keys.consume_due(namespace), *object_keys)

    def deletion_due_ms(self, namespace: str, object_key: str) -> int | None:
        """When the key is due for deletion, or None when it is not scheduled."""
        score = self._r.zscore(keys.consume_due(namespace), object_key)
        return None if score is None else int(score)

    def keep_finished_job(self, job_id: str, ttl_s: int) -> None:
        """A finished job of a namespace whose retention is longer than RESULT_TTL_S keeps its
        record (state, references, an inline result or error) for `ttl_s` from now: its hash
        and done list (the job's slot), only ever lengthened (GT)."""
        pipe = self._r.pipeline(transaction=False)
        pipe.expire(keys.job(job_id), ttl_s, gt=True)
        pipe.expire(keys.done(job_id), ttl_s, gt=True)
        pipe.execute()
