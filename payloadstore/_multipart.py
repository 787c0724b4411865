"""Multipart transfers: payloads above the control plane's MULTIPART_THRESHOLD move in parts.

What the upload and the download share: how a payload is cut into parts (`part_ranges`), how
many move at once (`workers`), the composite sha256 of the parts, and the progress bar the
worker threads share. The upload is `_multipart_upload` (parts hashed while the earlier ones
upload, their URLs asked for in batches), the download `_multipart_download` (part-aligned
ranges, several at once, checked as they land, into a buffer or a file).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from ._transfer import Progress, want_progress

# Parts in flight at once (each a connection): PAYLOADSTORE_PART_WORKERS overrides.
DEFAULT_WORKERS = 8
# What a part hands to its socket, or reads from it, at a time: a quarter of a single transfer's
# slice, since the parts in flight share the link (each moves a fraction as fast) and a stopped
# transfer waits for the slice each part has in hand.
PART_SLICE_BYTES = 256 * 1024


def workers() -> int:
    try:
        return max(1, int(os.environ.get("PAYLOADSTORE_PART_WORKERS", DEFAULT_WORKERS)))
    except ValueError:
        return DEFAULT_WORKERS


def part_ranges(size: int, part_bytes: int) -> list[tuple[int, int, int]]:
    """(part number, offset, length) of each part."""
    return [(i // part_bytes + 1, i, min(part_bytes, size - i)) for i in range(0, size, part_bytes)]


def composite_hex(digests: Iterable[bytes]) -> str:
    """S3's COMPOSITE SHA-256 of parts, hex: sha256 of their binary sha256s in part order."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


class PartsProgress:
    """Progress shared by the worker threads."""

    def __init__(self, size: int, desc: str, progress: bool | None):
        self._bar = Progress(size, desc, want_progress(progress, size))
        self._lock = threading.Lock()

    def update(self, n: int) -> None:
        if self._bar.enabled:
            with self._lock:
                self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


def slices(
    data: memoryview | bytes, halt: Callable[[], None] | None = None
) -> Iterable[memoryview]:
    """A part in PART_SLICE_BYTES views; `halt()` before each (it raises to stop the part)."""
    view = memoryview(data)
    for start in range(0, len(view), PART_SLICE_BYTES):
        if halt is not None:
            halt()
        yield view[start : start + PART_SLICE_BYTES]


def first_failure(futures: list[Future]) -> BaseException | None:
    for f in futures:
        if f.done() and f.exception() is not None:
            return f.exception()
    return None
