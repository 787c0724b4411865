"""How long a blob must live and when the renewer copies it: the arithmetic of docs/design.md
"Blob lifetimes", in one place (every figure a parameter, nothing read from the environment,
so a namespace with a retention of its own builds its own `BlobLifetime`).

The invariant: a job that references a blob keeps it readable for at least the job's own
remaining life. A reference at time t needs the object until

    need = t + queue retention + result retention     (a job's args: queued, then its result)
    need = t + result retention                        (a result's blobs)

The bucket's rule for the object's retention class (its namespace policy's tag: 1, 2, 7 or 30
days) deletes an object L lifecycle days after its last write, S3 rounding up to the next
midnight UTC, so an object written at w is readable until at least
`expiry = w + L days`. The record (what makes the blob referenceable) lives until
`expiry - known_margin`, so every reference is made while the object has at least
`known_margin` left; the renewer (a scheduled function, every P) copies onto itself every blob
whose object expires within `renew_ahead` and that a reference still needs beyond that expiry,
and a copy started at c moves the expiry to `c + L days`. So with
`known_margin >= P + the longest copy` a reference is always covered: renewal is due at
`expiry - renew_ahead` (or at once, for a reference made later), and the renewer takes it within
P and finishes before `expiry`.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_S = 86_400


@dataclass(frozen=True)
class BlobLifetime:
    queue_retention_s: int  # how long a job may wait queued
    result_ttl_s: int  # how long its result stays readable
    lifecycle_days: int  # L: the days of the rule that expires the object (its retention class)
    renew_ahead_s: int  # renew an object whose expiry is this close (and still needed past it)
    day_s: int = DAY_S  # a lifecycle day (86,400 s on AWS; the local emulator's time scale)

    @property
    def lifecycle_s(self) -> int:
        return self.lifecycle_days * self.day_s

    @property
    def known_margin_s(self) -> float:
        """The record expires this long before its object: a blob is referenced only while the
        renewer has at least this long (several of its runs) to copy it."""
        return self.renew_ahead_s / 2

    def need_for_args(self, now: float) -> float:
        """Until when a job enqueued (or retried) now needs the blobs its args reference."""
        return now + self.queue_retention_s + self.result_ttl_s

    def need_for_result(self, now: float) -> float:
        """Until when a result posted now needs the blobs it references."""
        return now + self.result_ttl_s

    def object_expiry(self, written: float) -> float:
        """The earliest the lifecycle deletes an object last written at `written`."""
        return written + self.lifecycle_s

    def record_ttl_s(self, written: float, now: float) -> float:
        """How long the record of an object written at `written` lives from now (<= 0: the
        object is too close to its expiry to be referenced: upload it again)."""
        return self.object_expiry(written) - self.known_margin_s - now

    def expiry_of_record(self, now: float, record_ttl_s: float) -> float:
        """The object's expiry told by its record's TTL left."""
        return now + record_ttl_s + self.known_margin_s

    def renewal_due(self, expiry: float, now: float) -> bool:
        return expiry - now <= self.renew_ahead_s

    def problems(self) -> list[str]:
        """Why these figures cannot keep the invariant (empty: they can)."""
        if self.lifecycle_s < 2 * self.renew_ahead_s:
            why = (
                f"BLOB_RENEW_AHEAD_S={self.renew_ahead_s} is above half a blob's lifecycle "
                f"({self.lifecycle_days} days of {self.day_s} s): a renewed blob would be due "
                "again at once; lower it"
            )
            return [why]
        return []
