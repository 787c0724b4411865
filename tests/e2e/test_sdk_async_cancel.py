"""The async client is async to the bottom (issue 47), over the local gateway and the S3 emulator:

- cancelling a task stops its transfer at once: a cancelled `await job.result()` (or
  `result_into`, or an S3-tier `add`, in one PUT or in parts) reads or sends almost nothing more,
  and the coroutine and `asyncio.run()` return within a second of the cancel (before: the worker
  thread read on to the end, and `asyncio.run()` waited for it);
- an AsyncClient used from a second event loop raises RuntimeError at once (before: an S3-tier
  `add` waited forever on the first loop);
- a result's `Blob.path` read on the loop's thread after its URL expired raises a clear error
  (before: the refetch of fresh URLs waited on the loop it blocked: a deadlock).

S3 is slowed down on the client's side only (an `s3_http` whose transport paces each body), so a
whole transfer would take several seconds."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import payloadstore as ps
from payloadstore import AsyncClient
from payloadstore._blob_cache import ENV_BLOB_CACHE
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

MiB = 1 << 20
SIZE = 40 * MiB
CANCEL_AFTER_S = 0.5


def echo(x):
    return x


class Paced(httpx.SyncByteStream):
    """A body moved `chunk` bytes at a time at `rate` bytes/s; each chunk's time is recorded."""

    def __init__(self, stream, rate: float, chunk: int, moved: list[tuple[float, int]]):
        self._stream, self._rate, self._chunk, self._moved = stream, rate, chunk, moved

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._stream:
            view = memoryview(piece)
            for at in range(0, len(view), self._chunk):
                part = view[at : at + self._chunk]
                time.sleep(len(part) / self._rate)
                self._moved.append((time.monotonic(), len(part)))
                yield bytes(part)

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class SlowS3(httpx.HTTPTransport):
    """S3 over a slow link: GET bodies (and PUT bodies) paced, per connection."""

    def __init__(self, *, rate: float, chunk: int = 256 * 1024, methods=("GET", "PUT")):
        super().__init__()
        self.rate, self.chunk, self.methods = rate, chunk, methods
        self.moved: list[tuple[float, int]] = []
        self.requests: list[tuple[float, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((time.monotonic(), request.method))
        if request.method == "PUT" and "PUT" in self.methods:
            request.stream = Paced(request.stream, self.rate, self.chunk, self.moved)
        response = super().handle_request(request)
        if request.method == "GET" and "GET" in self.methods:
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=Paced(response.stream, self.rate, self.chunk, self.moved),
                extensions=response.extensions,
            )
        return response

    def after(self, moment: float) -> tuple[int, int]:
        """(chunks, bytes) moved after `moment`."""
        late = [n for t, n in self.moved if t > moment]
        return len(late), sum(late)


def slow_client(gateway, transport: SlowS3) -> AsyncClient:
    return AsyncClient(
        gateway.url,
        gateway.token("dev", "client"),
        "dev",
        s3_http=httpx.Client(transport=transport, timeout=60),
    )


def cancelled(start_coro, *, after_s: float = CANCEL_AFTER_S) -> dict[str, float]:
    """asyncio.run() of `start_coro(ready)`, whose task is cancelled `after_s` once it set
    `ready`: when the cancel was sent, when the task ended, when asyncio.run() returned."""
    times: dict[str, float] = {}

    async def main() -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(start_coro(ready))
        await ready.wait()
        await asyncio.sleep(after_s)
        assert not task.done(), "the transfer ended before the cancel: slow S3 down more"
        times["cancel"] = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        times["task"] = time.monotonic()

    asyncio.run(main())
    times["run"] = time.monotonic()
    return times


def report(what: str, times: dict[str, float], transport: SlowS3, total: int) -> tuple[int, int]:
    chunks, late = transport.after(times["cancel"])
    moved = sum(n for _, n in transport.moved)
    print(
        f"{what}: cancel->task {times['task'] - times['cancel']:.3f} s, cancel->asyncio.run "
        f"{times['run'] - times['cancel']:.3f} s; after the cancel {chunks} chunks "
        f"({late / MiB:.2f} MiB); moved {moved / MiB:.1f} of {total / MiB:.0f} MiB"
    )
    return chunks, late


@pytest.fixture
def done_job(local_gateway):
    """A finished job whose result is 40 MiB in S3 (one object)."""
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("async-cancel")
    data = os.urandom(SIZE)
    with client, daemon_client, daemon_thread(daemon_client, queue, echo):
        job = client.queue(queue).add(data)
        client.wait([job], timeout=120)
    return job.job_id


@pytest.mark.parametrize("how", ["result", "result_into"])
def test_cancelling_a_result_read_stops_its_download_within_a_second(
    local_gateway, done_job, tmp_path, how
):
    # Given a 40 MiB result in S3 and a link that takes 4 s to bring it (10 MiB/s)
    transport = SlowS3(rate=10 * MiB, methods=("GET",))
    target = tmp_path / "result.bin"
    target.write_bytes(b"the previous result")

    async def read(ready: asyncio.Event) -> None:
        async with slow_client(local_gateway, transport) as aclient:
            job = aclient.job(done_job)
            await job.status()
            ready.set()
            if how == "result":
                await job.result(timeout=60)
            else:
                await job.result_into(target, timeout=60)

    # When the reading task is cancelled 0.5 s in
    times = cancelled(read)
    _chunks, late = report(f"cancelled {how}", times, transport, SIZE)
    # Then the task and asyncio.run() returned within a second of the cancel, and the download
    # stopped at its next slice (1 MiB) instead of reading on
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
    assert late <= 2 * MiB
    assert sum(n for _, n in transport.moved) < SIZE / 2
    # and a download into a path left the old file whole, and no partial file beside it
    assert target.read_bytes() == b"the previous result"
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]


