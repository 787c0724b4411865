"""`make demo` / `make smoke`: one small job and one 8 MiB job through a daemon running a real
function, with the bytes each one moved through the control plane and straight to S3.

- `make demo` uses the stack `make dev` is running (its `.devstack.json`), or starts one of its
  own for the length of the demo (in a temporary state dir) when none answers.
- `make smoke ENDPOINT=... TOKEN=... DAEMON_TOKEN=...` runs the same round trip against a
  deployed API and exits non-zero when any step or check fails.

Bytes are counted on the wire (request and response bodies) by wrapping the SDK's two HTTP
clients: the control-plane one and the one for presigned S3 URLs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

SMALL_BYTES = 1024
LARGE_BYTES = 8 * 1024 * 1024
INVERT = bytes(range(255, -1, -1))


def digest_and_invert(blob: bytes) -> dict:
    """The daemon's function: a digest of the input and the input with every bit flipped."""
    data = bytes(blob)
    return {"sha256": hashlib.sha256(data).hexdigest(), "inverted": data.translate(INVERT)}


class ByteCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.received = 0

    def add(self, sent: int = 0, received: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.received += received

    @property
    def total(self) -> int:
        return self.sent + self.received


class _CountingStream(httpx.SyncByteStream):
    def __init__(self, inner, counter: ByteCounter, direction: str):
        self._inner = inner
        self._counter = counter
        self._direction = direction

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._counter.add(**{self._direction: len(chunk)})
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close:
            close()


class CountingTransport(httpx.BaseTransport):
    """Counts body bytes both ways, as they cross the socket."""

    def __init__(self, counter: ByteCounter, inner: httpx.BaseTransport | None = None):
        self.counter = counter
        self._inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.stream = _CountingStream(request.stream, self.counter, "sent")
        response = self._inner.handle_request(request)
        response.stream = _CountingStream(response.stream, self.counter, "received")
        return response

    def close(self) -> None:
        self._inner.close()


@dataclass
class JobReport:
    name: str
    size: int
    args_tier: str
    result_tier: str
    cp_bytes: int
    s3_bytes: int
    wall_s: float


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class DemoFailed(RuntimeError):
    pass


def run_round_trip(
    endpoint: str,
    client_token: str,
    daemon_token: str,
    namespace: str,
    queue: str | None = None,
    sizes: tuple[tuple[str, int], ...] | None = None,
) -> list[JobReport]:
    """Enqueue each payload, let a daemon run `digest_and_invert`, fetch and check the result."""
    from payloadstore import Client, Daemon

    queue = queue or f"demo-{uuid.uuid4().hex[:8]}"
    sizes = sizes or (("small", SMALL_BYTES), ("8 MiB", LARGE_BYTES))
    cp, s3 = ByteCounter(), ByteCounter()

    def http(counter: ByteCounter, read_s: float) -> httpx.Client:
        return httpx.Client(
            transport=CountingTransport(counter), timeout=httpx.Timeout(read_s, connect=10.0)
        )

    client = Client(
        endpoint, client_token, namespace, http=http(cp, 60), s3_http=http(s3, 300), progress=False
    )
    worker = Client(
        endpoint, daemon_token, namespace, http=http(cp, 60), s3_http=http(s3, 300), progress=False
    )
    daemon = Daemon(worker, queue, wait_s=2.0, install_signal_handlers=False, progress=False)
    daemon_error: list[BaseException] = []

    def run_daemon() -> None:
        try:
            daemon.run(digest_and_invert)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            daemon_error.append(e)

    thread = threading.Thread(target=run_daemon, name="demo-daemon", daemon=True)
    thread.start()
    reports: list[JobReport] = []
    try:
        for name, size in sizes:
            payload = os.urandom(size)
            cp_before, s3_before = cp.total, s3.total
            started = time.perf_counter()
            job = client.queue(queue).add(payload)
            value = job.result(timeout=120)
            wall = time.perf_counter() - started
            if daemon_error:
                raise DemoFailed(f"daemon stopped: {daemon_error[0]!r}") from daemon_error[0]
            if value["sha256"] != hashlib.sha256(payload).hexdigest() or bytes(
                value["inverted"]
            ) != payload.translate(INVERT):
                raise DemoFailed(
                    f"job {job.job_id}: the result does not match what the function computes"
                )
            status = job.status()
            result_tier = "s3" if (status.result_ref or {}).get("kind") == "s3" else "inline"
            reports.append(
                JobReport(
                    name,
                    size,
                    job.tier or status.tier or "?",
                    result_tier,
                    cp.total - cp_before,
                    s3.total - s3_before,
                    wall,
                )
            )
    finally:
        daemon.stop()
        thread.join(10)
        client.close()
        worker.close()
    return reports


def format_reports(reports: list[JobReport], endpoint: str) -> str:
    lines = [
        f"endpoint {endpoint}",
        f"{'job':<8} {'args':>9} {'args tier':>9} {'result tier':>11} {'through CP':>11} {'straight to S3':>14} {'wall':>8}",
    ]
    for r in reports:
        lines.append(
            f"{r.name:<8} {human(r.size):>9} {r.args_tier:>9} {r.result_tier:>11} {human(r.cp_bytes):>11} "
            f"{human(r.s3_bytes):>14} {r.wall_s * 1000:>6.0f} ms"
        )
    lines.append(
        "through CP: request+response bodies to the API (incl. the daemon's polls); "
        "straight to S3: bodies sent to/read from presigned URLs"
    )
    return "\n".join(lines)


def _running_stack(state_file: Path) -> dict | None:
    try:
        state = json.loads(state_file.read_text())
        httpx.get(f"{state['endpoint']}/v1/health", timeout=3.0)
        return state
    except (OSError, ValueError, KeyError, httpx.HTTPError):
        return None


class TemporaryStack:
    """`python -m payloadstore_devstack` in a temporary state dir on a free port: the handlers'
    own output goes to its log file, not into the demo's figures."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="payloadstore-demo-"))
        self.state_file = self.dir / "devstack.json"
        self.proc: subprocess.Popen | None = None
        self.state: dict = {}

    def start(self, timeout_s: float = 90.0) -> TemporaryStack:
        from payloadstore_devstack.services import free_port

        env = {
            **os.environ,
            "PAYLOADSTORE_PORT": str(free_port()),
            "PAYLOADSTORE_STATE_DIR": str(self.dir / "state"),
            "PAYLOADSTORE_STATE_FILE": str(self.state_file),
        }
        log = open(self.dir / "devstack.log", "ab")  # noqa: SIM115 - the child writes it until stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "payloadstore_devstack"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while not self.state_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DemoFailed(f"the local stack did not start; see {self.dir / 'devstack.log'}")
            time.sleep(0.1)
        self.state = json.loads(self.state_file.read_text())
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def stack_target(
    parser: argparse.ArgumentParser, args: argparse.Namespace, starting_note: str
) -> tuple[str, str, str, TemporaryStack | None]:
    """(endpoint, client token, daemon token, stack to stop) for --endpoint, else the running
    local stack, else a temporary one started here (the caller stops it when done)."""
    if args.endpoint:
        if not (args.token and args.daemon_token):
            parser.error("--endpoint needs --token (client) and --daemon-token")
        return args.endpoint, args.token, args.daemon_token, None
    stack = None
    state = _running_stack(args.state_file)
    if state is None:
        print(f"no running stack at {args.state_file}: {starting_note}", flush=True)
        stack = TemporaryStack().start()
        state = stack.state
    try:
        tokens = state["namespaces"][args.namespace]
        return state["endpoint"], tokens["client_token"], tokens["daemon_token"], stack
    except BaseException:
        if stack is not None:
            stack.stop()
        raise


def add_target_arguments(parser: argparse.ArgumentParser, endpoint_help: str) -> None:
    """--endpoint, --token, --daemon-token (tokens from the environment by default: not in
    `ps`) and --namespace: which stack `stack_target` reaches (demo and smoke alike)."""
    parser.add_argument("--endpoint", help=endpoint_help)
    parser.add_argument(
        "--token",
        default=os.environ.get("PAYLOADSTORE_SMOKE_TOKEN"),
        help="client token for --endpoint (or PAYLOADSTORE_SMOKE_TOKEN)",
    )
    parser.add_argument(
        "--daemon-token",
        default=os.environ.get("PAYLOADSTORE_SMOKE_DAEMON_TOKEN"),
        help="daemon token for --endpoint (or PAYLOADSTORE_SMOKE_DAEMON_TOKEN)",
    )
    parser.add_argument("--namespace", default="dev")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a small and an 8 MiB job through a daemon")
    add_target_arguments(parser, "API endpoint (smoke test of a deployed stack)")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(os.environ.get("PAYLOADSTORE_STATE_FILE", ".devstack.json")),
    )
    args = parser.parse_args(argv)

    stack = None
    try:
        endpoint, client_token, daemon_token, stack = stack_target(
            parser, args, "starting one for the demo"
        )
        reports = run_round_trip(endpoint, client_token, daemon_token, args.namespace)
    except Exception as e:  # noqa: BLE001 - one clear line for the user, non-zero exit
        print(f"demo failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            stack.stop()
    print(format_reports(reports, endpoint))
    return 0


if __name__ == "__main__":
    sys.exit(main())
