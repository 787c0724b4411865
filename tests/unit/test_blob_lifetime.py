"""The blob arithmetic (models/blob_lifetime.py, docs/design.md "Blob lifetimes"): needs, the
object's expiry, the record's TTL, when a renewal is due, the derived lifecycle days, and the
settings that could not keep the invariant."""

from __future__ import annotations

import pytest

from payloadstore_controlplane.models.blob_lifetime import BlobLifetime
from payloadstore_controlplane.models.settings import Settings, SettingsError

H = 3600
DAY = 86_400


def test_the_default_stage_uses_its_retentions_and_the_blobs_retention_class():
    settings = Settings(payload_bucket="bucket")
    life = settings.blob_lifetime()
    assert (life.queue_retention_s, life.result_ttl_s) == (48 * H, 48 * H)
    # the default policy's class, 2d; a namespace's own class is a parameter
    assert life.lifecycle_days == 2 and settings.blob_lifetime(7).lifecycle_days == 7
    assert life.renew_ahead_s == 6 * H and life.known_margin_s == 3 * H
    # and the queue retention is the stage's (QUEUE_RETENTION_S)
    assert (
        Settings(payload_bucket="bucket", queue_retention_s=H).blob_lifetime().need_for_args(0.0)
        == H + 48 * H
    )


def test_a_reference_needs_the_jobs_whole_life_and_a_result_its_retention():
    life = BlobLifetime(48 * H, 48 * H, 5, 6 * H)
    assert life.need_for_args(1000.0) == 1000.0 + 96 * H
    assert life.need_for_result(1000.0) == 1000.0 + 48 * H


def test_the_record_ends_the_known_margin_before_the_object_and_tells_its_expiry():
    life = BlobLifetime(48 * H, 48 * H, 5, 6 * H)
    written, now = 0.0, 10 * H
    ttl = life.record_ttl_s(written, now)
    assert ttl == 5 * DAY - 3 * H - 10 * H
    assert life.expiry_of_record(now, ttl) == life.object_expiry(written) == 5 * DAY
    # an object too close to its expiry gets no record: it is uploaded again
    assert life.record_ttl_s(written, 5 * DAY - 2 * H) < 0


def test_a_renewal_is_due_within_the_horizon_only():
    life = BlobLifetime(48 * H, 48 * H, 5, 6 * H)
    assert life.renewal_due(expiry=100 * H, now=94 * H)
    assert not life.renewal_due(expiry=100 * H, now=93 * H)


def test_a_horizon_above_half_the_shortest_retention_class_is_refused_at_start():
    with pytest.raises(SettingsError, match="BLOB_RENEW_AHEAD_S"):
        Settings.from_env({"PAYLOAD_BUCKET": "bucket", "BLOB_RENEW_AHEAD_S": "50000"})
