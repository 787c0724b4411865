"""Namespace policies in Redis: the due deletions of retention `consume` namespaces
(keys.consume_due, on the namespace's slot), the mark of a consumed payload on its job's hash,
and the longer life of a finished job of a `7d`/`30d` namespace (its hash and done list, the
job's slot).

The marks are scripts (consume_schedule.lua, consume_mark.lua, consume_keep.lua): each is
idempotent (ZADD NX, HSETNX, PEXPIREAT GT from the job's end), so a re-sent post or read writes
them again safely; each goes through the acknowledged path (EVALSHA + WAIT, store/replicated.py)
like every other write; each is allow-oom, so a result read or post never fails because Redis
is full (issue 43: a few bytes per job that exists, removed again by the drain). A read's marks
pass `lag_ok`: the read reports no write done, so a lagging replica does not fail it."""

from __future__ import annotations

from .. import keys
from ..records import text
from ._base import StoreBase


class ConsumeSteps(StoreBase):
    def schedule_deletions(
        self, namespace: str, object_keys: list[str], due_ms: int, *, lag_ok: bool = False
    ) -> None:
        """Record S3 keys for deletion at due_ms; a key already recorded keeps its time (NX)."""
        if object_keys:
            self._run(
                "consume_schedule",
                [keys.consume_due(namespace)],
                [due_ms, *object_keys],
                lag_ok=lag_ok,
            )

    def mark_consumed(self, job_id: str, field: str, due_ms: int, *, lag_ok: bool = False) -> None:
        """Record on the job's hash (`pd` arguments, `rd` result) when its payload is deleted;
        the first time stays. Reads past it answer 410 from the hash alone."""
        self._run("consume_mark", [keys.job(job_id)], [field, due_ms], lag_ok=lag_ok)

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

    def keep_finished_job(
        self, job_id: str, ttl_s: int, now_ms: int, *, lag_ok: bool = False
    ) -> None:
        """A finished job of a namespace whose retention is longer than RESULT_TTL_S keeps its
        record (state, references, an inline result or error) for `ttl_s` from its end: its
        hash and done list (the job's slot), only ever lengthened (GT). `now_ms` stands for the
        end of a hash that has none."""
        self._run(
            "consume_keep",
            [keys.job(job_id), keys.done(job_id)],
            [ttl_s * 1000, now_ms],
            lag_ok=lag_ok,
        )
