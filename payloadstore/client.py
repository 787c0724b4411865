"""The client SDK: `Client`, `Queue.add`, `Job.result`.

A job's payload is its call, encoded once: `{"args": [...], "kwargs": {...}}` (see the codec for
the value types). Encoded sizes up to the control plane's `inline_threshold` travel inline as a
raw msgpack body; larger ones go straight to S3 through a presigned PUT (in parts above its
`multipart_threshold`) and the job carries only the reference.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, Self

import httpx

from . import codec
from ._blobs import Blob, BlobStore
from ._http import RetryPolicy
from ._many import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    Planned,
    Watch,
    encode_item,
    inline_item,
    item_error,
    planned_windows,
    raise_if_refused,
    return_when_value,
    split_batches,
)
from ._payloads import Payloads, write_into
from ._wire import (
    TERMINAL_STATES,
    BatchItem,
    CancelAnswer,
    Enqueued,
    ItemRefused,
    JobInfo,
    JobPage,
    JobPayloads,
    JobStatus,
    PurgeAnswer,
    QueueInfo,
    RedriveAnswer,
    ResultAnswer,
    RetryAnswer,
    ServerConfig,
    Throughput,
    Wire,
)
from .errors import (
    INLINE_REFUSED,
    ApiError,
    AuthError,
    ConfigError,
    EnqueueUnconfirmed,
    InlineNever,
    InlineUnavailable,
    JobCancelled,
    JobFailed,
    PayloadCorrupt,
    PayloadLost,
    PayloadStoreError,
    PayloadTooLarge,
    PolicyMismatch,
    ResultTimeout,
    ServiceUnavailable,
    WaitTimeout,
)

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "TERMINAL_STATES",
    "Client",
    "DoneAndPending",
    "Job",
    "JobInfo",
    "JobPage",
    "JobStatus",
    "PurgeAnswer",
    "Queue",
    "QueueInfo",
    "RedriveAnswer",
    "RetryAnswer",
    "ServerConfig",
    "find_devstack_file",
    "job_error",
    "read_devstack",
]

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


class Client:
    """Talks to the control plane for one namespace with one bearer token.

    `http` (control plane) and `s3_http` (presigned URLs; never sent the bearer token) may be
    injected, e.g. with `httpx.MockTransport` in tests.
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: httpx.Client | None = None,
        s3_http: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        progress: bool | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not endpoint:
            raise ConfigError(f"no control-plane endpoint: pass endpoint= or set {ENV_ENDPOINT}")
        if not token:
            raise ConfigError(f"no token: pass token= or set {ENV_TOKEN}")
        if not namespace:
            raise ConfigError(f"no namespace: pass namespace= or set {ENV_NAMESPACE}")
        self.namespace = namespace
        self.retry = retry or RetryPolicy()
        self.progress = progress
        self._sleep = sleep
        #: the control plane's routes, typed (payloadstore._wire)
        self.wire = Wire(
            endpoint,
            token,
            namespace,
            http=http,
            retry=self.retry,
            timeout_s=timeout_s,
            sleep=sleep,
        )
        self._owns_s3 = s3_http is None
        # Long read timeout: a 100 MiB object on a slow link; connect stays short.
        self.s3_http = s3_http or httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0))
        #: payload bytes through presigned S3 URLs (payloadstore._payloads)
        self.payloads = Payloads(
            self.wire,
            self.s3_http,
            config=lambda: self.config,
            refresh=lambda: self.refresh_config(),
            retry=self.retry,
            progress=progress,
            sleep=sleep,
        )
        #: blobs: uploads (once per namespace), presigned GETs handed out, the host's cache
        self.blobs = BlobStore(
            self.wire, self.s3_http, retry=self.retry, sleep=sleep, config=lambda: self.config
        )
        self._config: ServerConfig | None = None
        self._config_read = 0.0  # time.monotonic() of the read; -inf: read again before use
        self._config_lock = threading.Lock()
        self.wire.on_limit_refused = self.config_is_stale

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> Client:
        env = os.environ if environ is None else environ
        missing = [n for n in (ENV_ENDPOINT, ENV_TOKEN) if not env.get(n)]
        if missing:
            raise ConfigError(
                f"set {' and '.join(missing)} (and {ENV_NAMESPACE}, default {DEFAULT_NAMESPACE})"
            )
        return cls(
            env[ENV_ENDPOINT], env[ENV_TOKEN], env.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE, **kwargs
        )

    @classmethod
    def from_devstack(
        cls,
        path: str | os.PathLike | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "client",
        **kwargs: Any,
    ) -> Client:
        """A client of the local stack, from the `.devstack.json` that `make dev` writes."""
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
        return cls(endpoint, token, namespace, **kwargs)

    @classmethod
    def from_env_or_devstack(cls, *, role: str = "client", **kwargs: Any) -> Client:
        """Environment variables when set, else the local stack's file."""
        if os.environ.get(ENV_ENDPOINT) or os.environ.get(ENV_TOKEN):
            return cls.from_env(**kwargs)
        return cls.from_devstack(
            namespace=os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE, role=role, **kwargs
        )

    @property
    def api(self) -> Wire:
        """The same object as `wire` (its former name)."""
        return self.wire

    def close(self) -> None:
        self.wire.close()
        if self._owns_s3:
            self.s3_http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(endpoint={self.wire.endpoint!r}, namespace={self.namespace!r})"

    # -- user API -----------------------------------------------------------------------------

    @property
    def config(self) -> ServerConfig:
        """The fleet's settings from `/v1/config`: read at first use, again once CONFIG_MAX_AGE_S
        old, and again after the control plane refused a call on a limit (413, inline_never,
        policy_mismatch): the stack's settings may change under a running client."""
        with self._config_lock:
            if self._config is None or config_due(self._config_read):
                self._config = read_config(self.wire.config, self._config)
                self._config_read = time.monotonic()
            return self._config

    def config_is_stale(self) -> None:
        """Read `/v1/config` again before its next use."""
        self._config_read = float("-inf")

    def refresh_config(self) -> ServerConfig:
        """`/v1/config` read now (e.g. before refusing a size the cached limits do not allow)."""
        self.config_is_stale()
        return self.config

    def blob(self, source: Any) -> Blob:
        """Store content once in this namespace: `source` is bytes, a path (`str` or
        `os.PathLike`) or a binary file object. Hashes it (streaming), uploads it only when the
        namespace does not have it yet, and returns a `Blob` (`.sha256`, `.size`) to put in any
        job's arguments (a reference of tens of bytes travels, not the bytes)."""
        return self.blobs.put(source)

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def job(self, job_id: str) -> Job:
        return Job(self, job_id)

    def queues(self) -> list[QueueInfo]:
        """Every queue of the namespace: queued, in flight, the oldest queued job's age and the
        jobs failed within the retention."""
        return self.wire.queue_list()

    def throughput(self, queue: str | None = None) -> Throughput:
        """Succeeded and failed jobs per minute over the last hour (60 counts each, the current
        minute last), of every queue of the namespace or of `queue`."""
        return self.wire.throughput(queue)

    def health(self, details: bool = False) -> tuple[bool, dict]:
        """(healthy, body) from `/v1/health` (ok/failing per check), or with `details=True` from
        `/v1/health/details` (each check's detail; needs the token); does not raise for a 503."""
        answer = self.wire.health(details=details)
        return answer.healthy, answer.body

    def as_completed(self, jobs: Iterable[Job], timeout: float | None = None) -> Iterator[Job]:
        """Yield each job as it finishes (succeeded, failed, lost, ...), watching up to
        BATCH_MAX_JOBS jobs per `jobs:status` call; WaitTimeout when `timeout` runs out first."""
        watch = Watch(jobs, timeout, self.config.batch_max_jobs)
        while watch.pending:
            if watch.expired():
                pending = [j for js in watch.pending.values() for j in js]
                raise WaitTimeout(pending, timeout or 0.0, time.monotonic() - watch.started)
            for ids, wait_s in watch.round():
                yield from watch.apply(self.wire.jobs_status(ids, wait_s=wait_s))

    def wait(
        self,
        jobs: Iterable[Job],
        timeout: float | None = None,
        return_when: str = ALL_COMPLETED,
    ) -> DoneAndPending:
        """Block until all jobs (or the first, FIRST_COMPLETED) finish or `timeout` passes;
        answer (done, not_done) as `concurrent.futures.wait` does. Never raises for a timeout."""
        jobs = list(jobs)
        first = return_when_value(return_when) == FIRST_COMPLETED
        done: set = set()
        try:
            for job in self.as_completed(jobs, timeout):
                done.add(job)
                if first:
                    break
        except WaitTimeout:
            pass
        return DoneAndPending(done, {j for j in jobs if j not in done})


