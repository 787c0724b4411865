"""`make smoke`: every S3 path of the control plane, once, against a deployed stack (or the local
stack), one line per path and a closing `smoke: N passed, N failed` (issue 32).

The S3 emulator of the local stack enforces S3's rules for presigned URLs as we read them (the
signed `x-amz-checksum-*` of a PUT and of each UploadPart, expiry, the signature); AWS's own guide
is not explicit about checksums on presigned uploads. So this is what to run after a first deploy:
each line is a path a real job takes, checked against real S3.

| path | what it proves |
|---|---|
| inline | a small job's args and result travel in Redis, no S3 call |
| s3 single PUT | args above INLINE_THRESHOLD go up in one presigned PUT with their checksum signed in, the daemon downloads them, its result goes up and comes back the same way |
| s3 multipart | args and result above MULTIPART_THRESHOLD go up in parts (each part's URL signing its checksum) and are completed by the control plane; both are read back in ranges and checked |
| blob, two jobs | a blob uploaded once is read by two jobs |
| cancelled | a job with S3 args cancelled before any daemon took it ends `cancelled`, and its result raises JobCancelled |
| retry | an S3 job whose function failed is retried (its args read from S3 again) and succeeds |
| tampered upload | a presigned PUT of bytes other than those signed is refused by S3, and enqueueing that reference is refused (409 `not_uploaded`) |

    python -m payloadstore_devstack.smoke [--endpoint URL --token T --daemon-token D]
        [--namespace dev] [--only inline,retry,...]

Without --endpoint it uses the stack `make dev` runs, or starts one of its own (as `make demo`).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx

from payloadstore_devstack.demo import (
    INVERT,
    ByteCounter,
    CountingTransport,
    add_target_arguments,
    human,
    stack_target,
)

# --only takes these keys.
PATHS = {
    "inline": "inline",
    "single": "s3 single PUT",
    "multipart": "s3 multipart",
    "blob": "blob, two jobs",
    "cancelled": "cancelled",
    "retry": "retry",
    "tampered": "tampered upload",
}
RESULT_TIMEOUT_S = 300.0


class SmokeFailed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailed(message)


def smoke_function(op: str, *args: Any) -> Any:
    """The daemon's function, one per path: `invert` returns its input with every bit flipped
    (so a large input makes a large result), `fail_once` raises on a token's first run,
    `blob_sha256` reads a blob."""
    if op == "invert":
        return bytes(args[0]).translate(INVERT)
    if op == "fail_once":
        token, data = args
        with _FAILED_LOCK:
            first = token not in _FAILED_ONCE
            _FAILED_ONCE.add(token)
        if first:
            raise RuntimeError("smoke: the first run of this job fails on purpose")
        return hashlib.sha256(bytes(data)).hexdigest()
    if op == "blob_sha256":
        return hashlib.sha256(args[0].read()).hexdigest()
    raise ValueError(f"unknown smoke op {op!r}")


_FAILED_ONCE: set[str] = set()
_FAILED_LOCK = threading.Lock()


@dataclass
class Outcome:
    path: str
    ok: bool
    detail: str
    seconds: float

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark} {self.path:<16} {self.seconds:>6.1f} s  {self.detail}"


def ref_shape(ref: dict | None) -> str:
    if not ref or ref.get("kind", "s3") != "s3":
        return "inline"
    parts = (ref.get("multipart") or {}).get("part_count")
    return f"s3 in {parts} parts" if parts else "s3, one PUT"


class Smoke:
    def __init__(self, endpoint: str, client_token: str, daemon_token: str, namespace: str):
        from payloadstore import Client, Daemon

        self.s3 = ByteCounter()
        self.cp = ByteCounter()

        def http(counter: ByteCounter, read_s: float) -> httpx.Client:
            return httpx.Client(
                transport=CountingTransport(counter), timeout=httpx.Timeout(read_s, connect=10.0)
            )

        self.client = Client(
            endpoint,
            client_token,
            namespace,
            http=http(self.cp, 60),
            s3_http=http(self.s3, 300),
            progress=False,
        )
        self.worker = Client(
            endpoint, daemon_token, namespace, http=http(self.cp, 60), progress=False
        )
        self.queue_name = f"smoke-{uuid.uuid4().hex[:8]}"
        self.queue = self.client.queue(self.queue_name)
        self.daemon = Daemon(
            self.worker, self.queue_name, wait_s=2.0, install_signal_handlers=False, progress=False
        )
        self.daemon_error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run_daemon, name="smoke-daemon", daemon=True)

    def _run_daemon(self) -> None:
        try:
            self.daemon.run(smoke_function)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.daemon_error.append(e)

    def __enter__(self) -> Self:
        # A wrong token or endpoint fails here, once, not on every path.
        self.client.queues()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.daemon.stop()
        self.thread.join(15)
        self.client.close()
        self.worker.close()

    # -- the paths -----------------------------------------------------------------------------

    def round_trip(self, size: int) -> tuple[str, str]:
        payload = os.urandom(size)
        job = self.queue.add("invert", payload)
        value = job.result(timeout=RESULT_TIMEOUT_S)
        check(
            bytes(value) == payload.translate(INVERT),
            f"job {job.job_id}: the result is not the function's",
        )
        status = job.status()
        check(status.state == "succeeded", f"job {job.job_id} is {status.state}")
        return ref_shape(status.payload_ref), ref_shape(status.result_ref)

    def inline(self) -> str:
        args, result = self.round_trip(1024)
        check((args, result) == ("inline", "inline"), f"args {args}, result {result}")
        return "args 1.0 KiB and result inline (Redis), no S3 call"

    def single_put(self) -> str:
        config = self.client.config
        size = max(8 << 20, config.inline_threshold + 1)
        if config.multipart_threshold:
            size = min(size, config.multipart_threshold - (1 << 20))
        before = self.s3.total
        args, result = self.round_trip(size)
        check(
            (args, result) == ("s3, one PUT", "s3, one PUT"),
            f"args {args}, result {result} (expected one PUT each)",
        )
        return (
            f"args and result of {human(size)} in one presigned PUT each, read back and "
            f"checked ({human(self.s3.total - before)} to and from S3 by the client)"
        )

    def multipart(self) -> str:
        threshold = self.client.config.multipart_threshold
        check(threshold is not None, "the control plane has no MULTIPART_THRESHOLD")
        size = int(threshold or 0) + (1 << 20)
        args, result = self.round_trip(size)
        check(
            args.startswith("s3 in") and result.startswith("s3 in"),
            f"args {args}, result {result} (expected parts)",
        )
        return f"args {human(size)} {args[3:]}, result {result[3:]}, completed and checked"

    def blob_two_jobs(self) -> str:
        content = os.urandom(2 << 20)
        before = self.s3.sent
        blob = self.client.blob(content)
        uploaded = self.s3.sent - before
        jobs = [self.queue.add("blob_sha256", blob) for _ in range(2)]
        want = hashlib.sha256(content).hexdigest()
        for job in jobs:
            got = job.result(timeout=RESULT_TIMEOUT_S)
            check(got == want, f"job {job.job_id} read {got[:12]}, not the blob {want[:12]}")
        check(self.s3.sent - before == uploaded, "the blob was uploaded more than once")
        check(blob.sha256 == want, "the blob is not named by its sha256")
        return f"one upload of {human(len(content))}, read by both jobs (sha256 {want[:12]})"

    def cancelled(self) -> str:
        from payloadstore import JobCancelled

        # A queue no daemon polls: the job stays queued until cancelled.
        idle = self.client.queue(f"{self.queue_name}-idle")
        job = idle.add("invert", os.urandom(self.client.config.inline_threshold + 1024))
        check(job.status().tier == "s3", "the job's args did not go to S3")
        answer = job.cancel()
        check(answer.state == "cancelled", f"cancel answered {answer.state}")
        check(job.status().state == "cancelled", "the job is not cancelled")
        try:
            job.result(timeout=10)
        except JobCancelled:
            return "an S3 job cancelled while queued: state cancelled, result raises JobCancelled"
        raise SmokeFailed("the result of a cancelled job did not raise JobCancelled")

    def retry(self) -> str:
        from payloadstore import JobFailed

        data = os.urandom(self.client.config.inline_threshold + 1024)
        job = self.queue.add("fail_once", uuid.uuid4().hex, data)
        try:
            job.result(timeout=RESULT_TIMEOUT_S)
        except JobFailed:
            pass
        else:
            raise SmokeFailed("the first run was meant to fail")
        check(job.status().tier == "s3", "the job's args did not go to S3")
        job.retry()
        got = job.result(timeout=RESULT_TIMEOUT_S)
        check(got == hashlib.sha256(data).hexdigest(), "the retried run read other arguments")
        return "an S3 job failed, retried with the same id, its args read from S3 again: succeeded"

    def tampered(self) -> str:
        from payloadstore import ConflictError
        from payloadstore._wire import PayloadRef

        size = self.client.config.inline_threshold + 4096
        signed = os.urandom(size)
        grant = self.client.wire.presign_put(
            size=size, kind="args", sha256=hashlib.sha256(signed).hexdigest()
        )
        check(bool(grant.url), "the presign answered no single-PUT URL")
        other = bytes(b ^ 0xFF for b in signed[:16]) + signed[16:]  # same length, other bytes
        answer = self.client.s3_http.request(
            grant.method or "PUT", grant.url, content=other, headers=dict(grant.headers)
        )
        check(
            400 <= answer.status_code < 500,
            f"S3 stored bytes other than those signed ({answer.status_code})",
        )
        ref = PayloadRef(bucket=grant.bucket, key=grant.key, size=size)
        try:
            self.client.wire.enqueue_ref(self.queue_name, ref)
        except ConflictError as e:
            reason = e.details.get("reason")
            check(
                reason == "not_uploaded",
                f"enqueue refused with {e.code}/{reason}, not not_uploaded",
            )
            return (
                f"S3 refused other bytes than the signed checksum ({answer.status_code}); "
                "the enqueue was refused 409 not_uploaded"
            )
        raise SmokeFailed("a reference to a refused upload was enqueued")

    def run(self, only: set[str] | None, out: Callable[[str], None]) -> list[Outcome]:
        steps: dict[str, Callable[[], str]] = {
            "inline": self.inline,
            "single": self.single_put,
            "multipart": self.multipart,
            "blob": self.blob_two_jobs,
            "cancelled": self.cancelled,
            "retry": self.retry,
            "tampered": self.tampered,
        }
        unknown = (only or set()) - set(steps)
        if unknown:
            raise ValueError(
                f"no smoke path {', '.join(sorted(unknown))}; paths: {', '.join(steps)}"
            )
        outcomes = []
        for key, step in steps.items():
            if only and key not in only:
                continue
            path = PATHS[key]
            started = time.monotonic()
            try:
                if self.daemon_error:
                    raise SmokeFailed(f"the daemon stopped: {self.daemon_error[0]!r}")
                outcome = Outcome(path, True, step(), time.monotonic() - started)
            except Exception as e:  # noqa: BLE001 - one line per path, then the next path
                outcome = Outcome(
                    path, False, f"{type(e).__name__}: {e}", time.monotonic() - started
                )
            out(outcome.line())
            outcomes.append(outcome)
        return outcomes


def summary(outcomes: list[Outcome]) -> str:
    passed = sum(o.ok for o in outcomes)
    return f"smoke: {passed} passed, {len(outcomes) - passed} failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="every S3 path of the control plane, once")
    add_target_arguments(parser, "the deployed API (its ApiUrl); else the local stack")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated paths to run (default: all): {','.join(PATHS)}",
    )
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(os.environ.get("PAYLOADSTORE_STATE_FILE", ".devstack.json")),
    )
    args = parser.parse_args(argv)
    only = {w.strip() for w in args.only.split(",") if w.strip()} or None
    # One line per path: the daemon's own line per job would interleave with them (warnings
    # still show, on stderr).
    sdk_log = logging.getLogger("payloadstore")
    sdk_log.addHandler(logging.StreamHandler(sys.stderr))
    sdk_log.setLevel(logging.WARNING)

    stack = None
    try:
        endpoint, client_token, daemon_token, stack = stack_target(parser, args, "starting one")
        print(f"smoke test of {endpoint} (namespace {args.namespace})", flush=True)
        with Smoke(endpoint, client_token, daemon_token, args.namespace) as smoke:
            outcomes = smoke.run(only, lambda line: print(line, flush=True))
    except Exception as e:  # noqa: BLE001 - one clear line for the user, non-zero exit
        print(f"smoke failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            stack.stop()
    print(summary(outcomes))
    return 0 if outcomes and all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
