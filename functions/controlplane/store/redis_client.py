"""The Redis client of this container: created once, reused by every invocation."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import redis
from redis.connection import Connection, PythonRespSerializer, SSLConnection


class _PythonPackerMixin:
    """hiredis parses replies 3-6x faster, but its command packer made a 256 KiB XADD ~3x slower
    (page faults on a fresh buffer; see bench/RESULTS.md). Keep hiredis's parser, use redis-py's
    packer, which sends large values as their own buffers instead of copying them."""

    def _construct_command_packer(self, packer):
        if packer is not None:
            return packer
        return PythonRespSerializer(self._buffer_cutoff, self.encoder.encode)


class PayloadConnection(_PythonPackerMixin, Connection):
    pass


class PayloadSSLConnection(_PythonPackerMixin, SSLConnection):
    pass


def make_redis(
    url: str,
    *,
    cluster: bool = False,
    password: str | None = None,
    max_block_s: float = 25.0,
):
    """A client whose socket timeout outlasts the longest blocking command we send."""
    common: dict[str, Any] = {
        "socket_timeout": max_block_s + 5.0,
        "socket_connect_timeout": 2.0,
        "health_check_interval": 30,
        "decode_responses": False,
    }
    if password:
        common["password"] = password
    tls = url.startswith("rediss://")
    if cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(
            url, connection_class=PayloadSSLConnection if tls else PayloadConnection, **common
        )
    pool = redis.ConnectionPool.from_url(
        url,
        connection_class=PayloadSSLConnection if tls else PayloadConnection,
        # Blocking long-polls hold a connection each; bound the pool so a flood cannot exhaust Redis.
        max_connections=64,
        **common,
    )
    return redis.Redis(connection_pool=pool)


@lru_cache(maxsize=4)
def cached_redis(url: str, cluster: bool, password: str | None, max_block_s: float):
    return make_redis(url, cluster=cluster, password=password, max_block_s=max_block_s)
