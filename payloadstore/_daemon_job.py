"""One job on a Daemon: the context its function runs in (`payloadstore.current_job()`) and how
its delivery ended on this daemon (`DeliveryOutcome`, as counted in `Daemon.stats`)."""

from __future__ import annotations

import threading
from enum import StrEnum


class DeliveryOutcome(StrEnum):
    """How one delivery ended on this daemon, as counted in `Daemon.stats`. Not job states:
    REFUSED, ABANDONED and TAKEN say what the daemon did, and the job goes on elsewhere."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAYLOAD_CORRUPT = "payload_corrupt"
    PAYLOAD_LOST = "payload_lost"
    # The control plane would not take the result (409: redelivered elsewhere).
    REFUSED = "refused"
    # Could not fetch its arguments (S3 unreachable or refusing, an unwritable blob cache), store
    # or post its result, or any other error of this one delivery: nothing was posted, and the
    # job is delivered again when its lease runs out (VISIBILITY_TIMEOUT_S); the daemon goes on.
    ABANDONED = "abandoned"
    # A client cancelled the job while it ran; posted as error type Cancelled.
    CANCELLED = "cancelled"
    # The lease ran out and the job was delivered again: nothing posted.
    TAKEN = "taken"


SUCCEEDED, FAILED = DeliveryOutcome.SUCCEEDED, DeliveryOutcome.FAILED
PAYLOAD_CORRUPT, PAYLOAD_LOST = DeliveryOutcome.PAYLOAD_CORRUPT, DeliveryOutcome.PAYLOAD_LOST
REFUSED, ABANDONED = DeliveryOutcome.REFUSED, DeliveryOutcome.ABANDONED
CANCELLED, TAKEN = DeliveryOutcome.CANCELLED, DeliveryOutcome.TAKEN

CANCELLED_ERROR_TYPE = "Cancelled"

_current = threading.local()


class CurrentJob:
    """The job the calling thread's function runs for: `payloadstore.current_job()`."""

    def __init__(self, job_id: str, queue: str | None, attempt: int | None, lease: str | None):
        self.job_id = job_id
        self.queue = queue
        self.attempt = attempt
        self.lease = lease
        self._cancel = threading.Event()
        self._lost = threading.Event()
        self._changed = threading.Event()
        self._finishing = threading.Event()  # the outcome is being posted: heartbeats are moot
        self._ran_s: float | None = None  # the function's own time, once it returned or was left
        self._logged = ""  # the outcome its line was logged with (as it was posted)

    @property
    def cancel_requested(self) -> bool:
        """A client cancelled the job: stop early if you can (the Daemon has stopped waiting)."""
        return self._cancel.is_set()

    @property
    def lease_lost(self) -> bool:
        """The job was taken from this daemon (delivered again elsewhere): its result is moot."""
        return self._lost.is_set()

    def __repr__(self) -> str:
        return f"CurrentJob({self.job_id!r}, queue={self.queue!r}, attempt={self.attempt})"


def current_job() -> CurrentJob | None:
    """The job whose function is running on this thread, or None outside a Daemon's function."""
    return getattr(_current, "job", None)
