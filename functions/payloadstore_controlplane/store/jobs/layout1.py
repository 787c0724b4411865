"""Everything for the upgrade from layout 1 (long field names, separate issue records,
idempotency strings), in one module: delete it with `layout1_migrate.lua`, the `legacy` first
lines of the scripts, `keys.issue`/`keys.idempotency` and the layout-1 branch of the inline
enqueue once no layout-1 job can be left (RESULT_TTL_S after the upgrade).

A layout-1 hash has a `state` field (layout 2 never does). Every job-slot script answers
`legacy` for one; the store then converts the job in place and runs the script again."""

from __future__ import annotations

from typing import Any, Protocol

from .. import keys
from ..records import DEFAULT_CONTENT_TYPE


class ScriptRunner(Protocol):
    """What a conversion needs of the store (StoreBase runs it): its script runner. A protocol,
    not StoreBase itself, so the base (which converts on a `legacy` answer) and this module do
    not import each other."""

    def _run(
        self, name: str, keys_: list[str], args: list, *, acked: bool = True, lag_ok: bool = False
    ) -> Any: ...


LEGACY_FIELD = b"state"


def is_legacy(raw: dict) -> bool:
    return bool(raw) and LEGACY_FIELD in raw


def migrate(store: ScriptRunner, job_id: str) -> bool:
    """Convert a layout-1 job (and its issue records) to layout 2 in place; False if it was
    not a layout-1 job."""
    return bool(
        store._run(
            "layout1_migrate",
            [
                keys.job(job_id),
                keys.done(job_id),
                keys.issue(job_id, "args"),
                keys.issue(job_id, "result"),
            ],
            [DEFAULT_CONTENT_TYPE],
            # A conversion in place: the step script run next waits for the replicas.
            acked=False,
        )
    )


def idempotency_key(namespace: str, idempotency_key_: str) -> str:
    """The layout-1 string an inline enqueue with an Idempotency-Key may still find."""
    return keys.idempotency(namespace, idempotency_key_)
