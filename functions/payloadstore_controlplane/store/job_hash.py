"""A job hash (as HGETALL answers it) read as a `JobRecord`: the one decoder of the layout-2
job hash fields (keys.py documents them). Its own module, below both the store and its step
modules, so the operator's listing (jobs/operate.py) and the store (redis_jobs.py) share it
without importing each other."""

from __future__ import annotations

from typing import Any

from ..models.domain import JobStatus, Tier
from .records import DEFAULT_CONTENT_TYPE, IssuedKey, JobRecord, checksum_of, number, text


def _issued(f: dict[str, Any], prefix: str, issued_ms: int | None) -> IssuedKey | None:
    if prefix + "z" not in f:
        return None
    sha256, crc = checksum_of(f.get(prefix + "h"))
    composite, whole_crc = checksum_of(f.get(prefix + "m"))
    return IssuedKey(
        size=int(f[prefix + "z"]),
        content_type=text(f.get(prefix + "c")) or DEFAULT_CONTENT_TYPE,
        sha256=sha256,
        presigns=number(f.get(prefix + "n"), 0),
        issued_ms=issued_ms,
        attempt=(number(f.get("ra"), 0) or None) if prefix == "r" else None,
        part_bytes=number(f.get(prefix + "b"), 0) or None,
        composite_sha256=composite,
        crc64nvme=crc or whole_crc,
    )


def decode_job(
    job_id: str, raw: dict, done: bytes | None = None, *, done_read: bool = False
) -> JobRecord:
    """A job hash (as HGETALL answers it) as a record."""
    f = {text(k): v for k, v in raw.items()}
    tier = Tier.INLINE if f.get("t") == b"i" else Tier.S3
    lease = text(f.get("lt"))
    return JobRecord(
        job_id=job_id,
        namespace=text(f.get("n")) or "",
        state=JobStatus(text(f.get("s")) or JobStatus.QUEUED.value),
        queue=text(f.get("q")),
        tier=tier,
        attempts=number(f.get("a")),
        stream_id=text(f.get("x")),
        created_ms=number(f.get("ca"), 0) or None,
        updated_ms=number(f.get("ua"), 0) or None,
        args=_issued(f, "p", None) if tier is Tier.S3 else None,
        result_issue=_issued(f, "r", number(f.get("ri"), 0) or None),
        result_kind=text(f.get("rk")),
        lease=lease,
        accepted_post=f.get("g"),
        cancel_requested=f.get("cr") == b"1",
        done=done,
        done_read=done_read,
        retries=number(f.get("rt")),
        retry_queued=f.get("rq") is not None,
        args_size=number(f.get("pz"), 0) or None,
        result_blobs=_result_blobs(f),
        args_deleted_ms=number(f.get("pd"), 0) or None,
        result_deleted_ms=number(f.get("rd"), 0) or None,
        enqueue_refusals=number(f.get("xr")),
    )


def _result_blobs(f: dict[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    while (raw := f.get(f"rb{len(out)}")) is not None:
        out.append(bytes(raw).hex())
    return tuple(out)
