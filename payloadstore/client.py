"""The client SDK: `Client`, `Queue.add`, `Job.result`.

A job's payload is its call, encoded once: `{"args": [...], "kwargs": {...}}` (see the codec for
the value types). Encoded sizes up to the control plane's `inline_threshold` travel inline as a
raw msgpack body; larger ones go straight to S3 through a presigned PUT (in parts above its
`multipart_threshold`) and the job carries only the reference.

What this client decides it shares with `AsyncClient`, written once without I/O
(`payloadstore._client_core`, `_many.MapRun`); this module keeps the calls and the threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Self

import httpx

from . import _client_core as core
from ._blobs import Blob, BlobStore
from ._client_core import (
    DEFAULT_MAP_CONCURRENCY,
    DEFAULT_NAMESPACE,
    DoneAndPending,
    JobHandle,
    find_devstack_file,
    job_error,
    read_devstack,
)
from ._http import RetryPolicy
from ._many import ALL_COMPLETED, FIRST_COMPLETED, MapRun, Planned, Watch
from ._payloads import Payloads, write_into
from ._wire import (
    TERMINAL_STATES,
    CancelAnswer,
    Enqueued,
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
    EnqueueUnconfirmed,
    InlineUnavailable,
    PayloadStoreError,
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
        core.checked_settings(endpoint, token, namespace)
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
        self._configs = core.ConfigCache()
        self._config_lock = threading.Lock()
        self.wire.on_limit_refused = self.config_is_stale

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> Client:
        """A client from $PAYLOADSTORE_ENDPOINT, $PAYLOADSTORE_TOKEN and $PAYLOADSTORE_NAMESPACE
        (default `dev`), or from `environ` when given."""
        return cls(*core.env_settings(environ), **kwargs)

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
        return cls(*core.devstack_settings(path, namespace, role), **kwargs)

    @classmethod
    def from_env_or_devstack(cls, *, role: str = "client", **kwargs: Any) -> Client:
        """Environment variables when set, else the local stack's file."""
        if core.settings_from_env():
            return cls.from_env(**kwargs)
        return cls.from_devstack(namespace=core.env_namespace(), role=role, **kwargs)

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
            return self.wire.run(self._configs.read())

    def config_is_stale(self) -> None:
        """Read `/v1/config` again before its next use."""
        self._configs.stale()

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
            watch.check()
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
        waiting = core.Waiting(jobs, return_when)
        with contextlib.suppress(WaitTimeout):
            for job in self.as_completed(waiting.jobs, timeout):
                if waiting.finished(job):
                    break
        return waiting.answer()


