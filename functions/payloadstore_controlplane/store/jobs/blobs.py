"""Blobs: one record per verified blob per namespace (blobs_record.lua, namespace slot).

The record is a string holding the size and the fingerprint of the policy its object was
verified under (`<size>|<fingerprint>`: models/policy.py; a record of an older release holds
the size alone), with a TTL that ends a known margin before the object's lifecycle expiry
(models/blob_lifetime.py), so the TTL tells the expiry and no timestamp is stored. A job's references to blobs are not records of their own: they ride in its
queue entry (`B`) and, for a result, in its hash (`rb0`, `rb1`, ...), 32 raw bytes each. What a
reference needs past its blob's expiry goes to the namespace's needs zset (blobs_reference.lua),
which the scheduled renewer reads and empties (blobs_renewed.lua).

A blob above MULTIPART_THRESHOLD is uploaded in parts: its upload (id, size, part size and the
sha256 signed into each part's URL) lives in an upload hash beside the record until the upload
is completed (blobs_upload.lua, blobs_parts.lua; blobs_record.lua deletes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis

from ...models.errors import RedisMemoryFull
from .. import keys
from ..records import (
    BlobUploadRecord,
    NotMultipart,
    PartDiffers,
    PartsIssued,
    sha_raw,
    text,
)
from ._base import StoreBase, decoded

# Retry-After of a blob reference Redis refused for memory (as for any OutOfMemoryError).
REFERENCE_RETRY_AFTER_S = 2


@dataclass(frozen=True)
class BlobRecord:
    size: int
    ttl_ms: int  # left before the record (and, with the lifecycle, the object) expires
    policy: str | None = None  # the fingerprint of the policy it was verified under


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
            value, ttl = replies[i], replies[i + 1]
            if value is None or ttl == -2:
                out.append(None)
                continue
            size, _, policy = bytes(value).partition(b"|")
            out.append(BlobRecord(int(size), int(ttl), policy.decode() or None))
        return out

    def record_blob(
        self,
        namespace: str,
        sha256: str,
        size: int,
        ttl_ms: int,
        *,
        uploaded: bool = False,
        policy: str = "",
    ) -> None:
        """Remember a verified blob for `ttl_ms`, verified under the policy of fingerprint
        `policy`; acknowledged by replicas as every reported write is
        (REDIS_MIN_REPLICA_ACKS). `uploaded`: its multipart upload was just completed (its
        upload hash goes, in the same script)."""
        # (binary keys: redis-py sends bytes keys as they are)
        keys_ = [cast(str, keys.blob(namespace, sha256))]
        if uploaded:
            keys_.append(cast(str, keys.blob_upload(namespace, sha256)))
        value = f"{size}|{policy}" if policy else str(size)
        self._run("blobs_record", keys_, [value, max(int(ttl_ms), 1)])

    def cap_blob_record(self, namespace: str, sha256: str, ttl_ms: int) -> bool:
        """Shorten the blob's record to at most `ttl_ms` (blobs_cap.lua): whether it was."""
        keys_ = [cast(str, keys.blob(namespace, sha256))]
        return bool(self._run("blobs_cap", keys_, [max(int(ttl_ms), 1)]))

    def reference_blobs(
        self,
        namespace: str,
        sha256s: list[str],
        now_ms: int,
        need_ms: int,
        margin_ms: int,
        policy: str = "",
    ) -> set[str]:
        """Check that the namespace has these blobs, verified under the policy of fingerprint
        `policy` ('' any), and record, for those whose object expires before `need_ms`, that
        the renewer must keep them until then (one script; nothing written for a blob whose
        object outlives the need): the sha256s it does not have."""
        if not sha256s:
            return set()
        keys_ = [keys.blob_needs(namespace)] + [
            cast(str, keys.blob(namespace, sha)) for sha in sha256s
        ]
        args: list[Any] = [now_ms, need_ms, margin_ms, policy]
        args += [sha_raw(sha) for sha in sha256s]
        try:
            missing = self._run("blobs_reference", keys_, args)
        except redis.exceptions.OutOfMemoryError as e:
            # Default flags: refused whole past maxmemory, nothing recorded. Told apart from
            # other Redis errors, so a redrive leaves this job for later and goes on.
            raise RedisMemoryFull(
                "redis is out of memory: the need of a job's blobs is not recorded; retry shortly",
                retry_after_s=REFERENCE_RETRY_AFTER_S,
            ) from e
        return {sha256s[int(i) - 1] for i in missing or ()}

    def blob_needs(self, namespace: str) -> list[tuple[str, int]]:
        """(sha256, need in ms) of every blob of the namespace a reference needs past its
        object's expiry, soonest need first."""
        raw = self._r.zrange(keys.blob_needs(namespace), 0, -1, withscores=True)
        return [(bytes(member).hex(), int(score)) for member, score in raw]

    def blob_renewed(
        self,
        namespace: str,
        sha256: str,
        expiry_ms: int,
        *,
        size: int | None = None,
        record_ttl_ms: int = 0,
    ) -> int:
        """After a renewal (`size` given: the record gets `record_ttl_ms`) or a check that found
        the object outlives its need: forget the need if `expiry_ms` covers it. The need left
        (ms), or 0."""
        keys_ = [keys.blob_needs(namespace), cast(str, keys.blob(namespace, sha256))]
        args: list[Any] = [sha_raw(sha256), expiry_ms]
        args += ["", 0] if size is None else [size, max(int(record_ttl_ms), 1)]
        return int(self._run("blobs_renewed", keys_, args))

    # -- multipart ---------------------------------------------------------------------------

    def open_blob_upload(
        self,
        namespace: str,
        sha256: str,
        upload_id: str,
        size: int,
        part_bytes: int,
        ttl_s: int,
        algorithm: str = "SHA256",
    ) -> tuple[str, int, int, str]:
        """Remember the multipart upload created for a blob: (upload id, size, part size,
        checksum algorithm) of the upload to use (an upload another caller opened first wins)."""
        key = cast(str, keys.blob_upload(namespace, sha256))
        flag = "c" if algorithm == "CRC64NVME" else ""
        reply = decoded(
            self._run("blobs_upload", [key], [upload_id, size, part_bytes, ttl_s, flag])
        )
        kind = "CRC64NVME" if len(reply) > 3 and reply[3] == "c" else "SHA256"
        return reply[0], int(reply[1]), int(reply[2]), kind

    def blob_upload(self, namespace: str, sha256: str) -> BlobUploadRecord | None:
        """The blob's multipart upload in progress, or None."""
        raw = self._r.hgetall(keys.blob_upload(namespace, sha256))
        fields: dict[str, Any] = {text(k): v for k, v in raw.items()}
        upload = fields.pop("u", None)
        if not upload:
            return None
        size, part_bytes = int(fields.pop("z", 0)), int(fields.pop("b", 0))
        algorithm = "CRC64NVME" if fields.pop("k", None) == b"c" else "SHA256"
        return BlobUploadRecord(
            upload_id=text(upload),
            size=size,
            part_bytes=part_bytes,
            parts={int(n): bytes(v) for n, v in fields.items()},
            algorithm=algorithm,
        )

    def issue_blob_parts(
        self, namespace: str, sha256: str, parts: list[tuple[int, str | None]]
    ) -> PartsIssued | NotMultipart | PartDiffers:
        """Record (part number, hex sha256) of a blob's parts about to be presigned."""
        flat: list[Any] = []
        for number, sha in parts:
            flat += [number, sha_raw(sha) or b""]
        key = cast(str, keys.blob_upload(namespace, sha256))
        reply = decoded(self._run("blobs_parts", [key], flat))
        match reply[0]:
            case "ok":
                return PartsIssued(reply[1])
            case "differs":
                return PartDiffers(int(reply[1]))
        return NotMultipart()

    def drop_blob_upload(self, namespace: str, sha256: str) -> None:
        """Forget a blob's upload in progress (aborted, or gone from S3)."""
        self._r.delete(keys.blob_upload(namespace, sha256))
