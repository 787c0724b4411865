"""Faults injected into the control plane's store: a Redis connection cut at one step."""

from __future__ import annotations

import redis

from payloadstore_controlplane.store.redis_jobs import RedisJobStore


def cut_once(monkeypatch, step: str, *, after_it_ran: bool = False) -> None:
    """The next call of this store step (a RedisJobStore method) ends in a reset connection:
    before it reaches Redis, or `after_it_ran` (the command ran, its reply was lost). Later
    calls run as usual."""
    real = getattr(RedisJobStore, step)
    left = {"n": 1}

    def cut(self, *a, **kw):
        if left["n"]:
            left["n"] -= 1
            if after_it_ran:
                real(self, *a, **kw)
            raise redis.exceptions.ConnectionError("connection reset by peer")
        return real(self, *a, **kw)

    monkeypatch.setattr(RedisJobStore, step, cut)
