"""The route methods of both transports, in one table: `Wire` and `AsyncWire` both derive from
`Routes`, so a route added here is a method of both, with the same arguments (its builder's in
`_wire.calls`, the namespace aside) and its docstring.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, Self, overload

from . import calls
from .answers import Health, PolledJob, ServerConfig
from .parse import Call
from .protocol import AsyncTransport, Route, SyncTransport


def _config(namespace: str) -> Call[ServerConfig]:
    """`/v1/config`: the fleet's settings and the namespace's policy."""
    return calls.config()


def _health(namespace: str, details: bool = False) -> Call[Health]:
    return calls.health(details)


_health.__doc__ = calls.health.__doc__


class _Poll(Protocol):
    @overload
    def __call__(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: None = None
    ) -> PolledJob | None: ...
    @overload
    def __call__(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int
    ) -> list[PolledJob]: ...


class _AsyncPoll(Protocol):
    @overload
    def __call__(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: None = None
    ) -> Coroutine[Any, Any, PolledJob | None]: ...
    @overload
    def __call__(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int
    ) -> Coroutine[Any, Any, list[PolledJob]]: ...


class _PollRoute:
    """`poll` answers one job (or None) without `max_jobs`, a list with it: a `Route` whose
    types say so."""

    def __init__(self) -> None:
        self._route = Route(calls.poll)

    def __set_name__(self, owner: type, name: str) -> None:
        self._route.__set_name__(owner, name)

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, instance: SyncTransport, owner: type | None = None) -> _Poll: ...
    @overload
    def __get__(self, instance: AsyncTransport, owner: type | None = None) -> _AsyncPoll: ...
    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self if instance is None else self._route.__get__(instance, owner)

    def __call__(self, instance: Any, *args: Any, **kwargs: Any) -> Any:
        return self._route(instance, *args, **kwargs)


class Routes:
    """Every route of the v1 wire the SDK, the daemon helper and the CLI call."""

    config = Route(_config)
    health = Route(_health)
    presign_put = Route(calls.presign_put)
    presign_get = Route(calls.presign_get)
    presign_parts = Route(calls.presign_parts)
    enqueue_inline = Route(calls.enqueue_inline)
    enqueue_ref = Route(calls.enqueue_ref)
    blob = Route(calls.blob)
    blob_parts = Route(calls.blob_parts)
    job_status = Route(calls.job_status)
    job_result = Route(calls.job_result)
    enqueue_batch = Route(calls.enqueue_batch)
    jobs_status = Route(calls.jobs_status)
    # Every queue, page after page (one conversation: a call per page).
    queue_list = Route(calls.all_queues)
    queue_stats = Route(calls.queue_stats)
    poll = _PollRoute()
    post_result = Route(calls.post_result)
    report_failure = Route(calls.report_failure)
    heartbeat = Route(calls.heartbeat)
    leases = Route(calls.leases)
    cancel_job = Route(calls.cancel_job)
    list_jobs = Route(calls.list_jobs)
    retry_job = Route(calls.retry_job)
    throughput = Route(calls.throughput)
    job_payloads = Route(calls.job_payloads)
    redrive = Route(calls.redrive)
    purge = Route(calls.purge)
