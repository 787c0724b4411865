"""How a call of the wire is carried out, without I/O: the steps both transports take, the sync
`Wire` (`_wire.sync`) and the asyncio `AsyncWire` (`_async_wire`). A transport only sends the
requests and sleeps the pauses these steps ask for; everything else is decided here, once.

- `attempts(call, ...)`: one call's attempts, as a generator. It yields a `Request`, is sent the
  `httpx.Response` (or the `httpx.TransportError` the send raised), yields a `Pause` before a
  retry, and returns the parsed answer or raises the typed error (`Call.errors`, `error_for`).
- `Exchange`: a conversation (one call, or several in a row such as every page of a list) with
  each call's attempts, stepped by a transport: `reply(None)` first, then `reply(what came)`
  for each step, until `Done`. A call's answer is sent into the conversation, its typed error
  thrown into it where it yielded the call.
- `Route`: a route's method, written once (`_wire.routes.Routes`) for both transports: on a
  `SyncTransport` it answers; on an `AsyncTransport` it is a coroutine function with the same
  arguments (the route builder's, namespace aside).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

import httpx

from .._http import RetryPolicy, retry_delay
from ..errors import PayloadStoreError
from .parse import (
    CONNECT_TIMEOUT_S,
    Call,
    Conversation,
    http_kwargs,
    raise_error,
    refused_on_a_limit,
    retried_answer,
    unreachable,
)

log = logging.getLogger("payloadstore")

T = TypeVar("T")
P = ParamSpec("P")
H = TypeVar("H", httpx.Client, httpx.AsyncClient)


@dataclass(frozen=True)
class Request:
    """Send this: the arguments of `httpx.Client.request` / `httpx.AsyncClient.request`."""

    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Pause:
    """Sleep this long, then reply None: a retry comes next."""

    seconds: float


@dataclass(frozen=True)
class Done(Generic[T]):
    answer: T


# What a transport replies to a step: the response, the transport error the send raised, or
# None (to the first step and after a pause).
Reply = httpx.Response | httpx.TransportError | None
Step = Request | Pause


def attempts(
    call: Call[T],
    endpoint: str,
    token: str,
    policy: RetryPolicy,
    on_limit_refused: Callable[[], None],
) -> Generator[Step, Reply, T]:
    """One call, sent again while `policy` says so: its parsed answer or its typed error."""
    request = Request(http_kwargs(call, endpoint, token))
    attempt = 0
    while True:
        reply = yield request
        if isinstance(reply, httpx.TransportError):
            delay = retry_delay(policy, attempt, error=reply)
            if delay is None:
                raise unreachable(call, endpoint, reply) from reply
            log.warning(
                "retrying what=%s error=%s attempt=%d delay_s=%.2f",
                call.what,
                type(reply).__name__,
                attempt + 1,
                delay,
            )
        else:
            assert reply is not None  # a transport replies to a request with what came
            if reply.status_code in call.ok:
                return call.parse(reply)
            delay = retry_delay(policy, attempt, response=reply)
            if delay is None:
                answer = retried_answer(call, attempt, reply)
                if answer is not None:
                    return answer
                if refused_on_a_limit(reply):
                    on_limit_refused()
                raise_error(call, reply)
            log.warning(
                "retrying what=%s status=%d attempt=%d delay_s=%.2f",
                call.what,
                reply.status_code,
                attempt + 1,
                delay,
            )
        yield Pause(delay)
        attempt += 1


def one(call: Call[T]) -> Conversation[T]:
    """A conversation of one call."""
    return (yield call)


class Transport(Generic[H]):
    """What both transports hold: the control plane's address, the token, the namespace of
    every route, the retry policy, the HTTP client `H` and the sleep, and whom to tell when the
    control plane refuses on a limit. A transport class says how to make its HTTP client
    (`_new_http`) and how it sleeps by default (`_default_sleep`)."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: H | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], Any] | None = None,
    ):
        self.endpoint = endpoint.rstrip("/")
        self.namespace = namespace
        self._token = token
        self.retry = retry or RetryPolicy()
        self._owns_http = http is None
        self.http: H = http or self._new_http(httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S))
        self._sleep = sleep or self._default_sleep
        #: called when the control plane refuses on a limit (the client's config is stale then)
        self.on_limit_refused: Callable[[], None] | None = None

    @staticmethod
    def _new_http(timeout: httpx.Timeout) -> H:
        raise NotImplementedError

    @staticmethod
    def _default_sleep(seconds: float) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(endpoint={self.endpoint!r}, namespace={self.namespace!r})"

    def exchange(self, conversation: Conversation[T]) -> Exchange[T]:
        return Exchange(conversation, self._attempts)

    def _attempts(self, call: Call[T]) -> Generator[Step, Reply, T]:
        return attempts(call, self.endpoint, self._token, self.retry, self._limit_refused)

    def _limit_refused(self) -> None:
        if self.on_limit_refused is not None:
            self.on_limit_refused()


