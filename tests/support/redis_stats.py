"""What a test reads of Redis's own figures, on one server or on every primary of a cluster."""

from __future__ import annotations

import redis


def command_stats(client: redis.Redis | redis.RedisCluster) -> list[dict]:
    """INFO commandstats of each primary the client talks to: the server's, or one per primary of
    a cluster (a script runs on its keys' primary; replicas replay its effects, not the call)."""
    if isinstance(client, redis.RedisCluster):
        per_node = client.info("commandstats", target_nodes=redis.RedisCluster.PRIMARIES)
        return list(per_node.values())
    return [client.info("commandstats")]


def key_count(client: redis.Redis | redis.RedisCluster) -> int:
    """Keys in the whole database: DBSIZE of the server, or summed over a cluster's primaries (a
    cluster client asks one node only unless told)."""
    if isinstance(client, redis.RedisCluster):
        # redis-py sums the primaries' answers
        return int(client.dbsize(target_nodes=redis.RedisCluster.PRIMARIES))
    return int(client.dbsize())
