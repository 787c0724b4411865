"""The v1 wire over `httpx.AsyncClient`: the asyncio twin of `_wire.Wire`.

It shares everything with the sync transport but the socket and the sleep: the route builders
and parsers (`_wire.<route>(...)` -> `Call`), `http_kwargs`, the error mapping (`error_for`) and
the retry decision (`_http.retry_delay`). A route added to `_wire` gets its one-line
`async def` here as well (see the module docstring of `_wire`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, overload

import httpx

from . import _wire
from ._http import RetryPolicy, retry_delay
from ._wire import (
    CONNECT_TIMEOUT_S,
    MSGPACK,
    Call,
    CancelAnswer,
    DownloadGrant,
    Enqueued,
    Health,
    HeartbeatAnswer,
    JobInfo,
    JobPage,
    LeasesAnswer,
    PayloadRef,
    PolledJob,
    PurgeAnswer,
    QueueInfo,
    RedriveAnswer,
    ResultAnswer,
    RetryAnswer,
    ServerConfig,
    UploadGrant,
    http_kwargs,
    raise_error,
    refused_on_a_limit,
    retried_answer,
    unreachable,
)

log = logging.getLogger("payloadstore")

T = TypeVar("T")


class AsyncWire:
    """The control plane for one namespace and one token, over `httpx.AsyncClient`."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ):
        self.endpoint = endpoint.rstrip("/")
        self.namespace = namespace
        self._token = token
        self._owns_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        )
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        #: called when the control plane refuses on a limit (the client's config is stale then)
        self.on_limit_refused: Callable[[], None] | None = None

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    def __repr__(self) -> str:
        return f"AsyncWire(endpoint={self.endpoint!r}, namespace={self.namespace!r})"

    async def send(self, call: Call[T]) -> T:
        """`Wire.send` with `await`: same retries, same typed errors."""
        kwargs = http_kwargs(call, self.endpoint, self._token)
        attempt = 0
        while True:
            try:
                response = await self.http.request(**kwargs)
            except httpx.TransportError as e:
                delay = retry_delay(self.retry, attempt, error=e)
                if delay is None:
                    raise unreachable(call, self.endpoint, e) from e
                log.warning(
                    "retrying what=%s error=%s attempt=%d delay_s=%.2f",
                    call.what,
                    type(e).__name__,
                    attempt + 1,
                    delay,
                )
            else:
                if response.status_code in call.ok:
                    return call.parse(response)
                delay = retry_delay(self.retry, attempt, response=response)
                if delay is None:
                    answer = retried_answer(call, attempt, response)
                    if answer is not None:
                        return answer
                    if self.on_limit_refused is not None and refused_on_a_limit(response):
                        self.on_limit_refused()
                    raise_error(call, response)
                log.warning(
                    "retrying what=%s status=%d attempt=%d delay_s=%.2f",
                    call.what,
                    response.status_code,
                    attempt + 1,
                    delay,
                )
            await self._sleep(delay)
            attempt += 1

    # -- one method per route (the same names and arguments as `Wire`) ---------------------------

    async def config(self) -> ServerConfig:
        return await self.send(_wire.config())

    async def health(self, details: bool = False) -> Health:
        return await self.send(_wire.health(details))

    async def presign_put(
        self,
        *,
        size: int,
        kind: str,
        sha256: str | None,
        content_type: str = MSGPACK,
        job_id: str | None = None,
        lease: str | None = None,
        crc64nvme: str | None = None,
        checksum_algorithm: str | None = None,
    ) -> UploadGrant:
        return await self.send(
            _wire.presign_put(
                self.namespace,
                size=size,
                kind=kind,
                sha256=sha256,
                content_type=content_type,
                job_id=job_id,
                lease=lease,
                crc64nvme=crc64nvme,
                checksum_algorithm=checksum_algorithm,
            )
        )

    async def presign_get(self, key: str, *, job_id: str | None = None) -> DownloadGrant:
        return await self.send(_wire.presign_get(self.namespace, key, job_id=job_id))

    async def presign_parts(
        self, job_id: str, kind: str, parts: list[dict], *, lease: str | None = None
    ) -> dict:
        return await self.send(
            _wire.presign_parts(self.namespace, job_id, kind, parts, lease=lease)
        )

    async def enqueue_inline(
        self,
        queue: str,
        data: bytes,
        *,
        idempotency_key: str,
        blobs: tuple[str, ...] = (),
        wait_s: float | None = None,
    ) -> Enqueued:
        return await self.send(
            _wire.enqueue_inline(
                self.namespace,
                queue,
                data,
                idempotency_key=idempotency_key,
                blobs=blobs,
                wait_s=wait_s,
            )
        )

    async def enqueue_ref(
        self,
        queue: str,
        ref: PayloadRef,
        *,
        blobs: tuple[str, ...] = (),
        wait_s: float | None = None,
    ) -> Enqueued:
        return await self.send(
            _wire.enqueue_ref(self.namespace, queue, ref, blobs=blobs, wait_s=wait_s)
        )

    async def blob(
        self,
        sha256: str,
        size: int,
        *,
        checksum_algorithm: str | None = None,
        crc64nvme: str | None = None,
    ) -> dict[str, Any]:
        return await self.send(
            _wire.blob(
                self.namespace,
                sha256,
                size,
                checksum_algorithm=checksum_algorithm,
                crc64nvme=crc64nvme,
            )
        )

    async def blob_parts(self, sha256: str, parts: list[dict]) -> dict:
        return await self.send(_wire.blob_parts(self.namespace, sha256, parts))

    async def job_status(self, job_id: str) -> JobInfo:
        return await self.send(_wire.job_status(self.namespace, job_id))

    async def job_result(self, job_id: str, *, wait_s: float) -> ResultAnswer:
        return await self.send(_wire.job_result(self.namespace, job_id, wait_s=wait_s))

    async def enqueue_batch(
        self, queue: str, items: list[_wire.BatchItem], *, wait_s: float | None = None
    ) -> list[Enqueued | _wire.ItemRefused]:
        return await self.send(_wire.enqueue_batch(self.namespace, queue, items, wait_s=wait_s))

    async def jobs_status(
        self, job_ids: list[str], *, wait_s: float = 0.0
    ) -> list[JobInfo | _wire.ItemRefused]:
        return await self.send(_wire.jobs_status(self.namespace, job_ids, wait_s=wait_s))

    async def queue_list(self) -> list[QueueInfo]:
        """Every queue of the namespace, page after page (as Wire.queue_list)."""
        page = await self.send(_wire.queue_list(self.namespace))
        found = list(page)
        while page.next_after:
            page = await self.send(_wire.queue_list(self.namespace, page.next_after))
            found += page
        return found

    async def queue_stats(self, queue: str) -> QueueInfo:
        return await self.send(_wire.queue_stats(self.namespace, queue))

    @overload
    async def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: None = None
    ) -> PolledJob | None: ...
    @overload
    async def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int
    ) -> list[PolledJob]: ...
    async def poll(
        self, queues: list[str], *, wait_s: float, daemon_id: str, max_jobs: int | None = None
    ) -> PolledJob | None | list[PolledJob]:
        if max_jobs is None:
            return await self.send(
                _wire.poll(self.namespace, queues, wait_s=wait_s, daemon_id=daemon_id)
            )
        return await self.send(
            _wire.poll(
                self.namespace, queues, wait_s=wait_s, daemon_id=daemon_id, max_jobs=max_jobs
            )
        )

    async def post_result(
        self,
        job_id: str,
        *,
        inline: bytes | None = None,
        ref: PayloadRef | None = None,
        error: Mapping[str, Any] | None = None,
        lease: str | None = None,
        blobs: tuple[str, ...] = (),
        next: _wire.NextJobs | None = None,
    ) -> list[PolledJob] | None:
        return await self.send(
            _wire.post_result(
                self.namespace,
                job_id,
                inline=inline,
                ref=ref,
                error=error,
                lease=lease,
                blobs=blobs,
                next=next,
            )
        )

    async def report_failure(
        self,
        job_id: str,
        *,
        state: str,
        detail: str,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
        lease: str | None = None,
        next: _wire.NextJobs | None = None,
        expected_crc64nvme: str | None = None,
        actual_crc64nvme: str | None = None,
    ) -> list[PolledJob] | None:
        return await self.send(
            _wire.report_failure(
                self.namespace,
                job_id,
                state=state,
                detail=detail,
                expected_sha256=expected_sha256,
                actual_sha256=actual_sha256,
                lease=lease,
                next=next,
                expected_crc64nvme=expected_crc64nvme,
                actual_crc64nvme=actual_crc64nvme,
            )
        )

    async def heartbeat(self, job_id: str, lease: str) -> HeartbeatAnswer:
        return await self.send(_wire.heartbeat(self.namespace, job_id, lease))

    async def leases(
        self, daemon_id: str, held: Mapping[str, str], *, wait_s: float
    ) -> LeasesAnswer:
        return await self.send(_wire.leases(self.namespace, daemon_id, held, wait_s=wait_s))

    async def cancel_job(self, job_id: str) -> CancelAnswer:
        return await self.send(_wire.cancel_job(self.namespace, job_id))

    async def list_jobs(
        self, queue: str, *, state: str = "queued", limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        return await self.send(
            _wire.list_jobs(self.namespace, queue, state=state, limit=limit, cursor=cursor)
        )

    async def retry_job(self, job_id: str) -> RetryAnswer:
        return await self.send(_wire.retry_job(self.namespace, job_id))

    async def throughput(self, queue: str | None = None) -> _wire.Throughput:
        return await self.send(_wire.throughput(self.namespace, queue))

    async def job_payloads(self, job_id: str) -> _wire.JobPayloads:
        return await self.send(_wire.job_payloads(self.namespace, job_id))

    async def redrive(
        self, queue: str, *, states: list[str] | None = None, limit: int | None = None
    ) -> RedriveAnswer:
        return await self.send(_wire.redrive(self.namespace, queue, states=states, limit=limit))

    async def purge(self, queue: str) -> PurgeAnswer:
        return await self.send(_wire.purge(self.namespace, queue))
