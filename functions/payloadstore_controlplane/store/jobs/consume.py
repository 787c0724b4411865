"""Due deletions of retention `consume` namespaces (keys.consume_due): plain sorted-set commands
on the namespace's slot, no script (each is one command)."""

from __future__ import annotations

from .. import keys
from ..records import text
from ._base import StoreBase


class ConsumeSteps(StoreBase):
    def schedule_deletions(self, namespace: str, object_keys: list[str], due_ms: int) -> None:
        """Record S3 keys for deletion at due_ms; a key already recorded keeps its time (NX)."""
        if object_keys:
            self._r.zadd(keys.consume_due(namespace), dict.fromkeys(object_keys, due_ms), nx=True)

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
