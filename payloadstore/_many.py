"""Many jobs at once, the parts the sync `Client` and the `AsyncClient` share: how `map` cuts an
iterable into bounded windows and batches, what a refused item becomes, and how `wait` and
`as_completed` watch many jobs with few `jobs:status` calls. Nothing here does I/O.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ._wire import (
    CODE_ERRORS,
    BatchItem,
    Enqueued,
    ItemRefused,
    JobInfo,
    PayloadRef,
    ServerConfig,
    calls,
    status_error,
)
from ._wire.parse import Conversation
from .errors import INLINE_REFUSED, ApiError, BatchError, PayloadStoreError, WaitTimeout

log = logging.getLogger("payloadstore")

ALL_COMPLETED = "ALL_COMPLETED"
FIRST_COMPLETED = "FIRST_COMPLETED"
_RETURN_WHEN = {"ALL": ALL_COMPLETED, "FIRST": FIRST_COMPLETED}

# jobs:status: one call for up to batch_max_jobs ids. A lone chunk long-polls this long; with
# several chunks, each round asks all of them at once and the last one waits SHORT_WAIT_S.
LONG_WAIT_S = 10.0
SHORT_WAIT_S = 1.0


def return_when_value(value: str) -> str:
    value = _RETURN_WHEN.get(value, value)
    if value not in (ALL_COMPLETED, FIRST_COMPLETED):
        raise ValueError(f"return_when must be ALL_COMPLETED or FIRST_COMPLETED, not {value!r}")
    return value


def windows(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of at most `size` items: a long iterable is never held whole."""
    iterator = iter(items)
    while window := list(itertools.islice(iterator, size)):
        yield window


# A map window holds at most this many encoded bytes (beside its item count): a generator of
# large arrays is encoded a few at a time, each window sent before the next is encoded.
MAP_WINDOW_BYTES = 256 * 1024 * 1024


def planned_windows(
    calls: Iterable[Any],
    size: int,
    encode: Callable[[int, Any], Any],
    max_bytes: int | None = None,
) -> Iterator[list[Planned]]:
    """Consecutive windows of encoded items (`encode(index, call)`), each of at most `size`
    items and, past its first item, at most `max_bytes` (MAP_WINDOW_BYTES) encoded bytes."""
    max_bytes = MAP_WINDOW_BYTES if max_bytes is None else max_bytes
    window: list[Planned] = []
    held = 0
    for index, call in enumerate(calls):
        encoded = encode(index, call)
        nbytes = int(getattr(encoded, "nbytes", 0))
        if window and held + nbytes > max_bytes:
            yield window
            window, held = [], 0
        window.append(Planned(index, encoded))
        held += nbytes
        if len(window) >= size:
            yield window
            window, held = [], 0
    if window:
        yield window


@dataclass
class Planned:
    """One item of a map window: its index in the input, its encoded payload, and (once known)
    what the batch call carries for it."""

    index: int
    encoded: Any
    item: BatchItem | None = None


def encode_item(index: int, call: dict) -> Any:
    """One map item's call, encoded; a value no reader could decode raises CodecError naming the
    item (before its window, and so before any job of that window, is sent)."""
    from . import codec

    try:
        return codec.encode(call, call=True)
    except codec.CodecError as e:
        raise codec.CodecError(f"item {index}: {e}") from e


def inline_item(encoded: Any) -> BatchItem:
    # Its own key: a retried batch gives back the same job for this item.
    return BatchItem(inline=encoded.tobytes(), idempotency_key=uuid.uuid4().hex)


def split_batches(planned: list[Planned], config: ServerConfig) -> list[list[Planned]]:
    """Consecutive batches within BATCH_MAX_JOBS items and BATCH_MAX_BYTES of inline bytes."""
    batches: list[list[Planned]] = []
    current: list[Planned] = []
    current_bytes = 0
    for p in planned:
        size = len(p.item.inline) if p.item and p.item.inline is not None else 0
        if current and (
            len(current) >= config.batch_max_jobs or current_bytes + size > config.batch_max_bytes
        ):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(p)
        current_bytes += size
    if current:
        batches.append(current)
    return batches


def item_error(refused: ItemRefused, what: str) -> Exception:
    """The typed error of a refused batch item, chosen from its code (as for a single call)."""
    factory = CODE_ERRORS.get(refused.code or "") or status_error(422)
    return factory(f"{what}: {refused.message}", code=refused.code)


def raise_if_refused(jobs: list, errors: dict[int, Exception], queue: str) -> None:
    if errors:
        first = min(errors)
        raise BatchError(
            f"{len(errors)} of {len(jobs)} items were not enqueued on queue {queue} "
            f"(first: item {first}: {getattr(errors[first], 'message', errors[first])})",
            jobs=jobs,
            errors=errors,
        )


