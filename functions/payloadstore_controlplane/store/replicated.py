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

How many replicas a write waits for (REDIS_REPLICA_ACK_POLICY, docs/design.md "Acknowledged
means replicated"):

- `connected` (the default): min(REDIS_MIN_REPLICA_ACKS, the node's online replicas). A replica
  that is connected but slow (stalled, lagging) is still waited for: its shortfall is a 503
  `redis_replication_lag`, because a failover now could lose the write. A replica the primary no
  longer has (dead, being replaced, still in its first full sync) is not: the shard keeps taking
  writes on one copy, and every container that sees it reports `ReplicaAcksBelowTarget` (metric
  and alarm) until the replica is back. Without this a shard whose only replica was promoted
  answered 503 to every write until a new replica had synced (minutes on ElastiCache; forever
  on a local cluster whose old primary never returns).
- `strict`: always REDIS_MIN_REPLICA_ACKS; such a shard answers 503 until it has them.

The online count comes from `INFO replication` on the write's node (replicas in state `online`),
cached per node for REPLICA_COUNT_TTL_S: a healthy shard never pays for it (a WAIT that got
its acknowledgements renews the cache), a shard below target reads it once per
REPLICA_COUNT_TTL_S per container, and a WAIT that fell short reads it again at once before
answering 503 (the replica may just have gone).

A re-sent script is safe: every script answers a re-send as it answered the first run (see each
.lua header), so a retry after a reply timeout, or a client's retry after a 503
`redis_replication_lag` (the write may have happened), changes nothing twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import AskError, MovedError, NoScriptError

from ..models.errors import ReplicationLag

# Attempts per write in cluster mode: the first, and one after a redirection or a refreshed
# slot map (a second redirection in a row is a cluster in flux: 503, the caller retries).
CLUSTER_ATTEMPTS = 3
REPLICATION_RETRY_AFTER_S = 1
# How long a node's count of online replicas is trusted (see the module's docstring).
REPLICA_COUNT_TTL_S = 1.0

# node name -> (monotonic time the count expires, online replicas): per container.
_online: dict[str, tuple[float, int]] = {}
_online_lock = threading.Lock()


@dataclass(frozen=True)
class AckPolicy:
    """What a replicated write waits for.

    `min_acks`: REDIS_MIN_REPLICA_ACKS. `strict`: wait for all of them even when the node has
    fewer online replicas (REDIS_REPLICA_ACK_POLICY=strict). `below_target(node, online,
    min_acks)` is called when a node is found with fewer online replicas than `min_acks` (at
    most once per REPLICA_COUNT_TTL_S per node): the caller's metric and log line."""

    min_acks: int
    timeout_ms: int
    strict: bool = False
    below_target: Callable[[str, int, int], None] | None = None
    clock: Callable[[], float] = time.monotonic


def forget_replica_counts() -> None:
    """Drop every cached count (tests that rebuild a cluster on the same ports)."""
    with _online_lock:
        _online.clear()


def online_replicas(node: Any) -> int:
    """Replicas of `node` in state `online` (INFO replication): a replica in its first full
    sync, or one the primary has dropped, acknowledges nothing and is not counted; a stalled
    one is counted until the primary drops it (repl-timeout)."""
    info = node.info("replication")
    return sum(
        1
        for name, value in info.items()
        if str(name).startswith("slave")
        and isinstance(value, dict)
        and str(value.get("state", "")) == "online"
    )


def _refresh(node: Any, name: str, policy: AckPolicy) -> int:
    count = online_replicas(node)
    with _online_lock:
        _online[name] = (policy.clock() + REPLICA_COUNT_TTL_S, count)
    if count < policy.min_acks and policy.below_target is not None:
        policy.below_target(name, count, policy.min_acks)
    return count


def _target(node: Any, name: str, policy: AckPolicy) -> int:
    """How many acknowledgements this write waits for on `node`."""
    if policy.strict:
        return policy.min_acks
    cached = _online.get(name)
    if cached is None:
        # Never seen: expect the full count; a shortfall reads the truth before answering.
        return policy.min_acks
    expires, count = cached
    if count < policy.min_acks and policy.clock() >= expires:
        # Below target at the last look: look again before deciding (a replica may be back).
        count = _refresh(node, name, policy)
    return min(policy.min_acks, count)


def _node_name(client: Any) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


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


def _run_acked_on(
    node: Any,
    name: str,
    script: Any,
    keys_: list[str],
    args: list,
    policy: AckPolicy,
    asking: bool,
    lag_ok: bool,
) -> Any:
    """The script's reply on `node` once its target of replicas acknowledged it."""
    target = _target(node, name, policy)
    reply, acks = _run_pipeline(
        node, script, keys_, args, [target, policy.timeout_ms], asking=asking
    )
    if acks >= policy.min_acks:
        # As many online as asked for: renew what this container knows of the node.
        with _online_lock:
            _online[name] = (policy.clock() + REPLICA_COUNT_TTL_S, acks)
        return reply
    if acks < target and not policy.strict:
        # Short of what the node had a moment ago: is the replica slow, or gone?
        target = min(policy.min_acks, _refresh(node, name, policy))
    if acks >= target:
        return reply
    if lag_ok:
        return reply
    raise ReplicationLag(
        f"the write reached {acks} of {target} required replica(s) within "
        f"{policy.timeout_ms} ms; retry shortly (the retry is safe)",
        retry_after_s=REPLICATION_RETRY_AFTER_S,
    )


def run_acked(
    client: Any,
    script: Any,
    keys_: list[str],
    args: list,
    policy: AckPolicy,
    *,
    lag_ok: bool = False,
) -> Any:
    """The script's reply once the replicas the policy asks for acknowledged it; ReplicationLag
    (503) when fewer did within its timeout. `lag_ok`: a write nobody is told is done (a
    delivery) answers its reply even then (it was applied on the primary)."""
    fast = _fast(client)
    if not hasattr(fast, "get_node_from_key"):
        # One node: the pool's retry re-sends the pipeline after a connection error.
        return _run_acked_on(
            fast, _node_name(fast), script, keys_, args, policy, asking=False, lag_ok=lag_ok
        )
    return _run_on_cluster(fast, script, keys_, args, policy, lag_ok)


def _fast(client: Any) -> Any:
    """The non-blocking client of a RoutedRedis (or the client itself)."""
    return getattr(client, "fast", client)


def _run_on_cluster(
    cluster: Any, script: Any, keys_: list[str], args: list, policy: AckPolicy, lag_ok: bool
):
    nodes = cluster.nodes_manager
    asking_node = None
    for attempt in range(CLUSTER_ATTEMPTS):
        last = attempt == CLUSTER_ATTEMPTS - 1
        target = asking_node or cluster.get_node_from_key(keys_[0])
        node = cluster.get_redis_connection(target)
        try:
            return _run_acked_on(
                node,
                target.name,
                script,
                keys_,
                args,
                policy,
                asking=asking_node is not None,
                lag_ok=lag_ok,
            )
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