def test_cancelling_an_s3_tier_add_stops_its_upload_within_a_second(local_gateway):
    # Given 40 MiB to add (one PUT to S3) over a link that takes 4 s to send it
    transport = SlowS3(rate=10 * MiB, methods=("PUT",))
    queue = unique_queue("async-cancel-add")
    data = os.urandom(SIZE)

    async def add(ready: asyncio.Event) -> None:
        async with slow_client(local_gateway, transport) as aclient:
            await aclient.config()
            ready.set()
            await aclient.queue(queue).add(data)

    # When the adding task is cancelled 0.5 s in
    times = cancelled(add)
    _chunks, late = report("cancelled add (one PUT)", times, transport, SIZE)
    # Then it returned within a second, and the upload sent at most its slice in hand
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
    assert late <= 2 * MiB
    assert sum(n for _, n in transport.moved) < SIZE / 2


@pytest.mark.parametrize("how", ["add", "result"])
def test_cancelling_a_multipart_transfer_stops_every_part_within_a_second(small_parts_gateway, how):
    # Given 40 MiB in parts of 5 MiB (8 parts, 8 at once), each part on a 1 MiB/s link: 5 s
    transport = SlowS3(
        rate=1 * MiB, chunk=64 * 1024, methods=("GET",) if how == "result" else ("PUT",)
    )
    queue = unique_queue("async-cancel-parts")
    data = os.urandom(SIZE)
    job_id = None
    if how == "result":
        client, daemon_client = clients(small_parts_gateway)
        with client, daemon_client, daemon_thread(daemon_client, queue, echo):
            job = client.queue(queue).add(data)
            client.wait([job], timeout=120)
            job_id = job.job_id

    async def transfer(ready: asyncio.Event) -> None:
        async with slow_client(small_parts_gateway, transport) as aclient:
            await aclient.config()
            if job_id is not None:
                job = aclient.job(job_id)
                assert (await job.status()).result_ref["multipart"]["part_count"] == 9
                ready.set()
                await job.result(timeout=60)
            else:
                ready.set()
                await aclient.queue(queue).add(data)

    # When the task is cancelled 0.5 s in
    times = cancelled(transfer)
    _chunks, late = report(f"cancelled multipart {how}", times, transport, SIZE)
    started_late = [t for t, _ in transport.requests if t > times["cancel"] + 0.05]
    # Then it returned within a second, no part started after the cancel, and each part in
    # flight moved at most its slice in hand (1 MiB each, 8 at once)
    assert times["task"] - times["cancel"] < 1.0
    assert times["run"] - times["cancel"] < 1.0
    assert started_late == []
    assert late <= 8 * MiB
    assert sum(n for _, n in transport.moved) < SIZE / 2