class Queue:
    def __init__(self, client: Client, name: str):
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, namespace={self.client.namespace!r})"

    def stats(self) -> QueueInfo:
        """Queued, in flight, oldest queued age and failed count of this queue; QueueNotFound
        if never used."""
        return self.client.wire.queue_stats(self.name)

    def throughput(self) -> Throughput:
        """This queue's succeeded and failed jobs per minute over the last hour."""
        return self.client.wire.throughput(self.name)

    def jobs(
        self, state: str = "queued", limit: int = 50, *, cursor: str | None = None
    ) -> Iterator[JobPage]:
        """The queue's jobs in `state` (queued, running, failed, cancelled, succeeded), newest
        first, as pages of up to `limit` (1..100) jobs: one call per page, made as the iterator
        is read, until the last. A page is iterable (its JobInfo) and has `next_cursor`, to
        resume later with `cursor=`. `failed` is every terminal state but succeeded and
        cancelled (failed, DeliveryLimitExceeded, payload_lost, payload_corrupt)."""
        return job_pages(
            lambda c: self.client.wire.list_jobs(self.name, state=state, limit=limit, cursor=c),
            cursor,
        )

    def redrive(
        self, states: Iterable[str] | None = None, limit: int | None = None
    ) -> RedriveAnswer:
        """Retry up to `limit` (default 100, at most 1000) jobs of the queue that ended in
        `states` (default failed, payload_lost, payload_corrupt; cancelled may be named),
        newest first: answers how many were retried and skipped (arguments expired)."""
        return self.client.wire.redrive(
            self.name, states=list(states) if states else None, limit=limit
        )

    def purge(self) -> PurgeAnswer:
        """Cancel every queued job of the queue (running ones are left alone); calls again
        while the control plane says some remain and the last call cancelled any."""
        return purge_all(lambda: self.client.wire.purge(self.name))

    def map(
        self,
        iterable: Iterable[Any],
        *,
        concurrency: int = DEFAULT_MAP_CONCURRENCY,
        progress: bool | None = False,
    ) -> list[Job]:
        """Enqueue one job per item (the function is called with the item), in order.

        Inline items go through `jobs:batch` (up to BATCH_MAX_JOBS per call); S3-tier items are
        uploaded `concurrency` at a time, then enqueued by reference in the same batches. The
        iterable is consumed in bounded windows, so a long (or endless) one is never held whole.
        Returns the Jobs in input order; raises BatchError (with `.jobs` and `.errors`) when any
        item was refused, after enqueuing all the others.
        """
        return self._map(
            ({"args": [item], "kwargs": {}} for item in iterable), concurrency, progress
        )

    def starmap(
        self,
        iterable: Iterable[tuple | list],
        *,
        concurrency: int = DEFAULT_MAP_CONCURRENCY,
        progress: bool | None = False,
    ) -> list[Job]:
        """`map` for argument tuples: each item is called as `fn(*item)`."""
        calls = ({"args": list(args), "kwargs": {}} for args in iterable)
        return self._map(calls, concurrency, progress)

    def _map(self, calls: Iterable[dict], concurrency: int, progress: bool | None) -> list[Job]:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        config = self.client.config
        jobs: list[Job | None] = []
        errors: dict[int, Exception] = {}
        window = max(config.batch_max_jobs, concurrency * 4)
        with ThreadPoolExecutor(concurrency, thread_name_prefix="payloadstore-map") as pool:
            for planned in planned_windows(calls, window, encode_item):
                jobs.extend([None] * len(planned))
                self._prepare(planned, pool, errors, progress, force_s3=False)
                self._enqueue_planned(planned, pool, jobs, errors, progress)
        raise_if_refused(jobs, errors, self.name)
        return jobs  # type: ignore[return-value]  # no None left: raise_if_refused raised otherwise

    def _prepare(
        self,
        planned: list[Planned],
        pool: ThreadPoolExecutor,
        errors: dict[int, Exception],
        progress: bool | None,
        *,
        force_s3: bool,
    ) -> None:
        """Give each item its batch entry: inline bytes, or the reference of its finished upload
        (uploads run `concurrency` at a time)."""
        threshold = self.client.config.inline_limit
        uploads = {}
        refs: dict[int, tuple[str, ...]] = {}
        for p in planned:
            try:
                refs[p.index] = self.client.blobs.send(p.encoded.blobs)
            except PayloadStoreError as e:
                errors[p.index] = e
                continue
            if not force_s3 and p.encoded.nbytes <= threshold:
                p.item = replace(inline_item(p.encoded), blobs=refs[p.index])
                continue
            try:
                self.client.payloads.check_size(p.encoded.nbytes)
            except PayloadStoreError as e:
                errors[p.index] = e
                continue
            uploads[p.index] = pool.submit(
                self.client.payloads.store, p.encoded, "args", progress=progress
            )
        for p in planned:
            future = uploads.get(p.index)
            if future is None:
                continue
            try:
                ref, _ = future.result()
                p.item = BatchItem(ref=ref, blobs=refs.get(p.index, ()))
            except PayloadStoreError as e:
                errors[p.index] = e

    def _enqueue_planned(
        self,
        planned: list[Planned],
        pool: ThreadPoolExecutor,
        jobs: list[Job | None],
        errors: dict[int, Exception],
        progress: bool | None,
        *,
        rerouted: bool = False,
        resent: bool = False,
    ) -> None:
        client = self.client
        reroute: list[Planned] = []
        resend: list[Planned] = []
        for batch in split_batches([p for p in planned if p.item], client.config):
            # Every one of the batch: only planned items that have their item were split.
            items = [p.item for p in batch if p.item is not None]
            try:
                answers = client.wire.enqueue_batch(self.name, items)
            except PayloadStoreError as e:
                for p in batch:
                    errors[p.index] = e
                continue
            for p, answer in zip(batch, answers, strict=False):
                if isinstance(answer, Enqueued):
                    jobs[p.index] = Job(client, answer.job_id, tier=answer.tier, queue=self.name)
                elif answer.code in INLINE_REFUSED and not rerouted:
                    reroute.append(p)
                elif answer.code == "unknown_blob" and not resent and p.encoded.blobs:
                    resend.append(p)
                else:
                    errors[p.index] = item_error(answer, f"item {p.index} on queue {self.name}")
        if reroute:
            # Redis is above its high-water mark: these bytes go through S3 instead.
            log.info(
                "inline refused, storing through S3 queue=%s items=%d", self.name, len(reroute)
            )
            self._prepare(reroute, pool, errors, progress, force_s3=True)
            self._enqueue_planned(reroute, pool, jobs, errors, progress, rerouted=True)
        if resend:
            # A blob the namespace let go since this process sent it: check or upload it again
            # from its source, then send those items once more.
            self._resend(resend, pool, jobs, errors, progress, rerouted=rerouted)

    def _resend(
        self,
        planned: list[Planned],
        pool: ThreadPoolExecutor,
        jobs: list[Job | None],
        errors: dict[int, Exception],
        progress: bool | None,
        *,
        rerouted: bool,
    ) -> None:
        again: list[Planned] = []
        for p in planned:
            try:
                self.client.blobs.restore(p.encoded.blobs)
            except PayloadStoreError as e:
                errors[p.index] = e
                continue
            again.append(p)
        self._enqueue_planned(again, pool, jobs, errors, progress, rerouted=rerouted, resent=True)

    def add(self, *args: Any, wait: float | None = None, **kwargs: Any) -> Job:
        """Enqueue a call of the daemon's function with these arguments.

        `wait=S`: the enqueue waits up to S seconds for the job to end, in the same call as far
        as the control plane's long-poll reaches (RESULT_MAX_WAIT_S, ~20 s); the Job returned
        then already knows its result (`job.result()` makes no call). `wait` is taken by `add`
        itself: pass a function keyword argument named `wait` through `submit(args, kwargs)`."""
        return self.submit(args, kwargs, wait=wait)

    def call(self, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run the daemon's function with these arguments and return its value, raising as
        `job.result()` does (JobFailed, JobCancelled, ResultTimeout after `timeout` seconds,
        ...). A job that ends within the control plane's long-poll (~20 s) costs one call: the
        enqueue answers its result. `timeout` is taken by `call` itself (a function keyword
        argument of that name goes through `submit(args, kwargs)` and `job.result()`)."""
        started = time.monotonic()
        wait = RESULT_WAIT_SLICE_S if timeout is None else min(timeout, RESULT_WAIT_SLICE_S)
        encoded = codec.encode({"args": list(args), "kwargs": dict(kwargs)}, call=True)
        job = self.submit_encoded(encoded, wait=wait)
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        try:
            return job.result(timeout=remaining)
        except ResultTimeout as e:
            # The enqueue waited too: the message states the whole wait, not what was left.
            raise ResultTimeout(
                job.job_id, timeout or 0.0, e.state, time.monotonic() - started
            ) from None

    def submit(
        self,
        args: tuple | list = (),
        kwargs: dict | None = None,
        *,
        progress: bool | None = None,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> Job:
        """`add` with options: progress bar for large uploads, an idempotency key so a
        caller's own retry of an inline enqueue cannot create a second job, and `wait` (as
        `add(..., wait=S)`).

        Returns only a job the control plane confirmed as queued; raises EnqueueUnconfirmed
        (a ServiceUnavailable) when it could not get that confirmation through every retry.
        """
        started = time.monotonic()
        encoded = codec.encode({"args": list(args), "kwargs": dict(kwargs or {})}, call=True)
        job = self.submit_encoded(
            encoded,
            progress=progress,
            idempotency_key=idempotency_key,
            wait=None if wait is None else min(wait, RESULT_WAIT_SLICE_S),
        )
        left = 0.0 if wait is None else wait - (time.monotonic() - started)
        if not job.done and left > MIN_WAIT_LEFT_S:
            # Past what one enqueue waited (the control plane caps it): long-poll the rest,
            # quietly (no ResultTimeout: the job is queued, and the caller has it).
            job._wait_within(left)
        return job

    def submit_encoded(
        self,
        encoded: Any,
        *,
        progress: bool | None = None,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> Job:
        """Enqueue already encoded arguments; `wait`: the enqueue's own wait (`?wait=S`, capped
        by the control plane), after which the Job knows its result if the job ended."""
        client = self.client
        size = encoded.nbytes
        # The blobs first (each uploaded once per namespace): the enqueue names them.
        blobs = client.blobs.send(getattr(encoded, "blobs", ()))
        if size <= client.config.inline_limit:
            # One key per call, sent on every retry: a lost 201 retried gives back the same job.
            key = idempotency_key or uuid.uuid4().hex
            try:
                # (a blob the namespace let go since it was sent: restored and sent once more)
                enqueued = self._confirm(
                    lambda: client.blobs.resend_on_unknown(
                        getattr(encoded, "blobs", ()),
                        lambda: client.wire.enqueue_inline(
                            self.name,
                            encoded.tobytes(),
                            idempotency_key=key,
                            blobs=blobs,
                            wait_s=wait,
                        ),
                    ),
                    idempotency_key=key,
                )
            except (InlineUnavailable, InlineNever, PayloadTooLarge) as e:
                # Redis is above its high-water mark (or the namespace keeps nothing inline): the same bytes go through S3 instead.
                # (413: INLINE_THRESHOLD was lowered since the config was read; read again.)
                log.info(
                    "inline refused, storing through S3 queue=%s bytes=%d reason=%s",
                    self.name,
                    size,
                    e.code,
                )
                enqueued = self._enqueue_through_s3(
                    encoded, progress, idempotency_key=key, blobs=blobs, wait=wait
                )
        else:
            client.payloads.check_size(size)
            enqueued = self._enqueue_through_s3(encoded, progress, blobs=blobs, wait=wait)
        job = Job(client, enqueued.job_id, tier=enqueued.tier, queue=self.name)
        if enqueued.result is not None:
            job._ended(enqueued.result)
        log.info(
            "enqueued job_id=%s queue=%s tier=%s bytes=%d", job.job_id, self.name, job.tier, size
        )
        return job

    def _enqueue_through_s3(
        self,
        encoded: Any,
        progress: bool | None,
        *,
        idempotency_key: str | None = None,
        blobs: tuple[str, ...] = (),
        wait: float | None = None,
    ) -> Enqueued:
        def once() -> Enqueued:
            return self._enqueue_through_s3_once(
                encoded, progress, idempotency_key=idempotency_key, blobs=blobs, wait=wait
            )

        try:
            return once()
        except PolicyMismatch:
            # The namespace's policy changed between the presign and the enqueue: the object
            # carries the old tag or key and made no job. Once more, signed under the new one.
            log.info(
                "namespace policy changed during the upload, uploading again queue=%s", self.name
            )
            return once()

    def _enqueue_through_s3_once(
        self,
        encoded: Any,
        progress: bool | None,
        *,
        idempotency_key: str | None = None,
        blobs: tuple[str, ...] = (),
        wait: float | None = None,
    ) -> Enqueued:
        try:
            ref, job_id = self.client.payloads.store(encoded, "args", progress=progress)
        except EnqueueUnconfirmed:
            raise
        except ServiceUnavailable as e:
            # Presign or upload refused (e.g. 503 redis_memory_full past the hard mark): no job
            # was made, and `submit` says so with the same typed error as an unanswered enqueue.
            raise enqueue_unconfirmed(self.name, e, idempotency_key=idempotency_key) from e
        # The upload is done once; enqueueing the same issued key again is idempotent on the
        # server, so the wire's retries never re-upload.
        return self._confirm(
            lambda: self.client.blobs.resend_on_unknown(
                getattr(encoded, "blobs", ()),
                lambda: self.client.wire.enqueue_ref(self.name, ref, blobs=blobs, wait_s=wait),
            ),
            job_id=job_id,
            idempotency_key=idempotency_key,
        )

    def _confirm(
        self,
        enqueue: Callable[[], Enqueued],
        *,
        idempotency_key: str | None = None,
        job_id: str | None = None,
    ) -> Enqueued:
        """The enqueue's confirmed answer, or EnqueueUnconfirmed: never a job id the control
        plane did not answer for with 200/201."""
        try:
            return enqueue()
        except InlineUnavailable:
            raise
        except ServiceUnavailable as e:
            raise enqueue_unconfirmed(
                self.name, e, idempotency_key=idempotency_key, job_id=job_id
            ) from e


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


class Job(JobHandle):
    client: Client

    def status(self) -> JobInfo:
        status = self.client.wire.job_status(self.job_id)
        self._last = status
        self.tier = self.tier or status.tier
        self.queue = self.queue or status.queue
        return status

    def payloads(self) -> JobPayloads:
        """What the job carried, as stored: `.args` and `.result` (None until it ended with a
        result), each inline bytes or an S3 reference with a GET URL (`payloadstore.codec`
        decodes the bytes). For operators: it never counts as the result's read under
        retention `consume`."""
        return self.client.wire.job_payloads(self.job_id)

    def retry(self) -> RetryAnswer:
        """Queue the job again, with the same id, when it failed (failed, payload_lost,
        payload_corrupt, DeliveryLimitExceeded) or was cancelled and its arguments are still
        stored; NotRetryable (`.reason`: succeeded, queued, running, arguments_expired,
        blob_expired) otherwise. Its next delivery's attempt number goes on from the last; the delivery cap
        counts again from the retry."""
        answer = self.client.wire.retry_job(self.job_id)
        self._result, self._has_result, self._last = None, False, None
        self._answer = None
        return answer

    def cancel(self) -> CancelAnswer:
        """Cancel the job: a queued job ends `cancelled` and never runs (state `cancelled`); a
        running one is asked to stop (state `running`, `cancel_requested` True): its daemon
        learns it from its next heartbeat, stops waiting for the function and ends the job
        `cancelled`. `result()` then raises JobCancelled. A finished job: ConflictError; but
        a retry (after a lost answer or a 5xx) that finds the job `cancelled` answers state
        `cancelled`, as the first attempt's lost 200 would have."""
        return self.client.wire.cancel_job(self.job_id)

    def result(
        self, timeout: float | None = None, *, progress: bool | None = None, copy: bool = False
    ) -> Any:
        """Wait for the job and return its decoded value; `timeout=None` waits as long as it takes.

        Raises JobFailed (remote type, message, traceback; type DeliveryLimitExceeded when its
        daemons kept dying), JobCancelled, PayloadCorrupt, PayloadLost, ResultTimeout,
        JobNotFound.
        """
        # The value is kept as decoded without copy=True (read-only arrays over the bytes);
        # copy=True decodes writable arrays afresh each time, never the kept value.
        if self._has_result and not copy:
            return self._result
        answer = self._done_answer(timeout)
        value = self._value_from(answer, progress=progress, copy=copy)
        if not copy:
            self._result, self._has_result = value, True
        return value

    def result_into(
        self, into: Any, timeout: float | None = None, *, progress: bool | None = None
    ) -> int:
        """Wait for the job and write its result's bytes as stored (the msgpack encoding
        `result()` decodes) into `into`: a path, a binary file opened for writing, or a
        writable buffer of at least that many bytes. A multipart result is read in parallel
        part-aligned ranges and verified part by part, holding a few parts in memory whatever
        its size. Returns the number of bytes written. Raises as `result()`."""
        return self._bytes_into(self._done_answer(timeout), into, progress=progress)

    def _wait_within(self, timeout: float) -> None:
        """Long-poll up to `timeout` seconds; the Job knows its result if the job ended."""
        try:
            self._ended(self._done_answer(timeout))
        except ResultTimeout:
            pass

    def _done_answer(self, timeout: float | None) -> ResultAnswer:
        """Long-poll the job's result in slices until it is done; ResultTimeout after
        `timeout` seconds (None: as long as it takes). A result already known is not asked
        for again."""
        if self._answer is not None:
            return self._answer
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        state: str | None = None
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = RESULT_WAIT_SLICE_S if remaining is None else min(RESULT_WAIT_SLICE_S, remaining)
            answer = self.client.wire.job_result(self.job_id, wait_s=wait)
            state = answer.state or state
            if answer.done:
                return answer
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(self.job_id, timeout or 0.0, state, time.monotonic() - started)

    def _bytes_into(self, answer: ResultAnswer, into: Any, *, progress: bool | None) -> int:
        if answer.result_inline is not None:
            write_into(into, answer.result_inline)
            return len(answer.result_inline)
        if answer.result_ref is not None:
            self.client.payloads.fetch(
                answer.result_ref,
                job_id=self.job_id,
                progress=progress,
                grant=answer.download,
                into=into,
            )
            return int(answer.result_ref.size or 0)
        raise job_error(self.job_id, answer.state, answer.error)

    def _value_from(self, answer: ResultAnswer, *, progress: bool | None, copy: bool) -> Any:
        store = self.client.blobs
        # Blobs in the result read through the GETs handed out with it (downloaded on use).
        downloads = answer.raw.get("blobs")
        if downloads:
            job_id, wire = self.job_id, self.client.wire
            store.renewable(downloads, lambda: wire.job_result(job_id, wait_s=0).raw.get("blobs"))
        token = store.reading(downloads)
        try:
            if answer.result_inline is not None:
                return codec.decode(answer.result_inline, copy=copy)
            if answer.result_ref is not None:
                data = self.client.payloads.fetch(
                    answer.result_ref, job_id=self.job_id, progress=progress, grant=answer.download
                )
                return codec.decode(data, copy=copy)
        finally:
            store.done_reading(token)
        raise job_error(self.job_id, answer.state, answer.error)


