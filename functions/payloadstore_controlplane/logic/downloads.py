"""Presigned GETs handed out with S3 references (poll and result answers): one control-plane
call less per side of an S3-tier job. Signing is local (no network), ~30-50 us."""

from __future__ import annotations

from ..models.api import DownloadUrl
from ..models.domain import PayloadRef
from .context import Deps
from .presign import iso_utc


def download_for(ref: PayloadRef | None, deps: Deps) -> DownloadUrl | None:
    """A GET URL for `ref`, valid PRESIGN_TTL_S, or None when there is no S3 reference."""
    if ref is None:
        return None
    now = deps.clock()
    return DownloadUrl(
        url=deps.objects.presign_get(ref.key),
        expires_at=iso_utc(now + deps.settings.presign_ttl_s),
    )
