"""The job store's Lua scripts, one file each, named by the life-cycle step they belong to
(`presign_*`, `enqueue_*`, `delivery_*`, `completion_*`, `lifecycle_*`, `operate_*`, `queues_*`,
`layout1_*`). Each file opens with its KEYS/ARGV contract, the state transitions it performs
and what it answers; `redis_jobs.RedisJobStore` registers them and parses their answers.

Every script touches keys of one hash tag (one cluster slot). Scripts that add data run with
the default flags (under `maxmemory` Redis refuses them before they start: all or nothing);
scripts on the drain path carry `#!lua flags=allow-oom` on their first line.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_HERE = Path(__file__).parent


@cache
def source(name: str) -> str:
    """The text of `<name>.lua` beside this module."""
    return (_HERE / f"{name}.lua").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every script of the store, by file name."""
    return sorted(p.stem for p in _HERE.glob("*.lua"))
