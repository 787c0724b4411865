"""How map cuts work into batches and how wait/as_completed choose their status calls."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from payloadstore import Client, RetryPolicy, codec
from payloadstore._many import (
    LONG_WAIT_S,
    SHORT_WAIT_S,
    Planned,
    Watch,
    inline_item,
    return_when_value,
    split_batches,
    windows,
)
from payloadstore._wire import BatchItem, ItemRefused, JobStatus, PayloadRef, ServerConfig
from payloadstore.aio import AsyncClient


def config(max_jobs=3, max_bytes=1000):
    return ServerConfig(1000, 10_000, 900, batch_max_jobs=max_jobs, batch_max_bytes=max_bytes)


def planned(sizes):
    out = []
    for i, size in enumerate(sizes):
        p = Planned(i, codec.encode(b"x" * size))
        p.item = inline_item(p.encoded) if size < 1000 else BatchItem(ref=PayloadRef("b", "k"))
        out.append(p)
    return out


def test_windows_hold_at_most_size_items_and_read_lazily():
    consumed = []

    def endless():
        i = 0
        while True:
            consumed.append(i)
            yield i
            i += 1

    first = next(windows(endless(), 4))
    assert first == [0, 1, 2, 3] and len(consumed) == 4


def test_batches_respect_the_job_count_and_the_inline_bytes():
    by_count = split_batches(planned([10] * 7), config(max_jobs=3))
    assert [len(b) for b in by_count] == [3, 3, 1]
    by_bytes = split_batches(planned([400, 400, 400, 5000, 10]), config(max_jobs=10))
    # Two ~400 B items fit 1000 B; the reference costs no inline bytes
    assert [[p.index for p in b] for b in by_bytes] == [[0, 1], [2, 3, 4]]


def test_each_inline_item_carries_its_own_idempotency_key():
    a, b = planned([10, 10])
    assert a.item.idempotency_key and a.item.idempotency_key != b.item.idempotency_key


class FakeJob:
    def __init__(self, job_id):
        self.job_id = job_id
        self.seen = None

    def _finished(self, answer):
        self.seen = answer


def test_one_chunk_long_polls_and_many_chunks_ask_all_then_wait_briefly_on_the_last():
    one = Watch([FakeJob(f"j{i}") for i in range(5)], timeout=None, chunk=100)
    assert one.round() == [([f"j{i}" for i in range(5)], LONG_WAIT_S)]
    many = Watch([FakeJob(f"j{i}") for i in range(250)], timeout=None, chunk=100)
    calls = many.round()
    assert [len(ids) for ids, _ in calls] == [100, 100, 50]
    assert [w for _, w in calls] == [0.0, 0.0, SHORT_WAIT_S]
    short = Watch([FakeJob("j")], timeout=0.2, chunk=100)
    assert short.round()[0][1] <= 0.2


def test_terminal_and_unknown_jobs_finish_and_leave_the_watch():
    jobs = [FakeJob("a"), FakeJob("b"), FakeJob("c")]
    watch = Watch(jobs, timeout=None, chunk=100)
    finished = watch.apply(
        [
            JobStatus("a", "succeeded"),
            JobStatus("b", "running"),
            ItemRefused("not_found", "job c not found", job_id="c"),
        ]
    )
    assert [j.job_id for j in finished] == ["a", "c"]
    assert list(watch.pending) == ["b"]
    assert jobs[0].seen.state == "succeeded"


def test_return_when_accepts_the_short_names():
    assert return_when_value("FIRST") == "FIRST_COMPLETED"
    assert return_when_value("ALL_COMPLETED") == "ALL_COMPLETED"
    with pytest.raises(ValueError):
        return_when_value("SOME")


def test_map_windows_are_bounded_by_bytes_as_well_as_by_count():
    from types import SimpleNamespace

    from payloadstore._many import MAP_WINDOW_BYTES, planned_windows

    # Given a generator of ten 100 MiB items (issue 46: a window held ~100 encoded items)
    pulled: list[int] = []

    def calls():
        for i in range(10):
            pulled.append(i)
            yield i

    def encode(index, call):
        return SimpleNamespace(nbytes=100 * 1024 * 1024)

    # When cut into windows of up to 100 items
    seen = []
    for window in planned_windows(calls(), 100, encode):
        # Then no window holds more than MAP_WINDOW_BYTES (past its first item), and no item
        # is encoded before the window before it has been handed over
        assert sum(p.encoded.nbytes for p in window) <= max(
            MAP_WINDOW_BYTES, window[0].encoded.nbytes
        )
        assert len(pulled) <= window[-1].index + 2
        seen.append([p.index for p in window])
    assert seen == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    # and small items are still cut by count, and one item over the bound travels alone
    small = list(planned_windows(range(5), 2, lambda i, c: SimpleNamespace(nbytes=10)))
    assert [[p.index for p in w] for w in small] == [[0, 1], [2, 3], [4]]
    huge = list(planned_windows(range(2), 9, lambda i, c: SimpleNamespace(nbytes=1 << 40)))
    assert [[p.index for p in w] for w in huge] == [[0], [1]]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("method", ["map", "starmap"])
def test_given_a_concurrency_below_one_when_mapping_then_value_error_before_any_call(kind, method):
    # Given: a control plane that would answer every call with a 503 (retried, slept on)
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(503)

    retry = RetryPolicy(max_attempts=2, base_s=0.0)
    items = [(1,), (2,)]
    # When: map or starmap with concurrency=0
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        if kind == "sync":
            client = Client(
                "http://cp.test",
                "t",
                "ns",
                http=httpx.Client(transport=httpx.MockTransport(handler)),
                retry=retry,
                sleep=lambda s: None,
            )
            getattr(client.queue("q"), method)(items, concurrency=0)
        else:

            async def main() -> None:
                transport = httpx.MockTransport(handler)
                async with AsyncClient(
                    "http://cp.test",
                    "t",
                    "ns",
                    http=httpx.AsyncClient(transport=transport),
                    retry=retry,
                ) as client:
                    await getattr(client.queue("q"), method)(items, concurrency=0)

            asyncio.run(main())
    # Then: refused as the argument it is, without reading the config first
    assert requests == []
