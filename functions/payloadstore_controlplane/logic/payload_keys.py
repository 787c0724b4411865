"""The S3 keys the control plane mints: `payloads/YYYY/MM/DD/<job_id>/<kind>`.

A result presigned by a redelivery (attempt n > 1) gets `…/result-<n>`: the URLs an earlier
delivery was given (valid PRESIGN_TTL_S) then point at a key that is no longer the job's, so a
daemon whose lease lapsed cannot overwrite the result that was accepted."""

from __future__ import annotations

import hashlib
import re
import time

from ..models.domain import PayloadKind, job_id_time_s

PAYLOAD_PREFIX = "payloads/"
_KEY_RE = re.compile(
    r"^payloads/(\d{4})/(\d{2})/(\d{2})/([0-9A-HJKMNP-TV-Z]{26})/(args|result)(?:-([1-9]\d{0,3}))?$"
)


def key_for(job_id: str, kind: PayloadKind, attempt: int | None = None) -> str:
    """The key of the job's args, or of the result presigned by delivery `attempt`."""
    day = time.strftime("%Y/%m/%d", time.gmtime(job_id_time_s(job_id)))
    suffix = f"-{attempt}" if kind is PayloadKind.RESULT and attempt and attempt > 1 else ""
    return f"{PAYLOAD_PREFIX}{day}/{job_id}/{kind.value}{suffix}"


def error_key(job_id: str, error_json: str) -> str:
    """The key of a job's error kept in S3 (`inline: never`): `…/<job_id>/error-<16 hex>`, the
    hex of the error's sha256, so a re-sent post writes the same object and a refused post (a
    stale lease) never overwrites the error the job ended with. No presign ever names it."""
    day = time.strftime("%Y/%m/%d", time.gmtime(job_id_time_s(job_id)))
    digest = hashlib.sha256(error_json.encode()).hexdigest()[:16]
    return f"{PAYLOAD_PREFIX}{day}/{job_id}/error-{digest}"


def parse_key(key: str | None) -> tuple[str, PayloadKind] | None:
    """(job_id, kind) of a key we could have minted, else None. The date must match the id.
    Callers compare the key with the issued one (`IssueRecord.key`) as well: a result key of
    another delivery parses, but is not the job's."""
    m = _KEY_RE.match(key or "")
    if not m:
        return None
    job_id, kind = m.group(4), PayloadKind(m.group(5))
    attempt = int(m.group(6)) if m.group(6) else None
    if key_for(job_id, kind, attempt) != key:
        return None
    return job_id, kind
