"""A script run that is acknowledged only once replicas hold it: EVALSHA then WAIT, in one
pipeline on one connection to the node that owns the script's keys (REDIS_MIN_REPLICA_ACKS).

Why one connection: WAIT counts the replicas that acknowledged every write *this connection*
made, so it must follow the script on the same connection and the same node. A single node's
pipeline is one connection. In cluster mode the pipeline goes to the owning node's own client
(`get_node_from_key` -> `get_redis_connection`), which pins both; redirections are handled here
as the cluster client would (MOVED: patch the slot map and go to the new owner; ASK: ASKING on
the importing node), and a connection error or timeout refreshes the slot map before the one
retry, so after a failover the write goes to the promoted replica. Every retry is bounded by the
fast client's reply and connect timeouts (store/redis_client.py).

A re-sent script is safe: every script answers a re-send as it answered the first run (see each
.lua header), so a retry after a reply timeout, or a client's retry after a 503
`redis_replication_lag` (the write may have happened), changes nothing twice."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import AskError, MovedError, NoScriptError

from ..models.errors import ReplicationLag

# Attempts per write in cluster mode: the first, and one after a redirection or a refreshed
# slot map (a second redirection in a row is a cluster in flux: 503, the caller retries).
CLUSTER_ATTEMPTS = 3
REPLICATION_RETRY_AFTER_S = 1


def _fast(client: Any) -> Any:
    """The non-blocking client of a RoutedRedis (or the client itself)."""
    return getattr(client, "fast", client)


def _run_pipeline(node: Any, script: Any, keys_: list[str], args: list, wait: list[int], asking):
    """[script reply, replicas acked] from one pipeline on `node`; loads the script on NOSCRIPT
    (a node promoted or restarted since it was loaded) and sends it again."""
    for _ in range(2):
        pipe = node.pipeline(transaction=False)
        if asking:
            pipe.execute_command("ASKING")
        pipe.evalsha(script.sha, len(keys_), *keys_, *args)
        pipe.execute_command("WAIT", *wait)
        replies = pipe.execute(raise_on_error=False)
        if asking:
            replies = replies[1:]
        reply, acks = replies
        if isinstance(reply, NoScriptError):
            node.script_load(script.script)
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acks, Exception):
            raise acks
        return reply, int(acks)
    raise NoScriptError("script could not be loaded on the node")


def run_acked(
    client: Any, script: Any, keys_: list[str], args: list, min_acks: int, timeout_ms: int
) -> Any:
    """The script's reply once at least `min_acks` replicas acknowledged it; ReplicationLag
    (503) when fewer did within `timeout_ms`."""
    fast = _fast(client)
    wait = [min_acks, timeout_ms]
    if not hasattr(fast, "get_node_from_key"):
        # One node: the pool's retry re-sends the pipeline after a connection error.
        reply, acks = _run_pipeline(fast, script, keys_, args, wait, asking=False)
    else:
        reply, acks = _run_on_cluster(fast, script, keys_, args, wait)
    if acks < min_acks:
        raise ReplicationLag(
            f"the write reached {acks} of {min_acks} required replica(s) within "
            f"{timeout_ms} ms; retry shortly (the retry is safe)",
            retry_after_s=REPLICATION_RETRY_AFTER_S,
        )
    return reply


def _run_on_cluster(cluster: Any, script: Any, keys_: list[str], args: list, wait: list[int]):
    nodes = cluster.nodes_manager
    asking_node = None
    for attempt in range(CLUSTER_ATTEMPTS):
        last = attempt == CLUSTER_ATTEMPTS - 1
        target = asking_node or cluster.get_node_from_key(keys_[0])
        node = cluster.get_redis_connection(target)
        try:
            return _run_pipeline(node, script, keys_, args, wait, asking=asking_node is not None)
        except MovedError as e:
            asking_node = None
            if last:
                raise
            nodes.move_slot(e)
        except AskError as e:
            if last:
                raise
            asking_node = nodes.get_node(host=e.host, port=e.port)
            if asking_node is None:
                nodes.initialize()
        except (redis.ConnectionError, redis.TimeoutError):
            # The node died or hangs: learn the slot map again (a promoted replica owns the
            # slot once the cluster has failed over) and try once more.
            asking_node = None
            if last:
                raise
            nodes.move_node_to_end_of_cached_nodes(target.name)
            nodes.initialize(last_failed_node_name=target.name)
    raise AssertionError("unreachable")
