from __future__ import annotations

import pytest
from controlplane.models.settings import SETTINGS_ENV, PayloadLostPolicy, Settings, SettingsError


def test_defaults_are_the_documented_ones():
    s = Settings.from_env({"PAYLOAD_BUCKET": "bucket-x"})
    assert (s.inline_threshold, s.max_payload_bytes, s.presign_ttl_s, s.result_ttl_s) == (
        262_144,
        104_857_600,
        900,
        172_800,
    )
    assert s.payload_lost_policy is PayloadLostPolicy.RETRY_ONCE


def test_every_setting_reads_its_env_var():
    s = Settings.from_env(
        {
            "PAYLOAD_BUCKET": "b-b",
            "INLINE_THRESHOLD": "1000",
            "REDIS_CLUSTER": "true",
            "PAYLOAD_LOST_POLICY": "fail",
            "VISIBILITY_TIMEOUT_S": "30",
        }
    )
    assert (s.inline_threshold, s.redis_cluster, s.payload_lost_policy, s.visibility_timeout_s) == (
        1000,
        True,
        PayloadLostPolicy.FAIL,
        30,
    )
    assert set(SETTINGS_ENV) == set(Settings.model_fields)


@pytest.mark.parametrize(
    "env",
    [
        {},  # no bucket
        {"PAYLOAD_BUCKET": "b-b", "INLINE_THRESHOLD": "lots"},
        {
            "PAYLOAD_BUCKET": "b-b",
            "RESULT_TTL_S": str(3 * 86400),
        },  # longer than the bucket keeps payloads
        {"PAYLOAD_BUCKET": "b-b", "POLL_MAX_WAIT_S": "40"},  # past API Gateway's 29 s
    ],
)
def test_bad_settings_fail_fast_naming_the_problem(env):
    with pytest.raises(SettingsError):
        Settings.from_env(env)
