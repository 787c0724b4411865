"""The scheduled blob renewer: keeps every blob readable for as long as a job referencing it
needs it (models/blob_lifetime.py, docs/design.md "Blob lifetimes"), off every request's path.

Requests only record, per namespace, until when a reference needs a blob whose object expires
sooner (keys.blob_needs). Each run reads those needs and, for a blob whose object expires within
BLOB_RENEW_AHEAD_S and is still needed past that, copies the object onto itself so the bucket's
lifecycle counts its days from the copy: one CopyObject up to COPY_PART_BYTES, above it a
multipart copy of UploadPartCopy ranges in parallel (no 5 GiB limit). The record then gets the
new expiry and the needs the copy covers are forgotten. A need its object already covers is
forgotten without a copy; one whose object is gone is dropped with a warning (a job referencing
it will report payload_lost)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from ..models.errors import PayloadStoreError
from ..observability import logger, metrics_count
from .blobs import BLOB_CONTENT_TYPE, blob_key, lifecycle_days_of
from .context import Deps

# Parts of one multipart copy in flight at once.
COPY_CONCURRENCY = 8


@dataclass
class RenewalRun:
    """What one run did (the scheduled function's answer, and its log line)."""

    checked: int = 0
    renewed: int = 0
    renewed_in_parts: int = 0
    covered: int = 0
    lost: int = 0
    failed: int = 0
    deferred: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The counts (the errors go to their own log lines)."""
        return {k: v for k, v in asdict(self).items() if k != "errors"}


def renew_blobs(
    namespaces: Iterable[str],
    deps: Deps,
    *,
    time_left_s: Callable[[], float] = lambda: float("inf"),
    spare_s: float = 30.0,
) -> RenewalRun:
    """One run over the namespaces' blob needs. Stops starting copies when less than `spare_s`
    of the invocation is left (the next run, or the one after, takes the rest: a blob is due
    BLOB_RENEW_AHEAD_S before its expiry, several runs ahead)."""
    run = RenewalRun()
    # (the need and the margin; the lifecycle's days are each blob's own: its retention class)
    life = deps.settings.blob_lifetime()
    for ns in namespaces:
        needs = deps.jobs.blob_needs(ns)
        if not needs:
            continue
        records = deps.jobs.blob_records(ns, [sha for sha, _ in needs])
        for (sha, need_ms), record in zip(needs, records, strict=True):
            run.checked += 1
            now = deps.clock()
            key = blob_key(ns, sha)
            if record is not None:
                size, expiry = record.size, life.expiry_of_record(now, record.ttl_ms / 1000)
            else:
                # The record expired (the renewer could not run for the known margin): the
                # object may still be there to renew.
                info = deps.objects.head(key)
                if info is None:
                    _lost(ns, sha, deps, run)
                    continue
                size = info.size
                own = deps.settings.blob_lifetime(lifecycle_days_of(key, info, deps))
                expiry = own.object_expiry(info.last_modified or 0.0)
            if need_ms <= expiry * 1000:
                deps.jobs.blob_renewed(ns, sha, int(expiry * 1000))
                run.covered += 1
                continue
            if record is not None and not life.renewal_due(expiry, now):
                continue
            if time_left_s() < spare_s:
                run.deferred += 1
                continue
            _renew_one(ns, sha, size, deps, run)
    logger.info("blob renewal run", extra=run.as_dict())
    return run


def _lost(ns: str, sha: str, deps: Deps, run: RenewalRun) -> None:
    """A needed blob whose object is gone: dropped from the needs (nothing can renew it)."""
    deps.jobs.blob_renewed(ns, sha, 2**62)
    run.lost += 1
    metrics_count("BlobsLost")
    logger.warning("blob needed but gone", extra={"namespace": ns, "sha256": sha})


def _renew_one(ns: str, sha: str, size: int, deps: Deps, run: RenewalRun) -> None:
    key = blob_key(ns, sha)
    in_parts = size > deps.settings.copy_part_bytes
    started = deps.clock()
    began = time.monotonic()
    try:
        if in_parts:
            copied = deps.objects.copy_in_parts(
                key, size, deps.settings.copy_part_bytes, BLOB_CONTENT_TYPE, COPY_CONCURRENCY
            )
        else:
            copied = deps.objects.copy_onto_itself(key, BLOB_CONTENT_TYPE)
    except PayloadStoreError as e:
        # Left in the needs: the next run tries again (it has the known margin to succeed).
        run.failed += 1
        run.errors.append(f"{ns}/{sha}: {e}")
        metrics_count("BlobRenewalsFailed")
        logger.warning(
            "blob renewal failed", extra={"namespace": ns, "sha256": sha, "error": str(e)}
        )
        return
    info = deps.objects.head(key) if copied else None
    if info is None:
        _lost(ns, sha, deps, run)
        return
    # The copy was written no earlier than it started: the lifecycle counts from then, by the
    # rule of the retention class its tag (copied with it) names.
    life = deps.settings.blob_lifetime(lifecycle_days_of(key, info, deps))
    expiry = life.object_expiry(started)
    left = deps.jobs.blob_renewed(
        ns,
        sha,
        int(expiry * 1000),
        size=size,
        record_ttl_ms=int(life.record_ttl_s(started, deps.clock()) * 1000),
    )
    run.renewed += 1
    run.renewed_in_parts += int(in_parts)
    metrics_count("BlobsRenewed")
    logger.info(
        "blob renewed",
        extra={
            "namespace": ns,
            "sha256": sha,
            "size": size,
            "in_parts": in_parts,
            "copy_s": round(time.monotonic() - began, 3),
            "still_needed": bool(left),
        },
    )
