"""Control-plane calls, measured on a local stack of its own (redis-server, S3 emulator, gateway):

- an idle daemon process (Daemon with concurrency 1 and 8, default wait_s, side by side on their
  own queues) for `idle_s`: polls per minute and the share of the time a poll is in flight;
- `jobs` inline jobs and `s3_jobs` 100 MiB jobs, queue.add + job.result with a Daemon
  (concurrency 8) serving them: the calls each job makes, by route, client's and daemon's,
  not counting the daemon's empty polls (those are the idle cost).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from payloadstore_controlplane.routes import ROUTES
from tools.localstack import local_stack

NS = "dev"
MIB = 1 << 20


def route_key(method: str, path: str) -> str:
    """'POST /v1/daemon/poll': the route a request went to (its API Gateway resource)."""
    from payloadstore.devstack.gateway import compile_routes, match_route

    if not _COMPILED:
        _COMPILED.extend(compile_routes(ROUTES))
    path = path[path.find("/v1/") :]
    route, _ = match_route(_COMPILED, method.upper(), path)
    return f"{route.method} {route.resource}"


_COMPILED: list = []


@dataclass
class CallLog:
    """httpx event hooks: each control-plane call's route, status and time in flight."""

    calls: list[tuple[str, int, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hooks(self) -> dict:
        return {"request": [self._request], "response": [self._response]}

    def _request(self, request) -> None:
        request.extensions["cost_start"] = time.monotonic()

    def _response(self, response) -> None:
        request = response.request
        started = request.extensions.get("cost_start", time.monotonic())
        with self.lock:
            self.calls.append(
                (
                    route_key(request.method, request.url.path),
                    response.status_code,
                    started,
                    time.monotonic(),
                )
            )

    def snapshot(self) -> list[tuple[str, int, float, float]]:
        with self.lock:
            return list(self.calls)


def make_client(stack, role: str, log: CallLog):
    import httpx

    from payloadstore import Client

    token = stack.tokens[NS][f"{role}_token"]
    http = httpx.Client(timeout=httpx.Timeout(90.0, connect=10.0), event_hooks=log.hooks())
    return Client(stack.endpoint, token, NS, http=http, progress=False)


def start_daemon(client, queue: str, concurrency: int, fn):
    from payloadstore import Daemon

    daemon = Daemon(
        client,
        queue,
        concurrency=concurrency,
        check_health=False,
        progress=False,
        install_signal_handlers=False,
    )
    daemon.register(fn)
    thread = threading.Thread(target=daemon.run, name=f"cost-daemon-{queue}", daemon=True)
    thread.start()
    return daemon, thread


def _size(value) -> int:
    return len(value)


def idle_figures(calls, since: float, until: float) -> tuple[float, float]:
    """(polls per minute, share of the time a poll is in flight) over the polls that started
    and ended within [since, until], from the first one's start to the last one's end."""
    polls = sorted((s, e) for key, _, s, e in calls if key == POLL and s >= since and e <= until)
    if not polls:
        return 0.0, 0.0
    start, stop = polls[0][0], max(e for _, e in polls)
    held, end = 0.0, start
    for s, e in polls:
        if e > end:
            held += e - max(s, end)
            end = e
    return len(polls) * 60 / (stop - start), held / (stop - start)


@dataclass
class Measured:
    idle_s: float
    idle_polls_per_min: dict[int, float]
    idle_in_flight: dict[int, float]
    idle_other_calls: dict[int, dict[str, int]]
    inline_calls: dict[str, float]
    s3_calls: dict[str, float]
    jobs: int
    s3_jobs: int
    s3_payload_bytes: int
    s3_fallback: str | None
    wait_s: float
    seconds: float


# Once per client or daemon process, not per job.
PER_PROCESS = frozenset({"GET /v1/config", "GET /v1/health"})
POLL = "POST /v1/daemon/poll"


def settle() -> None:
    """A client can read a result before the daemon's call that posted it has returned: give
    the daemon's last answers time to arrive before counting."""
    time.sleep(1.0)


def per_job(calls, n: int) -> dict[str, float]:
    """Calls per job by route; the daemon's empty polls (204) are the idle cost and the config
    and health reads are per process, so neither is counted."""
    counted = Counter(
        key
        for key, status, _, _ in calls
        if not (key == POLL and status == 204) and key not in PER_PROCESS
    )
    return {key: round(v / n, 2) for key, v in sorted(counted.items())}


def measure(idle_s: float = 60.0, jobs: int = 20, s3_jobs: int = 3) -> Measured:
    import numpy as np

    from payloadstore import Daemon
    from payloadstore_controlplane.models.settings import Settings

    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="cost-measure-") as tmp,
        local_stack(Path(tmp)) as stack,
    ):
        idle_logs = {1: CallLog(), 8: CallLog()}
        daemons = []
        for c, log in idle_logs.items():
            client = make_client(stack, "daemon", log)
            daemons.append((start_daemon(client, f"cost-idle-{c}", c, _size), client))
        window_start = time.monotonic()
        time.sleep(idle_s)
        window_end = time.monotonic()
        polls, held, other = {}, {}, {}
        for c, log in idle_logs.items():
            calls = log.snapshot()
            per_min, share = idle_figures(calls, window_start, window_end)
            polls[c], held[c] = round(per_min, 2), round(share, 3)
            other[c] = dict(
                Counter(x[0] for x in calls if x[0] != POLL and window_start <= x[2] <= window_end)
            )
        wait_s = Daemon.__init__.__kwdefaults__["wait_s"]

        client_log, daemon_log = CallLog(), CallLog()
        client = make_client(stack, "client", client_log)
        worker = make_client(stack, "daemon", daemon_log)
        busy, busy_thread = start_daemon(worker, "cost-jobs", 8, _size)
        queue = client.queue("cost-jobs")
        try:
            mark_c, mark_d = len(client_log.snapshot()), len(daemon_log.snapshot())
            for handle in [queue.add(np.arange(8.0)) for _ in range(jobs)]:
                handle.result(timeout=60)
            settle()
            inline = per_job(client_log.snapshot()[mark_c:] + daemon_log.snapshot()[mark_d:], jobs)
            # Just under the 100 MiB cap (MAX_PAYLOAD_BYTES) once encoded.
            payload = np.zeros(100 * MIB - 4096, dtype=np.uint8)
            fallback = None
            try:
                queue.add(payload).result(timeout=120)
            except Exception as e:  # noqa: BLE001 - any failure: measure what the SDK can send
                # An SDK without multipart uploads cannot send more than MULTIPART_THRESHOLD:
                # measure the largest single-PUT job instead, and say so (report.py prices the
                # multipart calls it lacks).
                fallback = f"{type(e).__name__}: {e}"
                threshold = Settings(payload_bucket="cost").multipart_threshold
                payload = np.zeros(threshold - MIB, dtype=np.uint8)
            mark_c, mark_d = len(client_log.snapshot()), len(daemon_log.snapshot())
            for _ in range(s3_jobs):
                queue.add(payload).result(timeout=120)
            settle()
            s3 = per_job(client_log.snapshot()[mark_c:] + daemon_log.snapshot()[mark_d:], s3_jobs)
        finally:
            # Each daemon ends once its waiting poll answers (at most wait_s).
            threads = [busy_thread, *(t for (_, t), _ in daemons)]
            busy.stop()
            for (daemon, _), _ in daemons:
                daemon.stop()
            for thread in threads:
                thread.join(timeout=wait_s + 5)
            for c in (client, worker, *(c for _, c in daemons)):
                c.close()
    return Measured(
        idle_s=idle_s,
        idle_polls_per_min=polls,
        idle_in_flight=held,
        idle_other_calls=other,
        inline_calls=inline,
        s3_calls=s3,
        jobs=jobs,
        s3_jobs=s3_jobs,
        s3_payload_bytes=int(payload.nbytes),
        s3_fallback=fallback,
        wait_s=wait_s,
        seconds=round(time.monotonic() - started, 1),
    )
