"""The queue listing comes in pages (`next_after`, issue 43): the SDK's sync and async wires
follow them and answer every queue once."""

from __future__ import annotations

import asyncio

import httpx

from payloadstore._async_wire import AsyncWire
from payloadstore._wire import Wire


def paged(names: list[str], per_page: int, seen: list):
    def handle(request: httpx.Request) -> httpx.Response:
        after = request.url.params.get("after")
        seen.append(after)
        rest = [n for n in names if after is None or n > after]
        page = rest[:per_page]
        body: dict = {
            "queues": [{"name": n, "queued": 0, "in_flight": 0, "failed": 0} for n in page]
        }
        if len(rest) > per_page:
            body["next_after"] = page[-1]
        return httpx.Response(200, json=body)

    return handle


NAMES = [f"q{i:03d}" for i in range(25)]


def test_the_sync_wire_lists_every_queue_over_pages():
    seen: list = []
    wire = Wire(
        "http://cp.test",
        "pst_x",
        "team",
        http=httpx.Client(transport=httpx.MockTransport(paged(NAMES, 10, seen))),
    )
    assert [q.name for q in wire.queue_list()] == NAMES
    assert seen == [None, "q009", "q019"]


def test_the_async_wire_lists_every_queue_over_pages():
    seen: list = []

    async def main():
        wire = AsyncWire(
            "http://cp.test",
            "pst_x",
            "team",
            http=httpx.AsyncClient(transport=httpx.MockTransport(paged(NAMES, 10, seen))),
        )
        return await wire.queue_list()

    assert [q.name for q in asyncio.run(main())] == NAMES
    assert seen == [None, "q009", "q019"]
