"""What `Client` and `AsyncClient` share, without I/O: settings from the environment or the
local stack's file, the config cache, the result long-poll, the purge loop, the arithmetic of
`wait=` and `timeout=`, the state a job handle keeps, and the typed errors of an enqueue or a
job. The clients keep only the I/O: each runs the conversations here on its wire
(`Wire.run` / `await AsyncWire.run`), which sends their calls.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from . import codec
from ._many import FIRST_COMPLETED, return_when_value
from ._wire import calls
from ._wire.answers import ItemRefused, JobInfo, PurgeAnswer, ResultAnswer, ServerConfig
from ._wire.parse import Conversation
from .errors import (
    ApiError,
    AuthError,
    BlobSourceGone,
    ConfigError,
    ConflictError,
    EnqueueUnconfirmed,
    InlineNever,
    InlineUnavailable,
    JobCancelled,
    JobFailed,
    PayloadCorrupt,
    PayloadLost,
    PayloadStoreError,
    PayloadTooLarge,
    ResultTimeout,
    ServiceUnavailable,
)

log = logging.getLogger("payloadstore")

ENV_ENDPOINT = "PAYLOADSTORE_ENDPOINT"
ENV_TOKEN = "PAYLOADSTORE_TOKEN"
ENV_NAMESPACE = "PAYLOADSTORE_NAMESPACE"
ENV_DEVSTACK = "PAYLOADSTORE_DEVSTACK"
DEVSTACK_FILE = ".devstack.json"
DEFAULT_NAMESPACE = "dev"
# The control plane caps a result long-poll near 20 s; longer waits are several calls.
RESULT_WAIT_SLICE_S = 20.0
# `add(..., wait=S)`: what is left of S after the enqueue's own wait is long-polled only when
# more than this (an enqueue that waited all of S leaves only its round trip).
MIN_WAIT_LEFT_S = 0.05
# Queue.map: S3-tier uploads in flight at once, unless the caller says otherwise.
DEFAULT_MAP_CONCURRENCY = 8


class DoneAndPending(NamedTuple):
    """What `wait` answers, as `concurrent.futures.wait` does: finished and unfinished jobs."""

    done: set
    not_done: set


def find_devstack_file(start: Path | None = None) -> Path | None:
    """`$PAYLOADSTORE_DEVSTACK`, else `.devstack.json` in the working directory or a parent."""
    env = os.environ.get(ENV_DEVSTACK)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / DEVSTACK_FILE
        if candidate.is_file():
            return candidate
    return None


def read_devstack(path: str | os.PathLike | None = None) -> tuple[Path, dict]:
    found = Path(path) if path else find_devstack_file()
    if found is None:
        raise ConfigError(
            f"no {DEVSTACK_FILE} found here or above: start the local stack (make dev) "
            f"or set {ENV_ENDPOINT}, {ENV_TOKEN} and {ENV_NAMESPACE}"
        )
    try:
        return found, json.loads(found.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {found}: {e}") from e


# Purge calls a queue may take (each works up to ~10 s on the control plane).
MAX_PURGE_CALLS = 100
# A client or daemon reads `/v1/config` again at most this often (besides after a refusal on a
# limit, and before refusing a size): a changed MAX_PAYLOAD_BYTES or INLINE_THRESHOLD reaches
# long-running processes within minutes.
CONFIG_MAX_AGE_S = 300.0
# An inline enqueue refused for these goes through S3 instead: Redis above its high-water mark,
# a namespace that keeps nothing inline, or (413) an INLINE_THRESHOLD lowered since the config
# was read.
INLINE_REFUSALS = (InlineUnavailable, InlineNever, PayloadTooLarge)

# -- settings ------------------------------------------------------------------------------------


def checked_settings(endpoint: str, token: str, namespace: str) -> None:
    if not endpoint:
        raise ConfigError(f"no control-plane endpoint: pass endpoint= or set {ENV_ENDPOINT}")
    if not token:
        raise ConfigError(f"no token: pass token= or set {ENV_TOKEN}")
    if not namespace:
        raise ConfigError(f"no namespace: pass namespace= or set {ENV_NAMESPACE}")


def env_settings(environ: dict[str, str] | None) -> tuple[str, str, str]:
    """(endpoint, token, namespace) from `environ` (default: the process's environment)."""
    env = os.environ if environ is None else environ
    missing = [n for n in (ENV_ENDPOINT, ENV_TOKEN) if not env.get(n)]
    if missing:
        raise ConfigError(
            f"set {' and '.join(missing)} (and {ENV_NAMESPACE}, default {DEFAULT_NAMESPACE})"
        )
    return env[ENV_ENDPOINT], env[ENV_TOKEN], env.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE


def devstack_settings(
    path: str | os.PathLike | None, namespace: str, role: str
) -> tuple[str, str, str]:
    """(endpoint, token, namespace) of the local stack, from the file `make dev` writes."""
    found, stack = read_devstack(path)
    try:
        tokens = stack["namespaces"][namespace]
        token = tokens[f"{role}_token"]
        endpoint = stack["endpoint"]
    except (KeyError, TypeError) as e:
        names = ", ".join(sorted((stack.get("namespaces") or {}).keys())) or "none"
        raise ConfigError(
            f"{found} has no {role} token for namespace {namespace!r} (namespaces: {names})"
        ) from e
    return endpoint, token, namespace


def settings_from_env() -> bool:
    """Whether `from_env_or_devstack` reads the environment (else the local stack's file)."""
    return bool(os.environ.get(ENV_ENDPOINT) or os.environ.get(ENV_TOKEN))


def env_namespace() -> str:
    return os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE


# -- the config ----------------------------------------------------------------------------------


class ConfigCache:
    """`/v1/config` as last read: read at first use, again once CONFIG_MAX_AGE_S old, and again
    after `stale()` (a refusal on a limit: the stack's settings may change under a running
    client)."""

    def __init__(self) -> None:
        self.value: ServerConfig | None = None
        self._read_at = 0.0  # time.monotonic() of the read; -inf: read again before use

    def stale(self) -> None:
        self._read_at = -math.inf

    def read(self) -> Conversation[ServerConfig]:
        """The config, read again when due. A periodic re-read that fails keeps the config read
        before: a control plane briefly unreachable does not fail the calls that consult it."""
        if self.value is None or time.monotonic() - self._read_at >= CONFIG_MAX_AGE_S:
            try:
                self.value = yield calls.config()
            except PayloadStoreError as e:
                if self.value is None or isinstance(e, AuthError):
                    raise
                log.warning("config not read again, keeping the one read before error=%s", e)
            self._read_at = time.monotonic()
        return self.value


# -- conversations the clients run on their wire -------------------------------------------------


def result_polls(namespace: str, job_id: str, timeout: float | None) -> Conversation[ResultAnswer]:
    """Long-poll the job's result in slices until it is done; ResultTimeout after `timeout`
    seconds (None: as long as it takes)."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    state: str | None = None
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait = RESULT_WAIT_SLICE_S if remaining is None else min(RESULT_WAIT_SLICE_S, remaining)
        answer: ResultAnswer = yield calls.job_result(namespace, job_id, wait_s=wait)
        state = answer.state or state
        if answer.done:
            return answer
        if deadline is not None and time.monotonic() >= deadline:
            raise ResultTimeout(job_id, timeout or 0.0, state, time.monotonic() - started)


def purge_all(namespace: str, queue: str) -> Conversation[PurgeAnswer]:
    """Cancel every queued job of the queue: calls again while the control plane says some
    remain and the last call cancelled any."""
    cancelled = 0
    for _ in range(MAX_PURGE_CALLS):
        answer: PurgeAnswer = yield calls.purge(namespace, queue)
        cancelled += answer.cancelled
        if not answer.remaining or not answer.cancelled:
            break
    return PurgeAnswer(cancelled=cancelled, remaining=answer.remaining)


def restore_and_resend(error: ConflictError, blobs: Any) -> bool:
    """Whether a refused call is sent once more after its blobs are checked or uploaded again
    from their sources: `409 unknown_blob` (the namespace let a blob go since this process sent
    it), for a call that named blobs whose sources are still at hand."""
    return error.code == "unknown_blob" and bool(blobs) and not isinstance(error, BlobSourceGone)


def page_shown(page: Any) -> bool:
    """A page of a job listing is yielded unless empty with more to come (the control plane
    skipped jobs retried since)."""
    return bool(page.jobs) or page.next_cursor is None


# -- waits and timeouts --------------------------------------------------------------------------


def encoded_call(args: tuple | list, kwargs: dict | None) -> Any:
    """A job's payload: its call, encoded once."""
    return codec.encode({"args": list(args), "kwargs": dict(kwargs or {})}, call=True)


def item_calls(items: Iterable[Any]) -> Iterator[dict]:
    """`map`'s calls: each item is the function's one argument."""
    return ({"args": [item], "kwargs": {}} for item in items)


def args_calls(items: Iterable[tuple | list]) -> Iterator[dict]:
    """`starmap`'s calls: each item is the function's arguments (`fn(*item)`)."""
    return ({"args": list(args), "kwargs": {}} for args in items)


class Budget:
    """The seconds a caller gave (`wait=`, `timeout=`; None: no limit), from now: what the
    enqueue may wait of them (the control plane caps one wait) and what is left after it."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.started = time.monotonic()

    def enqueue_wait(self, default: float | None) -> float | None:
        """The enqueue's own wait: the budget, capped at one long-poll; `default` without one."""
        return default if self.seconds is None else min(self.seconds, RESULT_WAIT_SLICE_S)

    def left(self) -> float | None:
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - (time.monotonic() - self.started))

    def worth_waiting(self, job: JobHandle) -> float | None:
        """What is left to long-poll after an enqueue that waited (None: nothing worth it)."""
        left = self.left()
        return left if not job.done and left is not None and left > MIN_WAIT_LEFT_S else None

    def timed_out(self, job_id: str, e: ResultTimeout) -> ResultTimeout:
        """The enqueue waited too: the message states the whole wait, not what was left."""
        return ResultTimeout(job_id, self.seconds or 0.0, e.state, time.monotonic() - self.started)


