"""The poster of a Daemon: stores a job's result by tier and posts it, or posts its failure.

A result goes inline when it is small enough and Redis takes it, else through S3 (also when the
control plane refuses it inline: Redis above its high-water mark, a namespace that keeps nothing
inline, a lowered INLINE_THRESHOLD). Each post may ask for the worker's next job (`next`, issue
34): the answer's jobs are handed to the runner (`_take_next`).
"""

from __future__ import annotations

import collections
import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from . import codec
from ._daemon_job import (
    ABANDONED,
    CANCELLED,
    CANCELLED_ERROR_TYPE,
    FAILED,
    REFUSED,
    SUCCEEDED,
    TAKEN,
    CurrentJob,
)
from ._wire import NextJobs, PolledJob
from .client import Client
from .errors import (
    AuthError,
    BlobSourceGone,
    ConflictError,
    InlineNever,
    InlineUnavailable,
    InvalidRequest,
    PayloadStoreError,
    PayloadTooLarge,
    PolicyMismatch,
)

# The daemon's own logger: its lines read as the daemon's, whichever part of it logs them.
log = logging.getLogger("payloadstore.daemon")


# The posting half of a Daemon (its runner and the Daemon build on it). No docstring: the
# Daemon's help is its own, not inherited from its parts.
class _ResultPoster:
    # Set by Daemon.__init__.
    client: Client
    queues: list[str]
    daemon_id: str
    progress: bool | None
    stats: collections.Counter[str]
    _held: threading.local  # the job this worker thread has in hand
    _lock: threading.Lock
    _stop: threading.Event
    _max_jobs: int | None
    _in_hand: int
    _result_next: bool

    def _done(self) -> int:
        return sum(self.stats.values())

    def _log_job(self, job: PolledJob, current: CurrentJob | None, outcome: str) -> None:
        """The job's line, once its outcome is known: `seconds` is the function's own time
        (0 when it never ran), logged as the outcome is posted, not when the post's answer
        (which may wait for the next job) comes back."""
        ran_s = None if current is None else current._ran_s
        log.info(
            "job job_id=%s queue=%s tier=%s seconds=%.3f outcome=%s attempt=%s",
            job.job_id,
            job.queue,
            "inline" if job.payload_inline is not None else "s3",
            ran_s or 0.0,
            outcome,
            job.attempt,
        )

    def _store_result(  # noqa: C901 - inline first, else through S3 (again on a policy change): each refusal is a branch the docs list
        self, job_id: str, value: Any, current: CurrentJob, lease: str | None
    ) -> str:
        """Store the function's return value by tier and post it; the delivery's outcome."""
        client = self.client
        try:
            encoded = codec.encode(value, where="result")
        except Exception as e:  # noqa: BLE001
            return self._post_error(
                job_id,
                "CodecError",
                f"cannot encode the function's return value: {e}",
                traceback.format_exc(),
                lease=lease,
            )
        try:
            # Blobs the function made (payloadstore.blob(path)) are uploaded first, once.
            blobs = client.blobs.send(encoded.blobs)
        except PayloadStoreError as e:
            return self._post_error(
                job_id,
                "BlobUploadFailed",
                f"cannot store a blob of the result: {e}",
                None,
                lease=lease,
            )
        try:
            if encoded.nbytes <= client.config.inline_limit:
                try:
                    return self._post_result(
                        job_id,
                        SUCCEEDED,
                        inline=encoded.tobytes(),
                        lease=lease,
                        blobs=blobs,
                        sent=encoded.blobs,
                    )
                except (InlineUnavailable, InlineNever, PayloadTooLarge) as e:
                    # Redis is above its high-water mark (or the namespace keeps nothing inline): the result goes through S3 instead.
                    # (413: INLINE_THRESHOLD was lowered since the config was read.)
                    log.info(
                        "inline result refused, storing through S3 job_id=%s bytes=%d reason=%s",
                        job_id,
                        encoded.nbytes,
                        e.code,
                    )
            elif (
                encoded.nbytes > client.config.max_payload_bytes
                # The cap as the stack has it now, not as it was at the daemon's start.
                and encoded.nbytes > client.refresh_config().max_payload_bytes
            ):
                return self._too_large(job_id, encoded.nbytes, client.config, lease)
            for first in (True, False):
                try:
                    ref, _ = client.payloads.store(
                        encoded, "result", job_id=job_id, lease=lease, progress=self.progress
                    )
                except PayloadTooLarge:
                    # MAX_PAYLOAD_BYTES was lowered since the config was read: the job fails
                    # on the cap the stack has now (abandoned, it would run again later).
                    if encoded.nbytes <= client.refresh_config().max_payload_bytes:
                        raise
                    return self._too_large(job_id, encoded.nbytes, client.config, lease)
                if current.lease_lost:
                    return TAKEN
                try:
                    return self._post_result(
                        job_id,
                        SUCCEEDED,
                        ref=ref,
                        lease=lease,
                        blobs=blobs,
                        sent=encoded.blobs,
                        policy_mismatch_raises=first,
                    )
                except PolicyMismatch:
                    # The namespace's policy changed between the presign and the post: the
                    # same key is presigned again under the new policy and uploaded once more.
                    log.info(
                        "namespace policy changed during the result upload, uploading again "
                        "job_id=%s",
                        job_id,
                    )
            return REFUSED
        except AuthError:
            raise
        except (PayloadStoreError, OSError) as e:
            log.error("result not stored job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _too_large(self, job_id: str, nbytes: int, config: Any, lease: str | None) -> str:
        limit = config.max_payload_bytes
        return self._post_error(
            job_id,
            "PayloadTooLarge",
            f"result is {nbytes} bytes encoded, over the {limit} byte cap (MAX_PAYLOAD_BYTES)",
            None,
            lease=lease,
        )

    def _mark_finishing(self, outcome: str) -> None:
        held = getattr(self._held, "job", None)
        if held is not None:
            held._finishing.set()
            polled = getattr(self._held, "polled", None)
            if not held._logged and polled is not None and polled.job_id == held.job_id:
                self._log_job(polled, held, outcome)
                held._logged = outcome
                self._held.ended = held

    def _post_cancelled(self, job_id: str, lease: str | None) -> str:
        error = {"type": CANCELLED_ERROR_TYPE, "message": "cancelled by a client while running"}
        try:
            return self._post_result(job_id, CANCELLED, error=error, lease=lease)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("cancel not posted job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _post_error(
        self,
        job_id: str,
        type_name: str,
        message: str,
        tb: str | None,
        *,
        lease: str | None = None,
    ) -> str:
        error = {"type": type_name, "message": message}
        if tb:
            error["traceback"] = tb
        try:
            return self._post_result(job_id, FAILED, error=error, lease=lease)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("error not posted job_id=%s error=%s", job_id, e)
            return ABANDONED

    def _post_result(
        self,
        job_id: str,
        outcome: str,
        *,
        sent: Any = (),
        policy_mismatch_raises: bool = False,
        **result: Any,
    ) -> str:
        """Post exactly one of inline=, ref=, error= (with lease=); REFUSED when the control plane
        says 409 (lease_mismatch: the job was delivered again; conflict: another result stands).
        In run()'s loops the post also asks for the worker's next job (`next`).
        `sent`: the result's blobs: one the namespace let go since this process uploaded it
        (`409 unknown_blob`) is checked or uploaded again from its source and the post sent once
        more; with its source gone, the job fails `BlobUploadFailed`."""
        self._mark_finishing(outcome)
        wire = self.client.wire
        try:
            self._with_next(
                lambda nxt: self.client.blobs.resend_on_unknown(
                    sent, lambda: wire.post_result(job_id, **result, next=nxt)
                )
            )
        except BlobSourceGone as e:
            return self._post_error(
                job_id,
                "BlobUploadFailed",
                f"cannot store a blob of the result: {e}",
                None,
                lease=result.get("lease"),
            )
        except PolicyMismatch as e:
            if policy_mismatch_raises:
                raise
            log.warning("result refused job_id=%s reason=%s", job_id, e.message)
            return REFUSED
        except InlineNever:
            # Not a refusal of the result: of its form. The caller sends it through S3 (an
            # InlineNever is a ConflictError, which would otherwise end the delivery REFUSED and
            # the job, delivered again and refused again, DeliveryLimitExceeded).
            if "inline" in result:
                raise
            log.warning("error refused inline job_id=%s", job_id)
            return REFUSED
        except ConflictError as e:
            log.warning("result refused job_id=%s reason=%s", job_id, e.message)
            return REFUSED
        return outcome

    def _next_request(self) -> NextJobs | None:
        """The `next` of this worker's post: one job for the worker about to be free, reserved
        in the count of jobs in hand (run(max_jobs=) is never passed), or None outside run()'s
        loops, while stopping, and with a control plane before `next`."""
        wait = getattr(self._held, "next_wait", None)
        if wait is None or not self._result_next or self._stop.is_set():
            return None
        with self._lock:
            if self._max_jobs is not None and self._max_jobs - self._done() - self._in_hand < 1:
                return None
            self._in_hand += 1
        self._held.reserved = True
        return NextJobs(tuple(self.queues), max_jobs=1, wait_s=wait, daemon_id=self.daemon_id)

    def _with_next(self, send: Callable[[NextJobs | None], list[PolledJob] | None]) -> None:
        """Send a post, with `next` when this worker takes a job next; keeps what it answers
        for `_take_next`. A control plane before `next` refuses the field (400/422: the post was
        not stored, so it goes again without it) or answers 204 (stored, `next` ignored): the
        daemon stops asking and polls for each job as before."""
        nxt = self._next_request()
        if nxt is None:
            send(None)
            return
        try:
            jobs = send(nxt)
        except InvalidRequest as e:
            if "next" not in e.message:
                raise
            log.info("control plane takes no next on result posts: polling for each job")
            self._result_next = False
            send(None)
            return
        if jobs is None:
            log.info("control plane answered no next jobs (204): polling for each job")
            self._result_next = False
            return
        self._held.next_jobs = jobs

    def _take_next(self) -> list[PolledJob]:
        """The jobs this worker's last post answered (leased to this daemon: they must run),
        counted as in hand in place of the reservation."""
        jobs: list[PolledJob] = getattr(self._held, "next_jobs", None) or []
        reserved = getattr(self._held, "reserved", False)
        self._held.next_jobs, self._held.reserved = [], False
        if jobs or reserved:
            with self._lock:
                self._in_hand += len(jobs) - (1 if reserved else 0)
        for job in jobs:
            log.debug("next job handed over job_id=%s", job.job_id)
        return jobs

    def _report_failure(
        self,
        job_id: str,
        state: str,
        detail: str,
        expected: str | None = None,
        actual: str | None = None,
        *,
        lease: str | None = None,
        crc64nvme: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self._mark_finishing(state)
        wire = self.client.wire
        try:
            self._with_next(
                lambda nxt: wire.report_failure(
                    job_id,
                    state=state,
                    detail=detail,
                    expected_sha256=expected,
                    actual_sha256=actual,
                    lease=lease,
                    next=nxt,
                    expected_crc64nvme=crc64nvme[0],
                    actual_crc64nvme=crc64nvme[1],
                )
            )
        except ConflictError as e:
            log.warning("failure report refused job_id=%s reason=%s", job_id, e.message)
        except AuthError:
            raise
        except PayloadStoreError as e:
            log.error("failure not reported job_id=%s state=%s error=%s", job_id, state, e)