def test_an_async_client_used_from_a_second_event_loop_fails_at_once(local_gateway):
    # Given an AsyncClient first used on one event loop, left open and not running
    aclient = AsyncClient(local_gateway.url, local_gateway.token("dev", "client"), "dev")
    first = asyncio.new_event_loop()
    queue = unique_queue("async-second-loop")
    first.run_until_complete(aclient.queue(queue).add(os.urandom(MiB)))  # an S3-tier add
    outcome: list[BaseException | str] = []

    def second_loop() -> None:
        try:
            asyncio.run(aclient.queue(queue).add(os.urandom(MiB)))
            outcome.append("added")
        except BaseException as e:  # noqa: BLE001 - looked at below
            outcome.append(e)

    # When an S3-tier add is awaited from a second loop, in another thread
    started = time.monotonic()
    thread = threading.Thread(target=second_loop, daemon=True)
    thread.start()
    thread.join(timeout=10)
    took = time.monotonic() - started
    try:
        # Then it raised RuntimeError at once, naming the problem (before: it waited forever)
        assert not thread.is_alive(), "the add from a second event loop hung"
        print(f"second loop: {outcome[0]!r} in {took:.3f} s")
        assert isinstance(outcome[0], RuntimeError)
        assert "event loop" in str(outcome[0])
        assert took < 2.0
        # and the client still works on its own loop
        job = first.run_until_complete(aclient.queue(queue).add(os.urandom(MiB)))
        assert job.job_id
    finally:
        first.run_until_complete(aclient.aclose())
        first.close()


def test_a_result_blob_path_read_on_the_loop_after_its_url_expired_is_a_clear_error(
    start_local_gateway, tmp_path, monkeypatch
):
    # Given GETs valid for 2 s, and a result that is a blob whose GET expired
    monkeypatch.setenv(ENV_BLOB_CACHE, str(tmp_path / "blob-cache"))
    gateway = start_local_gateway(PRESIGN_TTL_S="2")
    _, daemon_client = clients(gateway)
    queue = unique_queue("blob-path-on-loop")
    content = os.urandom(64 * 1024)
    outcome: list[BaseException | bytes] = []

    async def read_on_loop() -> None:
        async with AsyncClient(gateway.url, gateway.token("dev", "client"), "dev") as aclient:
            job = await aclient.queue(queue).add()
            result = await job.result(timeout=60)
            await asyncio.sleep(3)
            try:
                # When its path is read in the coroutine itself (on the loop's thread)
                outcome.append(result.path.read_bytes())
            except Exception as e:  # noqa: BLE001 - looked at below
                outcome.append(e)
            # and, as the error says, from a worker thread
            outcome.append(await asyncio.to_thread(lambda: result.path.read_bytes()))

    with daemon_thread(daemon_client, queue, lambda: ps.blob(content)):
        thread = threading.Thread(target=lambda: asyncio.run(read_on_loop()), daemon=True)
        thread.start()
        thread.join(timeout=60)
    # Then it did not deadlock the loop: a clear error said how to read it, and the worker
    # thread's read got the bytes
    assert not thread.is_alive(), "reading Blob.path on the loop deadlocked it"
    print(f"Blob.path on the loop: {outcome[0]!r}")
    assert isinstance(outcome[0], RuntimeError)
    assert "asyncio.to_thread(lambda: blob.path)" in str(outcome[0])
    assert outcome[1] == content
