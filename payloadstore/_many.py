"""Many jobs at once, the parts the sync `Client` and the `AsyncClient` share: how `map` cuts an
iterable into bounded windows and batches, what a refused item becomes, and how `wait` and
`as_completed` watch many jobs with few `jobs:status` calls. Nothing here does I/O.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ._wire import CODE_ERRORS, BatchItem, ItemRefused, JobInfo, ServerConfig, status_error
from .errors import ApiError, BatchError

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
        self.deadline = None if timeout is None else self.started + timeout
        self.chunk = max(1, chunk)

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