# Purge calls a queue may take (each works up to ~10 s on the control plane).
MAX_PURGE_CALLS = 100
# A client or daemon reads `/v1/config` again at most this often (besides after a refusal on a
# limit, and before refusing a size): a changed MAX_PAYLOAD_BYTES or INLINE_THRESHOLD reaches
# long-running processes within minutes.
CONFIG_MAX_AGE_S = 300.0


def config_due(read_at: float) -> bool:
    return time.monotonic() - read_at >= CONFIG_MAX_AGE_S


def read_config(fetch: Callable[[], ServerConfig], cached: ServerConfig | None) -> ServerConfig:
    """A fresh read, or (only for a periodic re-read that fails) the cached config: a control
    plane that is briefly unreachable does not fail the calls that merely consult it."""
    try:
        return fetch()
    except PayloadStoreError as e:
        if cached is None or isinstance(e, AuthError):
            raise
        log.warning("config not read again, keeping the one read before error=%s", e)
        return cached


def job_pages(
    fetch: Callable[[str | None], JobPage], cursor: str | None = None
) -> Iterator[JobPage]:
    """Pages from `fetch(cursor)` until one has no next_cursor; empty pages in between (the
    control plane skipped jobs retried since) are not yielded."""
    while True:
        page = fetch(cursor)
        if page.jobs or page.next_cursor is None:
            yield page
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def purge_all(call: Callable[[], PurgeAnswer]) -> PurgeAnswer:
    cancelled = 0
    for _ in range(MAX_PURGE_CALLS):
        answer = call()
        cancelled += answer.cancelled
        if not answer.remaining or not answer.cancelled:
            break
    return PurgeAnswer(cancelled=cancelled, remaining=answer.remaining)


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
