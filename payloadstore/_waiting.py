"""`payloadstore.wait` and `payloadstore.as_completed`: for jobs of a `Client` they block and
iterate; for jobs of an `AsyncClient` they return an awaitable and an async iterator."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._many import ALL_COMPLETED


def _client_of(jobs: list[Any]) -> Any:
    clients = {id(job.client): job.client for job in jobs}
    if len(clients) != 1:
        raise ValueError("wait/as_completed take jobs of one client; call it once per client")
    return next(iter(clients.values()))


def wait(jobs: Iterable[Any], timeout: float | None = None, return_when: str = ALL_COMPLETED):
    """(done, not_done) once all jobs (or the first: return_when=FIRST_COMPLETED) finished or
    `timeout` passed. Jobs of an AsyncClient: `await payloadstore.wait(jobs)`."""
    jobs = list(jobs)
    if not jobs:
        from .client import DoneAndPending

        return DoneAndPending(set(), set())
    return _client_of(jobs).wait(jobs, timeout, return_when)


def as_completed(jobs: Iterable[Any], timeout: float | None = None):
    """Each job as it finishes; WaitTimeout when `timeout` runs out first. Jobs of an
    AsyncClient: `async for job in payloadstore.as_completed(jobs)`."""
    jobs = list(jobs)
    if not jobs:
        return iter(())
    return _client_of(jobs).as_completed(jobs, timeout)