class Queue:
    """A queue of the namespace: enqueue calls of its daemons' function, read its jobs and
    stats, redrive or purge it."""

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
        wire = self.client.wire
        while True:
            page = wire.list_jobs(self.name, state=state, limit=limit, cursor=cursor)
            if core.page_shown(page):
                yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

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
        return self.client.wire.run(core.purge_all(self.client.namespace, self.name))

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
        return self._map(core.item_calls(iterable), concurrency, progress)

    def starmap(
        self,
        iterable: Iterable[tuple | list],
        *,
        concurrency: int = DEFAULT_MAP_CONCURRENCY,
        progress: bool | None = False,
    ) -> list[Job]:
        """`map` for argument tuples: each item is called as `fn(*item)`."""
        return self._map(core.args_calls(iterable), concurrency, progress)

    def _map(self, calls: Iterable[dict], concurrency: int, progress: bool | None) -> list[Job]:
        run = MapRun(calls, concurrency, progress)
        config = self.client.config
        with ThreadPoolExecutor(concurrency, thread_name_prefix="payloadstore-map") as pool:
            for planned in run.windows(config):
                self._prepare(planned, pool, run, force_s3=False)
                self._enqueue_planned(planned, pool, run)
        return run.result(self.name)

    def _prepare(
        self,
        planned: list[Planned],
        pool: ThreadPoolExecutor,
        run: MapRun,
        *,
        force_s3: bool,
    ) -> None:
        """Give each item its batch entry: inline bytes, or the reference of its finished upload
        (uploads run `concurrency` at a time)."""
        client = self.client
        limit, check_size = client.config.inline_limit, client.payloads.check_size
        uploads = {}
        for p in planned:
            try:
                blobs = client.blobs.send(p.encoded.blobs)
            except PayloadStoreError as e:
                run.failed(p, e)
                continue
            if run.placed_inline(p, blobs, limit, check_size, force_s3=force_s3):
                continue
            if p.index not in run.errors:
                store = client.payloads.store
                uploads[p.index] = (
                    pool.submit(store, p.encoded, "args", progress=run.progress),
                    blobs,
                )
        for p in planned:
            if p.index not in uploads:
                continue
            future, blobs = uploads[p.index]
            try:
                run.uploaded(p, future.result()[0], blobs)
            except PayloadStoreError as e:
                run.failed(p, e)

    def _enqueue_planned(
        self,
        planned: list[Planned],
        pool: ThreadPoolExecutor,
        run: MapRun,
        *,
        rerouted: bool = False,
        resent: bool = False,
    ) -> None:
        client, queue = self.client, self.name
        job = partial(Job._enqueued, client, queue=queue)
        conversation = run.enqueue(
            client.namespace, queue, planned, client.config, job, rerouted=rerouted, resent=resent
        )
        reroute, resend = client.wire.run(conversation)
        if reroute:
            # Redis is above its high-water mark: these bytes go through S3 instead.
            self._prepare(reroute, pool, run, force_s3=True)
            self._enqueue_planned(reroute, pool, run, rerouted=True)
        if resend:
            # A blob the namespace let go since this process sent it: check or upload it again
            # from its source, then send those items once more.
            again: list[Planned] = []
            for p in resend:
                try:
                    client.blobs.restore(p.encoded.blobs)
                except PayloadStoreError as e:
                    run.failed(p, e)
                    continue
                again.append(p)
            self._enqueue_planned(again, pool, run, rerouted=rerouted, resent=True)

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
        budget = core.Budget(timeout)
        job = self.submit_encoded(
            core.encoded_call(args, kwargs), wait=budget.enqueue_wait(core.RESULT_WAIT_SLICE_S)
        )
        try:
            return job.result(timeout=budget.left())
        except ResultTimeout as e:
            raise budget.timed_out(job.job_id, e) from None

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
        budget = core.Budget(wait)
        job = self.submit_encoded(
            core.encoded_call(args, kwargs),
            progress=progress,
            idempotency_key=idempotency_key,
            wait=budget.enqueue_wait(None),
        )
        left = budget.worth_waiting(job)
        if left is not None:
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
            except core.INLINE_REFUSALS as e:
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
        job = Job._enqueued(client, enqueued, self.name)
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
            raise core.enqueue_unconfirmed(self.name, e, idempotency_key=idempotency_key) from e
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
            raise core.enqueue_unconfirmed(
                self.name, e, idempotency_key=idempotency_key, job_id=job_id
            ) from e


class Job(JobHandle):
    client: Client

    def status(self) -> JobInfo:
        return self._seen(self.client.wire.job_status(self.job_id))

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
        self._forget()
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
        return self._value_from(self._done_answer(timeout), progress=progress, copy=copy)

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
        return self.client.wire.run(core.result_polls(self.client.namespace, self.job_id, timeout))

    def _bytes_into(self, answer: ResultAnswer, into: Any, *, progress: bool | None) -> int:
        if answer.result_inline is not None:
            write_into(into, answer.result_inline)
            return len(answer.result_inline)
        ref = answer.result_ref
        if ref is None:
            raise job_error(self.job_id, answer.state, answer.error)
        fetch = self.client.payloads.fetch
        fetch(ref, job_id=self.job_id, progress=progress, grant=answer.download, into=into)
        return int(ref.size or 0)

    def _value_from(self, answer: ResultAnswer, *, progress: bool | None, copy: bool) -> Any:
        store = self.client.blobs
        # Blobs in the result read through the GETs handed out with it (downloaded on use).
        downloads = answer.raw.get("blobs")
        if downloads:
            job_id, wire = self.job_id, self.client.wire
            store.renewable(downloads, lambda: wire.job_result(job_id, wait_s=0).raw.get("blobs"))
        if answer.result_inline is not None:
            data: bytes | bytearray = answer.result_inline
        elif answer.result_ref is not None:
            data = self.client.payloads.fetch(
                answer.result_ref, job_id=self.job_id, progress=progress, grant=answer.download
            )
        else:
            raise job_error(self.job_id, answer.state, answer.error)
        return self._decoded(store, downloads, data, copy)
