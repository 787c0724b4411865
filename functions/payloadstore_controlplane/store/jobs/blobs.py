"""Blobs: one record per verified blob per namespace (blobs_record.lua, namespace slot).

The record is a string holding the size, with a TTL of the retention; the blob's age (since its
upload was verified or it was last renewed) is the retention less the TTL left, so no timestamp
is stored. A job's references to blobs are not records of their own: they ride in its queue
entry (`B`) and, for a result, in its hash (`rb0`, `rb1`, ...), 32 raw bytes each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from .. import keys
from ._base import StoreBase


@dataclass(frozen=True)
class BlobRecord:
    size: int
    ttl_ms: int  # left before the record (and, with the lifecycle, the object) expires


class BlobSteps(StoreBase):
    def blob_records(self, namespace: str, sha256s: list[str]) -> list[BlobRecord | None]:
        """Each blob's record, or None where the namespace has no such blob: one round trip
        (every record is in the namespace's slot)."""
        if not sha256s:
            return []
        pipe = self._r.pipeline(transaction=False)
        for sha in sha256s:
            key = keys.blob(namespace, sha)
            pipe.get(key)
            pipe.pttl(key)
        replies = pipe.execute()
        out: list[BlobRecord | None] = []
        for i in range(0, len(replies), 2):
            size, ttl = replies[i], replies[i + 1]
            out.append(None if size is None or ttl == -2 else BlobRecord(int(size), int(ttl)))
        return out

    def record_blob(self, namespace: str, sha256: str, size: int, ttl_s: int) -> None:
        """Remember (or renew) a verified blob for `ttl_s`; acknowledged by replicas as every
        reported write is (REDIS_MIN_REPLICA_ACKS)."""
        # (a binary key: redis-py sends bytes keys as they are)
        key = cast(str, keys.blob(namespace, sha256))
        self._run("blobs_record", [key], [size, ttl_s])
