"""The sync transport of the wire: `Wire` sends the requests the shared steps ask for over
`httpx.Client` and sleeps their pauses; the routes (`Routes`), the retries, the answers and
the errors are decided without I/O (`_wire.protocol`, `_wire.calls`, `_wire.parse`)."""

from __future__ import annotations

import time
from typing import TypeVar

import httpx

from .parse import Call, Conversation
from .protocol import Done, Pause, Request, SyncTransport, one
from .routes import Routes

T = TypeVar("T")


class Wire(Routes, SyncTransport):
    """The control plane for one namespace and one token, over `httpx.Client`, with retries.

    Every route method (`Routes`) answers a dataclass or raises a typed error
    (`payloadstore.errors`).
    """

    @staticmethod
    def _new_http(timeout: httpx.Timeout) -> httpx.Client:
        return httpx.Client(timeout=timeout)

    @staticmethod
    def _default_sleep(seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def send(self, call: Call[T]) -> T:
        """Send with retries; return the parsed answer, or raise the typed error."""
        return self.run(one(call))

    def run(self, conversation: Conversation[T]) -> T:
        """Carry out a conversation of calls: each request sent, each pause slept."""
        exchange = self.exchange(conversation)
        step = exchange.reply(None)
        while not isinstance(step, Done):
            if isinstance(step, Pause):
                self._sleep(step.seconds)
                step = exchange.reply(None)
            else:
                step = exchange.reply(self._request(step))
        return step.answer

    def _request(self, request: Request) -> httpx.Response | httpx.TransportError:
        try:
            return self.http.request(**request.kwargs)
        except httpx.TransportError as error:
            return error
