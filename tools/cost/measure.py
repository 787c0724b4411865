"""Control-plane calls, measured on a local stack of its own (redis-server, S3 emulator, gateway):

- an idle daemon process (Daemon with concurrency 1 and 8, default wait_s, side by side on their
  own queues) for `idle_s`: polls per minute and the share of the time a poll is in flight;
- a busy daemon process (concurrency 4, four jobs running through the same window): its leases
  long-poll's calls per minute and the share of the time one is in flight, and any heartbeat;
- the calls each job makes at steady load, by route, client's and daemon's: `jobs` inline jobs,
  `s3_jobs` S3-tier jobs of 1 MiB (a single PUT) and `s3_jobs` of 100 MiB (a multipart upload),
  each through `queue.call` (enqueue-and-wait) with a Daemon serving them that fetches its next
  job with each result post (result-and-next). Each call is counted for the job it is about
  (the job in its path, else the first job its answer names); the first job, which found the
  daemon idle (delivered by a poll), is the warm-up and not counted, nor are the daemon's empty
  polls (the idle cost) and the per-process reads (config, health).
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
    from payloadstore_devstack.gateway import compile_routes, match_route

    if not _COMPILED:
        _COMPILED.extend(compile_routes(ROUTES))
    path = path[path.find("/v1/") :]
    route, _ = match_route(_COMPILED, method.upper(), path)
    return f"{route.method} {route.resource}"


_COMPILED: list = []


# A call that also waits for its job's result (enqueue ?wait=S) or fetches the daemon's next
# job (`next` on a result post or failure report) is its own line: it is priced as the route
# plus the work it adds (tools/cost/report.py).
WAITS = " ?wait"
NEXT = " +next"


def call_key(request) -> str:
    key = route_key(request.method, request.url.path)
    if "wait" in request.url.params:
        return key + WAITS
    if request.method == "POST" and b'"next"' in (request.content or b""):
        return key + NEXT
    return key


def job_of(request, response) -> str | None:
    """The job a call is about: the one in its path, else the first its answer names."""
    parts = request.url.path.split("/")
    if "jobs" in parts and parts.index("jobs") + 1 < len(parts):
        return parts[parts.index("jobs") + 1]
    if response.status_code not in (200, 201):
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if body.get("job_id"):
        return str(body["job_id"])
    jobs = body.get("jobs")
    if isinstance(jobs, list) and jobs and isinstance(jobs[0], dict):
        return jobs[0].get("job_id")
    return None


@dataclass
class CallLog:
    """httpx event hooks: each control-plane call's route, status, time in flight and job."""

    calls: list[tuple[str, int, float, float]] = field(default_factory=list)
    jobs: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hooks(self) -> dict:
        return {"request": [self._request], "response": [self._response]}

    def _request(self, request) -> None:
        request.extensions["cost_start"] = time.monotonic()

    def _response(self, response) -> None:
        request = response.request
        started = request.extensions.get("cost_start", time.monotonic())
        response.read()
        job = job_of(request, response)
        with self.lock:
            self.calls.append((call_key(request), response.status_code, started, time.monotonic()))
            self.jobs.append(job)

    def snapshot(self) -> list[tuple[str, int, float, float]]:
        with self.lock:
            return list(self.calls)

    def by_job(self) -> list[tuple[str, int, float, float, str | None]]:
        with self.lock:
            return [(*c, j) for c, j in zip(self.calls, self.jobs, strict=True)]


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


def _sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def idle_figures(calls, since: float, until: float, route: str = "") -> tuple[float, float]:
    """(polls per minute, share of the time a poll is in flight) over the polls (or the calls
    of `route`) that started and ended within [since, until], from the first one's start to
    the last one's end."""
    route = route or POLL
    polls = sorted((s, e) for key, _, s, e in calls if key == route and s >= since and e <= until)
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
    s3_calls: dict[str, float]  # the 100 MiB (multipart) job
    jobs: int
    s3_jobs: int
    s3_payload_bytes: int
    s3_fallback: str | None
    wait_s: float
    seconds: float
    # An S3-tier job of s3_single_bytes (a single PUT), measured as the others.
    s3_single_calls: dict[str, float] = field(default_factory=dict)
    s3_single_bytes: int = 0
    # What an enqueue that waits for its inline job holds the jobs function beyond a plain
    # enqueue's round trip (median, ms): the job's time on the daemon, seen by the client.
    enqueue_wait_held_ms: float = 0.0
    enqueue_wait_held_ms_s3: float = 0.0  # the same for a 100 MiB job
    # A busy daemon (BUSY_JOBS jobs in hand through the idle window): its leases long-poll.
    busy_jobs: int = 0
    busy_leases_per_min: float = 0.0
    busy_in_flight: float = 0.0
    busy_other_calls: dict[str, int] = field(default_factory=dict)


# Once per client or daemon process, not per job.
PER_PROCESS = frozenset({"GET /v1/config", "GET /v1/health"})
POLL = "POST /v1/daemon/poll"
LEASES = "POST /v1/daemon/leases"
BUSY_JOBS = 4
ENQUEUE = "POST /v1/namespaces/{ns}/queues/{queue}/jobs"


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


def per_measured_job(calls, jobs: set[str]) -> dict[str, float]:
    """Calls per job by route over the calls about `jobs` (see the module docstring)."""
    about = [c[:4] for c in calls if c[4] in jobs]
    return per_job(about, len(jobs))


