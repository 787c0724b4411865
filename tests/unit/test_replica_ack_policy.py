"""The ack policy's arithmetic (store/replicated.py) against a recording node: how many
replicas a write waits for, when INFO replication is read, and what a shortfall answers. The
behaviour on real nodes is tests/integration/test_replica_acks.py's (stalled replicas, a primary
killed and never restarted, the production shape)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from payloadstore_controlplane.models.errors import ReplicationLag
from payloadstore_controlplane.store.replicated import (
    REPLICA_COUNT_TTL_S,
    AckPolicy,
    forget_replica_counts,
    run_acked,
)

SCRIPT = SimpleNamespace(sha="0" * 40, script="return 1")


class Node:
    """A primary with `online` replicas of which `acking` acknowledge in time."""

    def __init__(self, online: int, acking: int | None = None):
        self.online = online
        self.acking = online if acking is None else acking
        self.connection_pool = SimpleNamespace(connection_kwargs={"host": "10.0.0.1", "port": 1})
        self.info_calls = 0
        self.waited_for: list[int] = []

    def info(self, section):
        assert section == "replication"
        self.info_calls += 1
        replicas = {f"slave{i}": {"state": "online", "lag": 0} for i in range(self.online)}
        return {"role": "master", "connected_slaves": self.online, **replicas}

    def pipeline(self, transaction=False):
        node, commands = self, []

        class Pipe:
            def evalsha(self, *args):
                commands.append("evalsha")

            def execute_command(self, name, *args):
                if name == "WAIT":
                    node.waited_for.append(int(args[0]))

            def execute(self, raise_on_error=True):
                return ["ok", node.acking]

        return Pipe()


@pytest.fixture
def clock():
    forget_replica_counts()
    now = [1000.0]
    yield now
    forget_replica_counts()


def policy(clock, min_acks=1, strict=False, seen=None):
    return AckPolicy(
        min_acks=min_acks,
        timeout_ms=100,
        strict=strict,
        below_target=(lambda *a: seen.append(a)) if seen is not None else None,
        clock=lambda: clock[0],
    )


def test_a_healthy_shard_never_pays_for_the_count(clock):
    # Given a primary whose replica acknowledges
    node = Node(online=1)
    for _ in range(50):
        clock[0] += 0.3
        # When writes come, over 15 s
        assert run_acked(node, SCRIPT, ["k"], [], policy(clock)) == "ok"
    # Then each waited for the one replica, and INFO was never read
    assert set(node.waited_for) == {1} and node.info_calls == 0


def test_a_shard_without_its_replica_writes_on_and_looks_again_once_a_second(clock):
    # Given a primary whose replica is gone (promoted away, dead, or still syncing)
    node, seen = Node(online=0), []
    # When a first write falls short, the node is asked what it has before answering
    assert run_acked(node, SCRIPT, ["k"], [], policy(clock, seen=seen)) == "ok"
    assert node.waited_for == [1] and node.info_calls == 1
    assert seen == [("10.0.0.1:1", 0, 1)]  # the metric and the log line
    # Then the next writes within the second wait for nobody and ask nothing
    for _ in range(5):
        clock[0] += 0.1
        assert run_acked(node, SCRIPT, ["k"], [], policy(clock, seen=seen)) == "ok"
    assert node.waited_for[1:] == [0] * 5 and node.info_calls == 1
    # And a second on, the count is read again (once), and the replica waited for once back
    clock[0] += REPLICA_COUNT_TTL_S
    node.online = node.acking = 1
    assert run_acked(node, SCRIPT, ["k"], [], policy(clock, seen=seen)) == "ok"
    assert node.waited_for[-1] == 1 and node.info_calls == 2 and len(seen) == 1


def test_a_connected_but_lagging_replica_is_a_503_not_a_write_on_one_copy(clock):
    # Given a primary whose replica is online but does not acknowledge in time (stalled)
    node = Node(online=1, acking=0)
    # When a write falls short, the count says the replica is there: 503, retry later
    with pytest.raises(ReplicationLag, match="reached 0 of 1"):
        run_acked(node, SCRIPT, ["k"], [], policy(clock))
    assert node.info_calls == 1
    # And a delivery (lag_ok) answers what the primary applied
    assert run_acked(node, SCRIPT, ["k"], [], policy(clock), lag_ok=True) == "ok"


def test_strict_waits_for_the_target_whatever_the_node_has(clock):
    node = Node(online=0)
    with pytest.raises(ReplicationLag):
        run_acked(node, SCRIPT, ["k"], [], policy(clock, strict=True))
    assert node.waited_for == [1] and node.info_calls == 0


def test_two_asked_of_a_shard_left_with_one_wait_for_that_one(clock):
    # Given REDIS_MIN_REPLICA_ACKS=2 and a shard that lost one of its two replicas
    node, seen = Node(online=1), []
    assert run_acked(node, SCRIPT, ["k"], [], policy(clock, min_acks=2, seen=seen)) == "ok"
    clock[0] += 0.1
    assert run_acked(node, SCRIPT, ["k"], [], policy(clock, min_acks=2, seen=seen)) == "ok"
    # Then it waits for the one it has, and says it is below target
    assert node.waited_for == [2, 1] and seen == [("10.0.0.1:1", 1, 2)]
    # And if that one stalls, the write is refused
    node.acking = 0
    with pytest.raises(ReplicationLag):
        run_acked(node, SCRIPT, ["k"], [], policy(clock, min_acks=2, seen=seen))
