"""Blobs: one record per verified blob per namespace (blobs_record.lua, namespace slot).

The record is a string holding the size, with a TTL of the retention; the blob's age (since its
upload was verified or it was last renewed) is the retention less the TTL left, so no timestamp
is stored. A job's references to blobs are not records of their own: they ride in its queue
entry (`B`) and, for a result, in its hash (`rb0`, `rb1`, ...), 32 raw bytes each.

A blob above MULTIPART_THRESHOLD is uploaded in parts: its upload (id, size, part size and the
sha256 signed into each part's URL) lives in an upload hash beside the record until the upload
is completed (blobs_upload.lua, blobs_parts.lua; blobs_record.lua deletes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

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

    def record_blob(
        self, namespace: str, sha256: str, size: int, ttl_s: int, *, uploaded: bool = False
    ) -> None:
        """Remember (or renew) a verified blob for `ttl_s`; acknowledged by replicas as every
        reported write is (REDIS_MIN_REPLICA_ACKS). `uploaded`: its multipart upload was just
        completed (its upload hash goes, in the same script)."""
        # (binary keys: redis-py sends bytes keys as they are)
        keys_ = [cast(str, keys.blob(namespace, sha256))]
        if uploaded:
            keys_.append(cast(str, keys.blob_upload(namespace, sha256)))
        self._run("blobs_record", keys_, [size, ttl_s])

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