def calls_of(queue, args_list: list, threads: int = 1) -> list[str]:
    """Run queue.call(arg) for each arg, from `threads` client threads at once; the job ids
    (each read from the Job the enqueue answered)."""
    ids: list[str] = []
    lock = threading.Lock()
    chunks = [args_list[i::threads] for i in range(threads)]

    def run(chunk: list) -> None:
        for arg in chunk:
            job = queue.submit_encoded(_encoded(arg), wait=20.0)
            job.result(timeout=120)
            with lock:
                ids.append(job.job_id)

    workers = [threading.Thread(target=run, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return ids


def _encoded(arg):
    from payloadstore import codec

    return codec.encode({"args": [arg], "kwargs": {}})


def median_ms(calls, key: str) -> float:
    spans = sorted((e - s) * 1000 for k, status, s, e in calls if k == key and status < 300)
    return spans[len(spans) // 2] if spans else 0.0


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
        # A busy daemon beside them: BUSY_JOBS jobs that run through the whole window.
        busy_log = CallLog()
        busy_client = make_client(stack, "daemon", busy_log)
        busy_daemon = start_daemon(busy_client, "cost-busy", BUSY_JOBS, _sleep_for)
        daemons.append((busy_daemon, busy_client))
        feeder = make_client(stack, "client", CallLog())
        busy_jobs = [feeder.queue("cost-busy").add(idle_s + 3.0) for _ in range(BUSY_JOBS)]
        while any(j.status().state == "queued" for j in busy_jobs):
            time.sleep(0.1)
        window_start = time.monotonic()
        time.sleep(idle_s)
        window_end = time.monotonic()
        busy_calls = busy_log.snapshot()
        busy_per_min, busy_share = idle_figures(busy_calls, window_start, window_end, LEASES)
        busy_other = dict(
            Counter(
                x[0] for x in busy_calls if x[0] != LEASES and window_start <= x[2] <= window_end
            )
        )
        feeder.close()
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
        # One worker: its result post waits for the next job as its poll would (the default
        # wait_s, long enough for a client's 100 MiB upload between two jobs).
        busy = Daemon(
            worker, "cost-jobs", check_health=False, progress=False, install_signal_handlers=False
        )
        busy.register(_size)
        busy_thread = threading.Thread(target=busy.run, name="cost-daemon-jobs", daemon=True)
        busy_thread.start()
        queue = client.queue("cost-jobs")
        plain = client.queue("cost-plain")
        try:
            # The warm-up job (it finds the daemon idle: a poll delivers it), then a steady
            # stream of jobs: each result post waits for the next job, which the client enqueues
            # as soon as it has its result (the post's wait is a poll's wait: the idle cost).
            # One client at a time, so the enqueue's hold is the job's own time, not time spent
            # queued behind others (that depends on how many daemons serve the queue).
            warm = set(calls_of(queue, [np.arange(8.0)]))
            ids = set(calls_of(queue, [np.arange(8.0) for _ in range(jobs)]))
            # A plain enqueue's round trip (nobody serves this queue): the baseline of the wait.
            for _ in range(10):
                plain.add(1)
            single_bytes = 1 * MIB
            single = set(calls_of(queue, [np.zeros(single_bytes - 4096, np.uint8)] * s3_jobs))
            # Just under the 100 MiB cap (MAX_PAYLOAD_BYTES) once encoded.
            payload = np.zeros(100 * MIB - 4096, dtype=np.uint8)
            fallback = None
            try:
                calls_of(queue, [payload])
            except Exception as e:  # noqa: BLE001 - any failure: measure what the SDK can send
                # An SDK without multipart uploads cannot send more than MULTIPART_THRESHOLD:
                # measure the largest single-PUT job instead, and say so (report.py prices the
                # multipart calls it lacks).
                fallback = f"{type(e).__name__}: {e}"
                threshold = Settings(payload_bucket="cost").multipart_threshold
                payload = np.zeros(threshold - MIB, dtype=np.uint8)
            big = set(calls_of(queue, [payload] * s3_jobs))
            # The daemon's last post (waiting for a next job) ends within its wait_s.
            busy.stop()
            busy_thread.join(timeout=wait_s + 5)
            settle()
            calls = client_log.by_job() + daemon_log.by_job()
            inline = per_measured_job(calls, ids - warm)
            s3_single = per_measured_job(calls, single)
            s3 = per_measured_job(calls, big)
            plain_ms = median_ms(client_log.snapshot(), ENQUEUE)
            wait_ms = median_ms([c[:4] for c in calls if c[4] in ids - warm], ENQUEUE + WAITS)
            wait_ms_s3 = median_ms([c[:4] for c in calls if c[4] in big], ENQUEUE + WAITS)
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
        s3_single_calls=s3_single,
        s3_single_bytes=single_bytes,
        enqueue_wait_held_ms=round(max(wait_ms - plain_ms, 0.0), 1),
        enqueue_wait_held_ms_s3=round(max(wait_ms_s3 - plain_ms, 0.0), 1),
        busy_jobs=BUSY_JOBS,
        busy_leases_per_min=round(busy_per_min, 2),
        busy_in_flight=round(busy_share, 3),
        busy_other_calls=busy_other,
    )