class Waiting:
    """What `wait` gathers from `as_completed`: the jobs done so far, until all (or the first,
    FIRST_COMPLETED) are."""

    def __init__(self, jobs: Iterable[Any], return_when: str):
        self.jobs = list(jobs)
        self._first = return_when_value(return_when) == FIRST_COMPLETED
        self.done: set = set()

    def finished(self, job: Any) -> bool:
        """Note a finished job; whether the wait is over."""
        self.done.add(job)
        return self._first

    def answer(self) -> DoneAndPending:
        return DoneAndPending(self.done, {j for j in self.jobs if j not in self.done})


# -- a job's handle ------------------------------------------------------------------------------


class JobHandle:
    """What `Job` and `AsyncJob` share: the id, what is known of the job, and the last state seen."""

    def __init__(
        self, client: Any, job_id: str, *, tier: str | None = None, queue: str | None = None
    ):
        self.client = client
        self.job_id = job_id
        self.tier = tier
        self.queue = queue
        self._result: Any = None
        self._has_result = False
        self._last: JobInfo | ItemRefused | None = None
        # The job's terminal result answer, once known (an enqueue that waited for it).
        self._answer: ResultAnswer | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.job_id!r}, tier={self.tier!r}, queue={self.queue!r})"

    @property
    def state(self) -> str | None:
        """The last state seen (by `status`, `wait`, `as_completed` or an enqueue that waited),
        without a call."""
        if self._answer is not None:
            return self._answer.state
        last = self._last
        return None if last is None else getattr(last, "state", "unknown")

    @property
    def done(self) -> bool:
        """Whether the job's result (or terminal failure) is known here, without a call: an
        enqueue with `wait` that saw it end, or a `result()` already read."""
        return self._answer is not None or self._has_result

    def _ended(self, answer: ResultAnswer) -> None:
        """The job's terminal result answer, known without asking again."""
        self._answer = answer

    def _finished(self, answer: JobInfo | ItemRefused) -> None:
        self._last = answer

    def _seen(self, status: JobInfo) -> JobInfo:
        """A status read: the last state seen, and the tier and queue if not known yet."""
        self._last = status
        self.tier = self.tier or status.tier
        self.queue = self.queue or status.queue
        return status

    def _forget(self) -> None:
        """Retried: the result and the state known before are not the job's any more."""
        self._result, self._has_result, self._last = None, False, None
        self._answer = None

    def _decoded(self, store: Any, downloads: Any, data: bytes | bytearray, copy: bool) -> Any:
        """The result's value from its bytes, blobs in it read through the GETs handed out
        with it (`downloads`); kept as decoded unless `copy`."""
        reading = store.reading(downloads)
        try:
            value = codec.decode(data, copy=copy)
        finally:
            store.done_reading(reading)
        if not copy:
            self._result, self._has_result = value, True
        return value

    @classmethod
    def _enqueued(cls, client: Any, enqueued: Any, queue: str) -> Any:
        """The handle of a confirmed enqueue; it knows the result if the enqueue waited for it."""
        job = cls(client, enqueued.job_id, tier=enqueued.tier, queue=queue)
        if enqueued.result is not None:
            job._ended(enqueued.result)
        return job


