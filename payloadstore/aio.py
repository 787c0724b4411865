"""`AsyncClient`: the `Client` surface for asyncio (FastAPI services, notebooks, async daemons).

    async with AsyncClient.from_env_or_devstack() as client:
        job = await client.queue("resize").add(image, width=256)
        print(await job.result())
        jobs = await client.queue("resize").map(images, concurrency=16)
        async for job in client.as_completed(jobs):
            print(job.job_id, await job.result())

Control-plane calls go over `httpx.AsyncClient` through the same wire layer as the sync client
(`payloadstore._wire`: request builders, answer parsers, error mapping, retry policy), with
`AsyncWire` as the transport. Payload bytes move through the very same code as the sync client
(`payloadstore._payloads` + `_transfer`: streamed uploads, one preallocated download buffer,
sha256 verification, re-presign on expiry, retries, progress bars), run in a worker thread:
hashing and copying 100 MiB would hold the event loop for tens of milliseconds, and a second,
async copy of that code would drift. Its presign calls hop back onto the event loop.
What the two clients decide is written once, without I/O (`payloadstore._client_core`,
`_many.MapRun`): settings, the config cache, the result long-poll, `wait=`/`timeout=`, map's
planning and batch answers. Calls that only talk to the control plane are conversations the
wire runs (`await self.wire.run(...)`); this module keeps the awaits and the worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from functools import partial
from typing import Any, Self

import httpx

from . import _client_core as core
from ._async_bridge import OnLoop
from ._async_wire import AsyncWire
from ._blobs import Blob, BlobStore
from ._client_core import (
    DEFAULT_MAP_CONCURRENCY,
    DEFAULT_NAMESPACE,
    DoneAndPending,
    JobHandle,
    job_error,
)
from ._http import RetryPolicy
from ._many import ALL_COMPLETED, MapRun, Planned, Watch
from ._payloads import Payloads, write_into
from ._wire import (
    Enqueued,
    JobInfo,
    JobPage,
    JobPayloads,
    PurgeAnswer,
    QueueInfo,
    RedriveAnswer,
    ResultAnswer,
    RetryAnswer,
    ServerConfig,
    Throughput,
)
from .errors import (
    ConflictError,
    PayloadStoreError,
    PolicyMismatch,
    ResultTimeout,
    ServiceUnavailable,
    WaitTimeout,
)

__all__ = ["AsyncClient", "AsyncJob", "AsyncQueue"]

log = logging.getLogger("payloadstore")


def _result_blobs(wire: Any, job_id: str) -> Any:
    """A job's result's `blobs` (fresh GETs), read again through a blocking wire."""
    return wire.job_result(job_id, wait_s=0).raw.get("blobs")


class AsyncClient:
    """The control plane for one namespace and one token, for asyncio code.

    `http` (an `httpx.AsyncClient`, control plane) and `s3_http` (an `httpx.Client` for the
    presigned URLs, used from worker threads) may be injected.
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: httpx.AsyncClient | None = None,
        s3_http: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        progress: bool | None = None,
        timeout_s: float = 30.0,
    ):
        core.checked_settings(endpoint, token, namespace)
        self.namespace = namespace
        self.retry = retry or RetryPolicy()
        self.progress = progress
        self.wire = AsyncWire(
            endpoint, token, namespace, http=http, retry=self.retry, timeout_s=timeout_s
        )
        self._owns_s3 = s3_http is None
        self.s3_http = s3_http or httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0))
        self._configs = core.ConfigCache()
        self._config_lock = asyncio.Lock()
        self.wire.on_limit_refused = self.config_is_stale
        self._payloads: Payloads | None = None
        self._blobs: BlobStore | None = None
        self._on_loop: OnLoop | None = None

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> AsyncClient:
        """As `Client.from_env`."""
        return cls(*core.env_settings(environ), **kwargs)

    @classmethod
    def from_devstack(
        cls,
        path: str | os.PathLike | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "client",
        **kwargs: Any,
    ) -> AsyncClient:
        """As `Client.from_devstack`."""
        return cls(*core.devstack_settings(path, namespace, role), **kwargs)

    @classmethod
    def from_env_or_devstack(cls, *, role: str = "client", **kwargs: Any) -> AsyncClient:
        return (
            cls.from_env(**kwargs)
            if core.settings_from_env()
            else cls.from_devstack(namespace=core.env_namespace(), role=role, **kwargs)
        )

    async def aclose(self) -> None:
        await self.wire.aclose()
        if self._owns_s3:
            self.s3_http.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient(endpoint={self.wire.endpoint!r}, namespace={self.namespace!r})"

    # -- user API -----------------------------------------------------------------------------

    async def config(self, *, refresh: bool = False) -> ServerConfig:
        """As `Client.config`: read at first use, again once CONFIG_MAX_AGE_S old, after a
        refusal on a limit, or now with `refresh=True`."""
        async with self._config_lock:
            if refresh:
                self.config_is_stale()
            return await self.wire.run(self._configs.read())

    def config_is_stale(self) -> None:
        """As `Client.config_is_stale`."""
        self._configs.stale()

    async def payloads(self) -> Payloads:
        """The shared S3 transfer code, bound to this client's loop (call from the loop)."""
        if self._payloads is None:
            config = await self.config()
            self._payloads = Payloads(
                self._loop_bridge(),  # type: ignore[arg-type]  # Wire's calls, blocking
                self.s3_http,
                # The latest config read (the awaited reads refresh it), never a copy.
                config=lambda: self._configs.value or config,
                retry=self.retry,
                progress=self.progress,
            )
        return self._payloads

    def blob_store(self) -> BlobStore:
        """The blob uploads, GETs and cache of this client, bound to its loop (call from it)."""
        if self._blobs is None:
            self._blobs = BlobStore(
                self._loop_bridge(),
                self.s3_http,
                retry=self.retry,
                # (the config once fetched: blobs in parts are CRC64NVME uploads then)
                config=lambda: self._configs.value,
            )
        return self._blobs

    def _loop_bridge(self) -> OnLoop:
        """The blocking wire of the transfer threads, bound to the loop that first used it."""
        if self._on_loop is None:
            self._on_loop = OnLoop(self.wire, asyncio.get_running_loop())
        return self._on_loop

    async def _in_thread(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """`fn` in a worker thread, stopped (at its next slice) when the awaiting task is
        cancelled; RuntimeError at once from an event loop other than this client's."""
        return await self._loop_bridge().run(fn, *args, **kwargs)

    async def blob(self, source: Any) -> Blob:
        """As `Client.blob`: store content once in this namespace (hashing and uploading run in
        a worker thread) and return its `Blob`."""
        return await self._in_thread(self.blob_store().put, source)

    async def _resend_on_unknown(self, blobs: Any, call: Any) -> Any:
        """As BlobStore.resend_on_unknown, for an awaited call: on `409 unknown_blob` the
        blobs are checked or uploaded again from their sources (in a worker thread) and the
        call is sent once more."""
        try:
            return await call()
        except ConflictError as e:
            if not core.restore_and_resend(e, blobs):
                raise
            await self._in_thread(self.blob_store().restore, blobs, e.details.get("blobs"))
        return await call()

    async def _send_blobs(self, encoded: Any) -> tuple[str, ...]:
        if not getattr(encoded, "blobs", ()):
            return ()
        return await self._in_thread(self.blob_store().send, encoded.blobs)

    def queue(self, name: str) -> AsyncQueue:
        return AsyncQueue(self, name)

    def job(self, job_id: str) -> AsyncJob:
        return AsyncJob(self, job_id)

    async def queues(self) -> list[QueueInfo]:
        return await self.wire.queue_list()

    async def throughput(self, queue: str | None = None) -> Throughput:
        """As `Client.throughput`."""
        return await self.wire.throughput(queue)

    async def health(self) -> tuple[bool, dict]:
        answer = await self.wire.health()
        return answer.healthy, answer.body

    async def as_completed(
        self, jobs: Iterable[AsyncJob], timeout: float | None = None
    ) -> AsyncIterator[AsyncJob]:
        """Each job as it finishes; WaitTimeout when `timeout` runs out first."""
        watch = Watch(jobs, timeout, (await self.config()).batch_max_jobs)
        while watch.pending:
            watch.check()
            for ids, wait_s in watch.round():
                for job in watch.apply(await self.wire.jobs_status(ids, wait_s=wait_s)):
                    yield job

    async def wait(
        self,
        jobs: Iterable[AsyncJob],
        timeout: float | None = None,
        return_when: str = ALL_COMPLETED,
    ) -> DoneAndPending:
        """As `Client.wait`."""
        waiting = core.Waiting(jobs, return_when)
        with contextlib.suppress(WaitTimeout):
            async for job in self.as_completed(waiting.jobs, timeout):
                if waiting.finished(job):
                    break
        return waiting.answer()


class AsyncQueue:
    """`Queue` for asyncio: the same calls, awaited."""

    def __init__(self, client: AsyncClient, name: str):
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r}, namespace={self.client.namespace!r})"

    async def jobs(
        self, state: str = "queued", limit: int = 50, *, cursor: str | None = None
    ) -> AsyncIterator[JobPage]:
        """As `Queue.jobs`: an async iterator over pages (`async for page in queue.jobs(...)`)."""
        wire = self.client.wire
        while True:
            page = await wire.list_jobs(self.name, state=state, limit=limit, cursor=cursor)
            if core.page_shown(page):
                yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def redrive(
        self, states: Iterable[str] | None = None, limit: int | None = None
    ) -> RedriveAnswer:
        """As `Queue.redrive`."""
        return await self.client.wire.redrive(
            self.name, states=list(states) if states else None, limit=limit
        )

    async def purge(self) -> PurgeAnswer:
        """As `Queue.purge`."""
        return await self.client.wire.run(core.purge_all(self.client.namespace, self.name))

    async def stats(self) -> QueueInfo:
        return await self.client.wire.queue_stats(self.name)

    async def throughput(self) -> Throughput:
        """As `Queue.throughput`."""
        return await self.client.wire.throughput(self.name)

    async def add(self, *args: Any, wait: float | None = None, **kwargs: Any) -> AsyncJob:
        """As `Queue.add`, `wait=S` included."""
        return await self.submit(args, kwargs, wait=wait)

    async def call(self, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """As `Queue.call`: the function's value, in one call for a job that ends within the
        control plane's long-poll."""
        budget = core.Budget(timeout)
        wait = budget.enqueue_wait(core.RESULT_WAIT_SLICE_S)
        job = await self._submit_encoded(core.encoded_call(args, kwargs), None, None, wait)
        try:
            return await job.result(timeout=budget.left())
        except ResultTimeout as e:
            raise budget.timed_out(job.job_id, e) from None

    async def submit(
        self,
        args: tuple | list = (),
        kwargs: dict | None = None,
        *,
        progress: bool | None = None,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> AsyncJob:
        """As `Queue.submit`: only a job the control plane confirmed as queued is returned."""
        budget = core.Budget(wait)
        encoded = core.encoded_call(args, kwargs)
        job = await self._submit_encoded(
            encoded, progress, idempotency_key, budget.enqueue_wait(None)
        )
        left = budget.worth_waiting(job)
        if left is not None:
            await job._wait_within(left)
        return job

    async def _submit_encoded(
        self,
        encoded: Any,
        progress: bool | None,
        idempotency_key: str | None,
        wait: float | None,
    ) -> AsyncJob:
        client = self.client
        config = await client.config()
        size = encoded.nbytes
        blobs = await client._send_blobs(encoded)
        if size <= config.inline_limit:
            key = idempotency_key or uuid.uuid4().hex
            try:
                enqueued = await client._resend_on_unknown(
                    getattr(encoded, "blobs", ()),
                    lambda: client.wire.enqueue_inline(
                        self.name, encoded.tobytes(), idempotency_key=key, blobs=blobs, wait_s=wait
                    ),
                )
            except core.INLINE_REFUSALS:
                # (413: INLINE_THRESHOLD was lowered since the config was read; read again.)
                enqueued = await self._enqueue_through_s3(encoded, progress, blobs, wait)
            except ServiceUnavailable as e:
                raise core.enqueue_unconfirmed(self.name, e, idempotency_key=key) from e
        else:
            if size > config.max_payload_bytes:
                await client.config(refresh=True)  # a cap raised since: not refused on the old one
            (await client.payloads()).check_size(size)
            enqueued = await self._enqueue_through_s3(encoded, progress, blobs, wait)
        return AsyncJob._enqueued(client, enqueued, self.name)

    async def _enqueue_through_s3(
        self,
        encoded: Any,
        progress: bool | None,
        blobs: tuple[str, ...] = (),
        wait: float | None = None,
    ) -> Enqueued:
        try:
            return await self._enqueue_through_s3_once(encoded, progress, blobs, wait)
        except PolicyMismatch:
            # As Queue's: the policy changed between the presign and the enqueue; once more.
            return await self._enqueue_through_s3_once(encoded, progress, blobs, wait)

    async def _enqueue_through_s3_once(
        self,
        encoded: Any,
        progress: bool | None,
        blobs: tuple[str, ...] = (),
        wait: float | None = None,
    ) -> Enqueued:
        payloads = await self.client.payloads()
        ref, job_id = await self.client._in_thread(
            payloads.store, encoded, "args", progress=progress
        )
        try:
            return await self.client._resend_on_unknown(
                getattr(encoded, "blobs", ()),
                lambda: self.client.wire.enqueue_ref(self.name, ref, blobs=blobs, wait_s=wait),
            )
        except ServiceUnavailable as e:
            raise core.enqueue_unconfirmed(self.name, e, job_id=job_id) from e

    async def map(
        self,
        iterable: Iterable[Any],
        *,
        concurrency: int = DEFAULT_MAP_CONCURRENCY,
        progress: bool | None = False,
    ) -> list[AsyncJob]:
        """As `Queue.map`: batches of inline items, S3 uploads `concurrency` at a time."""
        return await self._map(core.item_calls(iterable), concurrency, progress)

    async def starmap(
        self,
        iterable: Iterable[tuple | list],
        *,
        concurrency: int = DEFAULT_MAP_CONCURRENCY,
        progress: bool | None = False,
    ) -> list[AsyncJob]:
        """As `Queue.starmap`."""
        return await self._map(core.args_calls(iterable), concurrency, progress)

    async def _map(
        self, calls: Iterable[dict], concurrency: int, progress: bool | None
    ) -> list[AsyncJob]:
        run = MapRun(calls, concurrency, progress)
        limit = asyncio.Semaphore(concurrency)
        for planned in run.windows(await self.client.config()):
            await self._prepare(planned, limit, run, force_s3=False)
            await self._enqueue_planned(planned, limit, run)
        return run.result(self.name)

    async def _prepare(
        self,
        planned: list[Planned],
        limit: asyncio.Semaphore,
        run: MapRun,
        *,
        force_s3: bool,
    ) -> None:
        config = await self.client.config()
        if any(p.encoded.nbytes > config.max_payload_bytes for p in planned):
            # A cap raised since the config was read: not refused on the old one.
            config = await self.client.config(refresh=True)
        payloads = await self.client.payloads()
        progress = run.progress

        async def upload(p: Planned, blobs: tuple[str, ...]) -> None:
            async with limit:
                try:
                    ref, _ = await self.client._in_thread(
                        payloads.store, p.encoded, "args", progress=progress
                    )
                    run.uploaded(p, ref, blobs)
                except PayloadStoreError as e:
                    run.failed(p, e)

        uploads = []
        for p in planned:
            try:
                blobs = await self.client._send_blobs(p.encoded)
            except PayloadStoreError as e:
                run.failed(p, e)
                continue
            placed = run.placed_inline(
                p, blobs, config.inline_limit, payloads.check_size, force_s3=force_s3
            )
            if not placed and p.index not in run.errors:
                uploads.append(upload(p, blobs))
        await asyncio.gather(*uploads)

    async def _enqueue_planned(
        self,
        planned: list[Planned],
        limit: asyncio.Semaphore,
        run: MapRun,
        *,
        rerouted: bool = False,
        resent: bool = False,
    ) -> None:
        client = self.client
        reroute, resend = await client.wire.run(
            run.enqueue(
                client.namespace,
                self.name,
                planned,
                await client.config(),
                partial(AsyncJob._enqueued, client, queue=self.name),
                rerouted=rerouted,
                resent=resent,
            )
        )
        if reroute:
            await self._prepare(reroute, limit, run, force_s3=True)
            await self._enqueue_planned(reroute, limit, run, rerouted=True)
        if resend:
            await self._resend(resend, limit, run, rerouted=rerouted)

    async def _resend(
        self,
        planned: list[Planned],
        limit: asyncio.Semaphore,
        run: MapRun,
        *,
        rerouted: bool,
    ) -> None:
        """A blob the namespace let go since it was sent: restored from its source, then those
        items are sent once more."""
        again: list[Planned] = []
        for p in planned:
            try:
                await self.client._in_thread(self.client.blob_store().restore, p.encoded.blobs)
            except PayloadStoreError as e:
                run.failed(p, e)
                continue
            again.append(p)
        await self._enqueue_planned(again, limit, run, rerouted=rerouted, resent=True)


class AsyncJob(JobHandle):
    client: AsyncClient

    async def retry(self) -> RetryAnswer:
        """As `Job.retry`."""
        answer = await self.client.wire.retry_job(self.job_id)
        self._forget()
        return answer

    async def status(self) -> JobInfo:
        return self._seen(await self.client.wire.job_status(self.job_id))

    async def payloads(self) -> JobPayloads:
        """As `Job.payloads`."""
        return await self.client.wire.job_payloads(self.job_id)

    async def _wait_within(self, timeout: float) -> None:
        """As `Job._wait_within`."""
        try:
            self._ended(await self._done_answer(timeout))
        except ResultTimeout:
            pass

    async def _done_answer(self, timeout: float | None) -> ResultAnswer:
        """As `Job._done_answer`: the job's result long-polled in slices until it is done (a
        result already known is not asked for again)."""
        if self._answer is not None:
            return self._answer
        polls = core.result_polls(self.client.namespace, self.job_id, timeout)
        return await self.client.wire.run(polls)

    async def result_into(
        self, into: Any, timeout: float | None = None, *, progress: bool | None = None
    ) -> int:
        """As `Job.result_into`: the result's bytes as stored into a path, a binary file or a
        writable buffer, in bounded memory; the number of bytes written."""
        answer = await self._done_answer(timeout)
        if answer.result_inline is not None:
            await self.client._in_thread(write_into, into, answer.result_inline)
            return len(answer.result_inline)
        if answer.result_ref is None:
            raise job_error(self.job_id, answer.state, answer.error)
        payloads = await self.client.payloads()
        await self.client._in_thread(
            payloads.fetch,
            answer.result_ref,
            job_id=self.job_id,
            progress=progress,
            grant=answer.download,
            into=into,
        )
        return int(answer.result_ref.size or 0)

    async def result(
        self, timeout: float | None = None, *, progress: bool | None = None, copy: bool = False
    ) -> Any:
        """As `Job.result`. Cancelling the awaiting task cancels the long-poll at once."""
        if self._has_result and not copy:
            return self._result
        answer = await self._done_answer(timeout)
        store = self.client.blob_store()
        downloads = answer.raw.get("blobs")
        if downloads:
            # As Job.result: a GET refused later (expired) is asked for again, once
            # (the store's wire blocks on this loop: read blobs from a worker thread).
            store.renewable(downloads, partial(_result_blobs, store.wire, self.job_id))
        data: bytes | bytearray
        if answer.result_inline is not None:
            data = answer.result_inline
        elif answer.result_ref is not None:
            payloads = await self.client.payloads()
            data = await self.client._in_thread(
                payloads.fetch,
                answer.result_ref,
                job_id=self.job_id,
                progress=progress,
                grant=answer.download,
            )
        else:
            raise job_error(self.job_id, answer.state, answer.error)
        return self._decoded(store, downloads, data, copy)