class SyncTransport(Transport[httpx.Client]):
    def run(self, conversation: Conversation[T]) -> T:
        raise NotImplementedError


class AsyncTransport(Transport[httpx.AsyncClient]):
    async def run(self, conversation: Conversation[T]) -> T:
        raise NotImplementedError


class Exchange(Generic[T]):
    """A conversation with each of its calls' attempts, as steps for a transport to take."""

    def __init__(
        self,
        conversation: Conversation[T],
        attempts: Callable[[Call[Any]], Generator[Step, Reply, Any]],
    ):
        self._steps = self._walk(conversation, attempts)

    @staticmethod
    def _walk(
        conversation: Conversation[T],
        attempts: Callable[[Call[Any]], Generator[Step, Reply, Any]],
    ) -> Generator[Step, Reply, T]:
        answer: Any = None
        error: PayloadStoreError | None = None
        while True:
            try:
                call = conversation.send(answer) if error is None else conversation.throw(error)
            except StopIteration as done:
                return done.value
            try:
                answer, error = (yield from attempts(call)), None
            except PayloadStoreError as e:
                # The conversation gets a call's typed error where it yielded the call: it may
                # handle it (e.g. keep a config read before) or let it through.
                answer, error = None, e

    def reply(self, reply: Reply) -> Step | Done[T]:
        """The next step, given what the last one brought (None to begin and after a pause)."""
        try:
            return self._steps.send(reply)
        except StopIteration as done:
            return Done(done.value)


def answered(annotation: Any) -> Any:
    """What a builder's `Call[X]` or `Conversation[X]` return annotation answers: X (for each
    member of a union of them). Annotations are strings here (postponed evaluation)."""
    if not isinstance(annotation, str):
        return annotation
    members, depth, start = [], 0, 0
    for i, char in enumerate(annotation):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "|" and depth == 0:
            members.append(annotation[start:i].strip())
            start = i + 1
    members.append(annotation[start:].strip())
    unwrapped = []
    for member in members:
        for wrapper in ("Call[", "Conversation["):
            if member.startswith(wrapper) and member.endswith("]"):
                member = member[len(wrapper) : -1]
        unwrapped.append(member)
    return " | ".join(unwrapped)


class Route(Generic[P, T]):
    """A route's method on both transports, from its builder `build(namespace, ...)` (which
    returns a `Call` or a `Conversation`): `wire.route(...)` answers on a `SyncTransport`;
    `await wire.route(...)` on an `AsyncTransport`. Same arguments, same docstring."""

    def __init__(self, build: Callable[Concatenate[str, P], Call[T] | Conversation[T]]):
        self._build = build
        self._name = build.__name__
        # What `inspect` and `help()` show of the method: the builder's, without the namespace,
        # answering what its call answers (the builder returns the `Call`, the method its answer).
        built = inspect.signature(build)
        self.signature = built.replace(
            parameters=list(built.parameters.values())[1:],
            return_annotation=answered(built.return_annotation),
        )

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, instance: SyncTransport, owner: type | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, instance: AsyncTransport, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, instance: Transport | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        talk = partial(self.conversation, instance.namespace)
        method: Callable[..., Any]
        if isinstance(instance, AsyncTransport):

            async def awaited(*args: Any, **kwargs: Any) -> Any:
                return await instance.run(talk(*args, **kwargs))

            method = awaited
        else:
            assert isinstance(instance, SyncTransport)

            def answered(*args: Any, **kwargs: Any) -> Any:
                return instance.run(talk(*args, **kwargs))

            method = answered
        method.__name__ = method.__qualname__ = self._name
        method.__doc__ = self._build.__doc__
        method.__signature__ = self.signature  # type: ignore[attr-defined,union-attr]
        return method

    def __call__(self, instance: Transport, *args: P.args, **kwargs: P.kwargs) -> Any:
        """`Wire.route(wire, ...)`, as an unbound method is called."""
        return self.__get__(instance)(*args, **kwargs)  # type: ignore[call-overload]

    def conversation(self, namespace: str, *args: Any, **kwargs: Any) -> Conversation[T]:
        built = self._build(namespace, *args, **kwargs)  # type: ignore[arg-type]
        return one(built) if isinstance(built, Call) else built
