"""The S3 keys the control plane mints: `payloads/YYYY/MM/DD/<job_id>/<kind>`."""

from __future__ import annotations

import re
import time

from ..models.domain import PayloadKind, job_id_time_s

PAYLOAD_PREFIX = "payloads/"
_KEY_RE = re.compile(r"^payloads/(\d{4})/(\d{2})/(\d{2})/([0-9A-HJKMNP-TV-Z]{26})/(args|result)$")


def key_for(job_id: str, kind: PayloadKind) -> str:
    day = time.strftime("%Y/%m/%d", time.gmtime(job_id_time_s(job_id)))
    return f"{PAYLOAD_PREFIX}{day}/{job_id}/{kind.value}"


def parse_key(key: str | None) -> tuple[str, PayloadKind] | None:
    """(job_id, kind) of a key we could have minted, else None. The date must match the id."""
    m = _KEY_RE.match(key or "")
    if not m:
        return None
    job_id, kind = m.group(4), PayloadKind(m.group(5))
    if key_for(job_id, kind) != key:
        return None
    return job_id, kind