class Watch:
    """Which jobs to ask about next and with what wait, for `wait` and `as_completed`."""

    def __init__(self, jobs: Iterable[Any], timeout: float | None, chunk: int):
        self.pending: dict[str, list[Any]] = {}
        for job in jobs:
            self.pending.setdefault(job.job_id, []).append(job)
        self.started = time.monotonic()
        self.timeout = timeout
        self.deadline = None if timeout is None else self.started + timeout
        self.chunk = max(1, chunk)

    def check(self) -> None:
        """WaitTimeout (with the jobs still pending) once `timeout` has run out."""
        if self.expired():
            pending = [j for js in self.pending.values() for j in js]
            raise WaitTimeout(pending, self.timeout or 0.0, time.monotonic() - self.started)

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    def round(self) -> list[tuple[list[str], float]]:
        """The calls of one round: (job ids, wait_s) each."""
        ids = list(self.pending)
        chunks = [ids[i : i + self.chunk] for i in range(0, len(ids), self.chunk)]
        remaining = self.remaining()
        longest = LONG_WAIT_S if len(chunks) == 1 else SHORT_WAIT_S
        last_wait = longest if remaining is None else min(longest, remaining)
        return [(c, last_wait if i == len(chunks) - 1 else 0.0) for i, c in enumerate(chunks)]

    def apply(self, answers: list[JobInfo | ItemRefused]) -> list[Any]:
        """The jobs that are now finished (terminal, or unknown to the control plane)."""
        finished: list[Any] = []
        for answer in answers:
            job_id = answer.job_id
            if job_id is None or job_id not in self.pending:
                continue
            if isinstance(answer, ItemRefused) or answer.done:
                for job in self.pending.pop(job_id):
                    job._finished(answer)
                    finished.append(job)
        return finished


def refused_as_error(answer: ItemRefused) -> ApiError:
    return item_error(answer, f"job {answer.job_id}")  # type: ignore[return-value]  # every class it picks is an ApiError


class MapRun:
    """One `map`/`starmap`: its items in bounded windows, the jobs in input order (None until
    enqueued), each refused item's error, and the decisions on each item and each batch answer.
    The clients do the I/O: blob sends, uploads, and the batch calls (`enqueue`, a conversation
    their wire runs)."""

    def __init__(self, calls_: Iterable[dict], concurrency: int, progress: bool | None):
        # Refused before the clients read the config: a wrong argument is no call, no retry.
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._calls = calls_
        self._concurrency = concurrency
        self.jobs: list[Any] = []
        self.errors: dict[int, Exception] = {}
        #: the uploads' progress bars (on, off, or None: on for large ones when a terminal shows)
        self.progress = progress

    def windows(self, config: ServerConfig) -> Iterator[list[Planned]]:
        """The items, encoded, in windows of a few batches (or of the uploads in flight)."""
        window = max(config.batch_max_jobs, self._concurrency * 4)
        for planned in planned_windows(self._calls, window, encode_item):
            self.jobs.extend([None] * len(planned))
            yield planned

    def result(self, queue: str) -> list[Any]:
        """The jobs, in input order; BatchError when any item was refused."""
        raise_if_refused(self.jobs, self.errors, queue)
        return self.jobs

    def failed(self, p: Planned, error: Exception) -> None:
        self.errors[p.index] = error

    def placed_inline(
        self,
        p: Planned,
        blobs: tuple[str, ...],
        inline_limit: int,
        check_size: Callable[[int], Any],
        *,
        force_s3: bool,
    ) -> bool:
        """Give `p` its inline batch item; False when it goes to S3 (to upload) or was refused
        (its error noted: `p.index in errors`)."""
        if not force_s3 and p.encoded.nbytes <= inline_limit:
            p.item = replace(inline_item(p.encoded), blobs=blobs)
            return True
        try:
            check_size(p.encoded.nbytes)
        except PayloadStoreError as e:
            self.failed(p, e)
        return False

    @staticmethod
    def uploaded(p: Planned, ref: PayloadRef, blobs: tuple[str, ...]) -> None:
        p.item = BatchItem(ref=ref, blobs=blobs)

    def enqueue(
        self,
        namespace: str,
        queue: str,
        planned: list[Planned],
        config: ServerConfig,
        job: Callable[[Enqueued], Any],
        *,
        rerouted: bool,
        resent: bool,
    ) -> Conversation[tuple[list[Planned], list[Planned]]]:
        """Enqueue the planned items that have their item, in batches; the jobs made by
        `job(answer)`. Returns the items to store through S3 instead (inline refused: Redis
        above its high-water mark) and those to send again once their blobs are restored (a
        blob the namespace let go since this process sent it), each once."""
        reroute: list[Planned] = []
        resend: list[Planned] = []
        for batch in split_batches([p for p in planned if p.item], config):
            # Every one of the batch: only planned items that have their item were split.
            items = [p.item for p in batch if p.item is not None]
            try:
                answers = yield calls.enqueue_batch(namespace, queue, items)
            except PayloadStoreError as e:
                for p in batch:
                    self.failed(p, e)
                continue
            for p, answer in zip(batch, answers, strict=False):
                if isinstance(answer, Enqueued):
                    self.jobs[p.index] = job(answer)
                elif answer.code in INLINE_REFUSED and not rerouted:
                    reroute.append(p)
                elif answer.code == "unknown_blob" and not resent and p.encoded.blobs:
                    resend.append(p)
                else:
                    self.failed(p, item_error(answer, f"item {p.index} on queue {queue}"))
        if reroute:
            log.info("inline refused, storing through S3 queue=%s items=%d", queue, len(reroute))
        return reroute, resend