# -- typed errors --------------------------------------------------------------------------------


def enqueue_unconfirmed(
    queue: str,
    error: ServiceUnavailable,
    *,
    idempotency_key: str | None = None,
    job_id: str | None = None,
) -> EnqueueUnconfirmed:
    """What an enqueue whose answer never came (503, no connection) raises: never a job id."""
    if idempotency_key and job_id:
        # Rerouted through S3: the key names the inline attempt, the job the uploaded payload.
        how = (
            f"submit again with idempotency_key={idempotency_key!r}; the payload was uploaded "
            f"for job {job_id}, which is in a queue only if this enqueue's answer was lost"
        )
    elif idempotency_key:
        how = f"submit again with idempotency_key={idempotency_key!r} to get the same job"
    elif job_id:
        how = f"the payload was uploaded for job {job_id}; submitting again makes a new job"
    else:
        how = "no job was created; submit again later"
    return EnqueueUnconfirmed(
        f"enqueue on queue {queue} not confirmed, the job may not exist: {error.message}; {how}",
        queue=queue,
        idempotency_key=idempotency_key,
        job_id=job_id,
        status=error.status,
        code=error.code,
    )


def job_error(job_id: str, state: str | None, error: Any) -> Exception:
    """The typed error for a job that ended without a result."""
    err = error if isinstance(error, dict) else {"message": str(error) if error else ""}
    message = str(err.get("message") or err.get("detail") or state or "no result")
    if state == "payload_corrupt":
        return PayloadCorrupt(
            f"job {job_id} payload_corrupt: {message}",
            job_id=job_id,
            key=err.get("key"),
            expected_sha256=err.get("expected_sha256"),
            actual_sha256=err.get("actual_sha256"),
            expected_crc64nvme=err.get("expected_crc64nvme"),
            actual_crc64nvme=err.get("actual_crc64nvme"),
        )
    if state == "cancelled":
        return JobCancelled(job_id, message)
    if state == "payload_lost":
        return PayloadLost(
            f"job {job_id} payload_lost: {message}", job_id=job_id, key=err.get("key")
        )
    if state == "failed" or error:
        return JobFailed(
            job_id,
            str(err.get("type") or err.get("code") or "Error"),
            message,
            err.get("traceback"),
            state or "failed",
        )
    return ApiError(f"job {job_id} result has neither a value nor an error (state={state})")
