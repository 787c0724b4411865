"""What every step module of the job store shares: the client, the registered scripts, the
retention, the clock, and the run of a job-slot script that first converts a layout-1 job."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from ..records import text
from ..replicated import AckPolicy, run_acked
from . import layout1, source

ScriptReply = list[Any]


class StoreBase:
    def __init__(
        self,
        client: redis.Redis,
        *,
        result_ttl_s: int,
        monotonic: Callable[[], float] = time.monotonic,
        min_replica_acks: int = 0,
        replica_ack_timeout_ms: int = 100,
        replica_ack_strict: bool = False,
        replicas_below_target: Callable[[str, int, int], None] | None = None,
    ):
        self._r = client
        # REDIS_MIN_REPLICA_ACKS: 0 runs scripts as plain EVALSHA (no WAIT).
        self._min_acks = min_replica_acks
        self._ack_policy = AckPolicy(
            min_acks=min_replica_acks,
            timeout_ms=replica_ack_timeout_ms,
            strict=replica_ack_strict,
            below_target=replicas_below_target,
        )
        self._ttl = result_ttl_s
        self._mono = monotonic
        self._scripts: dict[str, Any] = {}

    def _script(self, name: str):
        """The registered script of `<name>.lua` (registered once per store)."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._r.register_script(source(name))
        return script

    def forget_stream(self, key: str) -> None:
        """Drop what this container remembers of a stream that was deleted (step modules
        that remember something per stream extend it)."""

    def _run(
        self, name: str, keys_: list[str], args: list, *, acked: bool = True, lag_ok: bool = False
    ) -> Any:
        """Run a script. With REDIS_MIN_REPLICA_ACKS set, a write the caller may report done
        (`acked`, every step script) answers only once the replicas the ack policy asks for
        hold it (store/replicated.py: EVALSHA + WAIT on one connection to the owning node; 503
        redis_replication_lag otherwise). Upkeep that reports nothing passes acked=False.
        `lag_ok`: the write still waits (so it is normally on a replica), but a shortfall
        answers the reply: a delivery's steps, which acknowledge no client write
        (docs/design.md, "A delivery is not an acknowledgement")."""
        script = self._script(name)
        if acked and self._min_acks > 0:
            return run_acked(self._r, script, keys_, args, self._ack_policy, lag_ok=lag_ok)
        return script(keys=keys_, args=args)

    def _run_on_job(
        self, name: str, job_id: str, keys_: list[str], args: list, *, lag_ok: bool = False
    ) -> ScriptReply:
        """A job-slot script's answer as [status, value, …] (strings); a layout-1 job is
        converted once (layout1.migrate) and the script run again."""
        reply = decoded(self._run(name, keys_, args, lag_ok=lag_ok))
        if reply[0] == "legacy":
            layout1.migrate(self, job_id)
            reply = decoded(self._run(name, keys_, args, lag_ok=lag_ok))
        return reply


def decoded(reply) -> ScriptReply:
    """A script's flat answer with its strings decoded; a missing (nil) value is ''."""
    return [text(x) if x is not None else "" for x in reply]
