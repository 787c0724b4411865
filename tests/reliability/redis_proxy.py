"""A loopback TCP proxy between the gateway and redis-server that can hold script replies.

The reliability suite runs the main gateway's Redis connections through this process. While a
delay window is open (a JSON control file the suite writes), some EVALSHA/EVAL requests are
forwarded at once, so Redis runs the script, but their reply is held for longer than the control
plane's reply timeout (FAST_SOCKET_TIMEOUT_S, 1.5 s): the client gives up on a script that did run,
and re-sends it (redis-py's retry) or answers 503 (and the caller re-sends the HTTP request).

Control file (re-read when it changes):
    {"until": <epoch s>, "delay_s": 2.2, "p": 0.5, "max": 40,
     "scripts": {<sha1>: {"p": 0.3, "max": 10}, ...} | null}
(`max`: held replies in all; `scripts`: only these scripts, each with its own probability and
cap; null: every script, with `p`)
Stats file (written every 0.5 s while something changed):
    {"connections", "refused", "evalsha_seen", "delayed", "delayed_by_script",
     "resent", "resent_by_script", "window_evalsha"}
`resent` counts held requests whose very bytes come again on another connection within 5 s
(once each): the same script call re-sent by the Redis client itself (an HTTP-level retry
computes new arguments, e.g. a new timestamp, and is not counted).

Listens on 127.0.0.1 only. Run: python -m tests.reliability.redis_proxy --listen-port P
--upstream-port U --control FILE --stats FILE
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"
SCRIPT_CALL = re.compile(
    rb"\*\d+\r\n\$(?:7\r\nEVALSHA\r\n\$40\r\n([0-9a-fA-F]{40})|4\r\nEVAL\r\n)", re.IGNORECASE
)
RESENT_WITHIN_S = 5.0


class Proxy:
    def __init__(self, upstream_port: int, control: Path, stats: Path):
        self.upstream_port = upstream_port
        self.control_path = control
        self.stats_path = stats
        self.control: dict = {}
        self.control_mtime = 0.0
        self.stats: dict = {
            "connections": 0,
            "refused": 0,
            "evalsha_seen": 0,
            "window_evalsha": 0,
            "delayed": 0,
            "delayed_by_script": collections.Counter(),
            "resent": 0,
            "resent_by_script": collections.Counter(),
        }
        self.changed = True
        self.recent: dict[bytes, tuple[float, int, str]] = {}  # digest -> (t, conn, sha)
        self.next_conn = 0

    # -- control and stats -------------------------------------------------------------------

    async def housekeeping(self) -> None:
        while True:
            try:
                mtime = self.control_path.stat().st_mtime
                if mtime != self.control_mtime:
                    self.control_mtime = mtime
                    self.control = json.loads(self.control_path.read_text() or "{}")
            except (OSError, ValueError):
                pass
            if self.changed:
                self.changed = False
                tmp = self.stats_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self.stats, default=dict))
                os.replace(tmp, self.stats_path)
            now = time.monotonic()
            for digest in [d for d, (t, _, _) in self.recent.items() if now - t > RESENT_WITHIN_S]:
                del self.recent[digest]
            await asyncio.sleep(0.25)

    def inspect(self, data: bytes, conn_id: int) -> float:
        """Seconds to hold the reply to this request (0: none)."""
        match = SCRIPT_CALL.search(data, 0, 4096)
        if match is None or match.start() != 0:
            return 0.0
        sha = (match.group(1) or b"eval").decode().lower()
        self.stats["evalsha_seen"] += 1
        now = time.monotonic()
        digest = hashlib.sha1(data[:4096]).digest()
        seen = self.recent.get(digest)
        if seen is not None and seen[1] != conn_id and now - seen[0] < RESENT_WITHIN_S:
            del self.recent[digest]  # one re-send counted per held request
            self.stats["resent"] += 1
            self.stats["resent_by_script"][sha] += 1
            self.changed = True
        c = self.control
        if time.time() >= float(c.get("until") or 0):
            return 0.0
        targets = c.get("scripts")
        if targets and sha not in targets:
            return 0.0
        rule = targets[sha] if targets else {"p": c.get("p", 0)}
        rule = rule if isinstance(rule, dict) else {"p": rule}
        self.stats["window_evalsha"] += 1
        if self.stats["delayed"] >= int(c.get("max", 0)):
            return 0.0
        if self.stats["delayed_by_script"][sha] >= int(rule.get("max", 1 << 30)):
            return 0.0
        if random.random() >= float(rule.get("p", 0)):
            return 0.0
        self.stats["delayed"] += 1
        self.stats["delayed_by_script"][sha] += 1
        self.recent[digest] = (now, conn_id, sha)
        self.changed = True
        return float(c.get("delay_s", 2.0))

    # -- one client connection ---------------------------------------------------------------

    async def handle(self, reader_c: asyncio.StreamReader, writer_c: asyncio.StreamWriter) -> None:
        self.next_conn += 1
        conn_id = self.next_conn
        self.stats["connections"] += 1
        self.changed = True
        try:
            reader_u, writer_u = await asyncio.open_connection(LOOPBACK, self.upstream_port)
        except OSError:
            self.stats["refused"] += 1
            writer_c.close()
            return
        hold = {"until": 0.0}

        async def client_to_server() -> None:
            try:
                while True:
                    data = await reader_c.read(262144)
                    if not data:
                        break
                    delay = self.inspect(data, conn_id)
                    if delay:
                        hold["until"] = time.monotonic() + delay
                    writer_u.write(data)
                    await writer_u.drain()
            finally:
                writer_u.close()
                writer_c.close()

        async def server_to_client() -> None:
            try:
                while True:
                    data = await reader_u.read(262144)
                    if not data:
                        break
                    wait = hold["until"] - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    if writer_c.is_closing():
                        break
                    writer_c.write(data)
                    await writer_c.drain()
            finally:
                writer_c.close()
                writer_u.close()

        await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)


async def serve(args: argparse.Namespace) -> None:
    proxy = Proxy(args.upstream_port, args.control, args.stats)
    server = await asyncio.start_server(proxy.handle, LOOPBACK, args.listen_port)
    asyncio.get_running_loop().create_task(proxy.housekeeping())
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
