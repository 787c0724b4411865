"""Presign: a job is born at its args presign (awaiting_upload), and what the CP issued for a
key (size, content type, sha256, presign count) lives in the job hash.
Scripts: presign_args.lua, presign_result.lua, presign_count.lua."""

from __future__ import annotations

from typing import Any

from ...models.domain import JobStatus
from .. import keys
from ..records import (
    DEFAULT_CONTENT_TYPE,
    LeaseMismatch,
    Missing,
    NotRunning,
    ResultIssued,
    ResultIssuedBefore,
    sha_raw,
)
from ._base import StoreBase


def issue_fields(prefix: str, size: int, content_type: str, sha256: str | None) -> list[Any]:
    flat: list[Any] = [prefix + "z", size, prefix + "n", 1]
    if content_type != DEFAULT_CONTENT_TYPE:
        flat += [prefix + "c", content_type]
    if sha256:
        flat += [prefix + "h", sha_raw(sha256)]
    return flat


class PresignSteps(StoreBase):
    def create_args_issue(
        self, job_id: str, namespace: str, size: int, content_type: str, sha256: str | None
    ) -> bool:
        """A new job in state awaiting_upload holding what was issued for its args key."""
        flat = [self._ttl, "n", namespace, "s", JobStatus.AWAITING_UPLOAD.value]
        flat += issue_fields("p", size, content_type, sha256)
        return bool(self._run("presign_args", [keys.job(job_id)], flat))

    def create_result_issue(
        self,
        job_id: str,
        namespace: str,
        size: int,
        content_type: str,
        sha256: str | None,
        now_ms: int,
        *,
        lease: str,
    ) -> ResultIssued | ResultIssuedBefore | LeaseMismatch | NotRunning | Missing:
        """Record the result the delivery holding `lease` will upload."""
        flat = [namespace, lease, *issue_fields("r", size, content_type, sha256), "ri", now_ms]
        reply = self._run_on_job("presign_result", job_id, [keys.job(job_id)], flat)
        match reply[0]:
            case "ok":
                return ResultIssued(attempt=int(reply[1] or 0))
            case "exists":
                return ResultIssuedBefore()
            case "lease_mismatch":
                return LeaseMismatch(reply[1])
            case "not_running":
                return NotRunning(reply[1])
        return Missing()

    def bump_presign(self, job_id: str, kind: str, max_presigns: int) -> int:
        """New presign count; -1 past the cap; 0 when no such key was issued."""
        count_field = "pn" if kind == "args" else "rn"
        return int(self._run("presign_count", [keys.job(job_id)], [count_field, max_presigns]))
