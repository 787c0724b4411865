"""The asyncio transport of the wire: `AsyncWire` sends the requests the shared steps ask for
over `httpx.AsyncClient` and awaits their pauses. Everything else, the route methods included
(`_wire.routes.Routes`), is the sync `Wire`'s: the retries, the answers and the errors are
decided without I/O (`_wire.protocol`, `_wire.calls`, `_wire.parse`)."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import httpx

from ._wire.parse import Call, Conversation
from ._wire.protocol import AsyncTransport, Done, Pause, Request, one
from ._wire.routes import Routes

T = TypeVar("T")


class AsyncWire(Routes, AsyncTransport):
    """The control plane for one namespace and one token, over `httpx.AsyncClient`: the same
    route methods as `Wire`, awaited."""

    @staticmethod
    def _new_http(timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout)

    @staticmethod
    async def _default_sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def send(self, call: Call[T]) -> T:
        """`Wire.send` with `await`: same retries, same typed errors."""
        return await self.run(one(call))

    async def run(self, conversation: Conversation[T]) -> T:
        """`Wire.run` with `await`: the requests over `httpx.AsyncClient`."""
        exchange = self.exchange(conversation)
        step = exchange.reply(None)
        while not isinstance(step, Done):
            if isinstance(step, Pause):
                await self._sleep(step.seconds)
                step = exchange.reply(None)
            else:
                step = exchange.reply(await self._request(step))
        return step.answer

    async def _request(self, request: Request) -> httpx.Response | httpx.TransportError:
        try:
            return await self.http.request(**request.kwargs)
        except httpx.TransportError as error:
            return error
