"""One operation at a time, paused between its steps: the explorer's scheduler.

Every operation (a client's enqueue, a daemon's poll, an operator's purge, ...) runs the real
handlers in a thread of its own, but only one thread runs at a time. Each thread parks itself
before every call that leaves the process (a Redis command, script or pipeline; an S3 request;
a presigned upload), and runs on only when the explorer resumes it: so one operation can be
held between two of its steps while other operations run whole, in an order the explorer
chose (from its seed) and can replay.

The hooks sit on redis-py's `execute_command` (single node and cluster), its pipelines'
`execute`, and the control plane's S3 calls (`S3Objects`); a thread that is not an operation of
the explorer (its invariant checks, setup) passes through untouched.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

JOB_ID = re.compile(rb"[0-9A-HJKMNP-TV-Z]{26}")
_local = threading.local()
# How long one step may take before the explorer calls the operation stuck (a deadlock on a
# lock held across a paused call would show here, with the thread's stack).
STEP_TIMEOUT_S = 30.0


class Stuck(RuntimeError):
    pass


class Op:
    """One operation in flight: its thread, where it is parked, the jobs its calls named."""

    def __init__(self, label: str, name: str, fn: Callable[[], Any]):
        self.label, self.name, self.fn = label, name, fn
        self.state = "new"  # new | running | parked | done
        self.at = ""  # the call it is parked before
        self.calls = 0  # external calls made so far
        self.touched: set[str] = set()
        self.error: BaseException | None = None
        self.error_tb = ""
        self.thread: threading.Thread | None = None
        self.last_args: Any = None  # the arguments of the call it is parked before
        # The connection of the call it is parked before is cut once the command has run:
        # Redis did the work, its reply never comes (a connection killed mid-command).
        self.cut = False

    def note(self, value: Any) -> None:
        """Remember every job id a call named or answered (its jobs are mid-change)."""
        for raw in _flatten(value):
            for m in JOB_ID.findall(raw):
                self.touched.add(m.decode())


def _flatten(value: Any, depth: int = 0):
    if depth > 6:
        return
    if isinstance(value, bytes | bytearray | memoryview):
        yield bytes(value)
    elif isinstance(value, str):
        yield value.encode("utf-8", "replace")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _flatten(k, depth + 1)
            yield from _flatten(v, depth + 1)
    elif isinstance(value, list | tuple | set):
        for v in value:
            yield from _flatten(v, depth + 1)


class Scheduler:
    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.ops: list[Op] = []  # in flight, in start order

    # -- inside an operation's thread ---------------------------------------------------------
    def checkpoint(self, what: str, args: Any = None) -> Op | None:
        op: Op | None = getattr(_local, "op", None)
        if op is None or getattr(_local, "quiet", False):
            return None
        op.last_args = args
        if args is not None:
            op.note(args)
        with self.cv:
            op.state, op.at = "parked", what
            self.cv.notify_all()
            while op.state == "parked":
                self.cv.wait()
        op.calls += 1
        return op

    # -- the explorer's side ---------------------------------------------------------------------
    def start(self, op: Op) -> None:
        def run() -> None:
            _local.op = op
            try:
                op.fn()
            except BaseException as e:  # noqa: BLE001 - reported by the explorer
                op.error, op.error_tb = e, traceback.format_exc()
            finally:
                with self.cv:
                    op.state = "done"
                    self.cv.notify_all()

        op.thread = threading.Thread(target=run, name=f"op-{op.label}", daemon=True)
        self.ops.append(op)
        with self.cv:
            op.state = "running"
        op.thread.start()
        self._wait(op)

    def resume(self, op: Op) -> None:
        with self.cv:
            assert op.state == "parked", op.state
            op.state = "running"
            self.cv.notify_all()
        self._wait(op)

    def _wait(self, op: Op) -> None:
        with self.cv:
            ok = self.cv.wait_for(lambda: op.state in ("parked", "done"), STEP_TIMEOUT_S)
        if not ok:
            frame = sys._current_frames().get(op.thread.ident or 0)
            stack = "".join(traceback.format_stack(frame)) if frame else "?"
            raise Stuck(f"operation {op.label} {op.name} did not park or end:\n{stack}")
        if op.state == "done":
            self.ops.remove(op)


@contextlib.contextmanager
def unhooked():
    """The explorer's own reads from inside an operation's thread: not a step of it."""
    _local.quiet = True
    try:
        yield
    finally:
        _local.quiet = False


SCHEDULER = Scheduler()
_installed = False


def _cut_after(op: Op | None) -> None:
    if op is not None and op.cut:
        import redis

        op.cut = False
        raise redis.ConnectionError("Connection closed by server.")


def install_hooks() -> None:
    """Park operation threads before every Redis and S3 call of this process (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    import redis
    import redis.client
    import redis.cluster

    from payloadstore_controlplane.store import s3_objects

    def hook_command(cls: type) -> None:
        original = cls.execute_command

        def execute_command(self, *args, **kwargs):
            op = SCHEDULER.checkpoint(f"redis {_name(args)}", args)
            reply = original(self, *args, **kwargs)
            if op is not None:
                op.note(reply)
            _cut_after(op)
            return reply

        cls.execute_command = execute_command

    def hook_pipeline(cls: type) -> None:
        original = cls.execute

        def execute(self, *args, **kwargs):
            stack = [getattr(c, "args", c) for c in getattr(self, "command_stack", [])]
            names = ",".join(_name(c[0] if isinstance(c, tuple) and c else c) for c in stack)
            op = SCHEDULER.checkpoint(f"redis pipeline[{names}]", stack)
            reply = original(self, *args, **kwargs)
            if op is not None:
                op.note(reply)
            _cut_after(op)
            return reply

        cls.execute = execute

    hook_command(redis.Redis)
    hook_command(redis.cluster.RedisCluster)
    hook_pipeline(redis.client.Pipeline)
    hook_pipeline(redis.cluster.ClusterPipeline)
    for method in (
        "create_multipart",
        "list_parts",
        "complete_multipart",
        "abort_multipart",
        "head",
        "copy_onto_itself",
    ):
        _hook_s3(s3_objects.S3Objects, method)


def _hook_s3(cls: type, method: str) -> None:
    original = getattr(cls, method)

    def call(self, *args, **kwargs):
        SCHEDULER.checkpoint(f"s3 {method}", args)
        return original(self, *args, **kwargs)

    call.__name__ = method
    setattr(cls, method, call)


def _name(args: Any) -> str:
    if isinstance(args, tuple | list):
        args = args[0] if args else ""
    if isinstance(args, bytes):
        args = args.decode("utf-8", "replace")
    return str(args).split(" ")[0].lower()
