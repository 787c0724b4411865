from __future__ import annotations

import pytest

from payloadstore_controlplane.models.settings import (
    SETTINGS_ENV,
    PayloadLostPolicy,
    Settings,
    SettingsError,
)


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


# -- cross-checks: settings valid one by one, broken together (issue 21) ---------------------


@pytest.mark.parametrize(
    ("env", "named"),
    [
        # the retention is RESULT_TTL_S when QUEUE_RETENTION_S is unset
        ({"RESULT_TTL_S": "600"}, ["IDEMPOTENCY_TTL_S=3600", "RESULT_TTL_S=600"]),
        (
            {"QUEUE_RETENTION_S": "600", "IDEMPOTENCY_TTL_S": "1200"},
            ["IDEMPOTENCY_TTL_S=1200", "QUEUE_RETENTION_S=600"],
        ),
    ],
)
def test_an_idempotency_window_longer_than_the_retention_is_refused(env, named):
    # Given an Idempotency-Key window that outlives the queue entries it finds the job by
    # When the settings are read
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"PAYLOAD_BUCKET": "b-b", **env})
    # Then the error names both variables with their values
    for text in named:
        assert text in str(refused.value)
    assert "Idempotency-Key" in str(refused.value)


def test_a_queue_retention_longer_than_the_result_ttl_is_refused():
    # Given queue entries kept longer than an S3-tier job's record lives
    env = {"PAYLOAD_BUCKET": "b-b", "RESULT_TTL_S": "3600", "QUEUE_RETENTION_S": "7200"}
    # When the settings are read
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    # Then the error names both variables with their values
    assert "QUEUE_RETENTION_S=7200 is above RESULT_TTL_S=3600" in str(refused.value)


def test_a_visibility_timeout_not_below_the_retention_is_refused():
    # Given a visibility timeout as long as the retention: a dead daemon's job would be past the
    # retention (expired) by the time it could be delivered again
    env = {"PAYLOAD_BUCKET": "b-b", "QUEUE_RETENTION_S": "3600", "VISIBILITY_TIMEOUT_S": "3600"}
    # When the settings are read
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    # Then the error names both variables with their values
    assert "VISIBILITY_TIMEOUT_S=3600 is not below QUEUE_RETENTION_S=3600" in str(refused.value)


def test_a_high_water_mark_above_the_hard_mark_is_refused():
    # Given the memory guard's two marks swapped
    env = {
        "PAYLOAD_BUCKET": "b-b",
        "REDIS_MEMORY_HIGH_WATER_PCT": "95",
        "REDIS_MEMORY_HARD_PCT": "90",
    }
    # When the settings are read
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    # Then the error names both variables with their values
    assert "REDIS_MEMORY_HIGH_WATER_PCT=95 is above REDIS_MEMORY_HARD_PCT=90" in str(refused.value)


def test_every_inconsistency_is_reported_at_once():
    # Given two unrelated inconsistent pairs
    env = {
        "PAYLOAD_BUCKET": "b-b",
        "RESULT_TTL_S": "600",
        "REDIS_MEMORY_HIGH_WATER_PCT": "99",
        "REDIS_MEMORY_HARD_PCT": "98",
    }
    # When the settings are read, Then one error names both
    with pytest.raises(SettingsError, match="IDEMPOTENCY_TTL_S=3600.*REDIS_MEMORY_HIGH_WATER_PCT"):
        Settings.from_env(env)


def test_the_check_holds_for_settings_built_in_code_too():
    # Given settings built from field values (as the CDK app and the benchmarks do)
    # When they are inconsistent, Then pydantic refuses them naming the variables
    with pytest.raises(ValueError, match="QUEUE_RETENTION_S=7200 is above RESULT_TTL_S=3600"):
        Settings(payload_bucket="b-b", result_ttl_s=3600, queue_retention_s=7200)


@pytest.mark.parametrize(
    "env",
    [
        {},  # the defaults
        # the limits themselves are consistent: equal windows, equal marks
        {"RESULT_TTL_S": "3600", "QUEUE_RETENTION_S": "3600", "IDEMPOTENCY_TTL_S": "3600"},
        {"REDIS_MEMORY_HIGH_WATER_PCT": "90", "REDIS_MEMORY_HARD_PCT": "90"},
        # a short-lived stack: a short TTL with an idempotency window to match
        {"RESULT_TTL_S": "60", "IDEMPOTENCY_TTL_S": "60", "VISIBILITY_TIMEOUT_S": "3"},
        # combinations the other test suites, the local stack and `make reliability` use
        {"IDEMPOTENCY_TTL_S": "120"},
        {"VISIBILITY_TIMEOUT_S": "1", "MAX_DELIVERIES": "2"},
        {"VISIBILITY_TIMEOUT_S": "5", "MAX_DELIVERIES": "5", "POLL_MAX_WAIT_S": "2"},
        {"REDIS_MEMORY_HIGH_WATER_PCT": "1", "REDIS_MEMORY_HARD_PCT": "1"},
        {"REDIS_MEMORY_HIGH_WATER_PCT": "1", "REDIS_MEMORY_HARD_PCT": "100"},
        {"REDIS_MEMORY_HIGH_WATER_PCT": "100", "REDIS_MEMORY_HARD_PCT": "100"},
    ],
)
def test_consistent_combinations_pass_the_cross_checks(env):
    # Given a consistent combination, When the settings are read, Then they are accepted
    Settings.from_env({"PAYLOAD_BUCKET": "b-b", **env})


def test_the_local_stack_environment_passes_the_cross_checks():
    # Given the functions' environment of the local stack (make dev, e2e, make reliability)
    from payloadstore_devstack.stack import handler_env

    env = handler_env(
        redis_url="redis://127.0.0.1:1/0", s3_endpoint="http://127.0.0.1:1", bucket="b-b"
    )
    # When the settings are read, Then they are accepted
    Settings.from_env(env)


def test_an_inline_threshold_whose_one_job_cannot_fit_a_poll_answer_is_refused():
    from payloadstore_controlplane.models.limits import largest_inline_threshold

    # Given the largest threshold one delivery fits with (~3.7 MiB): accepted
    largest = largest_inline_threshold()
    ok = Settings.from_env({"PAYLOAD_BUCKET": "b-b", "INLINE_THRESHOLD": str(largest)})
    assert ok.inline_threshold == largest
    # When one byte more (or 4 MiB) is asked for, the function refuses to start, saying why
    for too_big in (largest + 1, 4 * 1024 * 1024):
        with pytest.raises(SettingsError, match=f"INLINE_THRESHOLD={too_big} is above {largest}"):
            Settings.from_env({"PAYLOAD_BUCKET": "b-b", "INLINE_THRESHOLD": str(too_big)})
    # And 400 KiB (16 such jobs take two polls) is fine
    assert Settings.from_env({"PAYLOAD_BUCKET": "b-b", "INLINE_THRESHOLD": "409600"})


def test_presign_ttl_is_capped_at_an_hour_with_the_reason():
    assert (
        Settings.from_env({"PAYLOAD_BUCKET": "b-b", "PRESIGN_TTL_S": "3600"}).presign_ttl_s == 3600
    )
    with pytest.raises(SettingsError, match="PRESIGN_TTL_S=3601 is above 3600: .*session ends"):
        Settings.from_env({"PAYLOAD_BUCKET": "b-b", "PRESIGN_TTL_S": "3601"})


# -- S3's largest object (issue 45) ------------------------------------------------------------


def test_max_payload_bytes_goes_up_to_s3s_largest_object_and_no_further():
    # Given S3's limits: 10,000 parts of at most 5 GiB (about 48.8 TiB)
    largest = 10_000 * 5 * 1024**3
    # When MAX_PAYLOAD_BYTES is set to that object size, it is taken
    s = Settings.from_env({"PAYLOAD_BUCKET": "b-b", "MAX_PAYLOAD_BYTES": str(largest)})
    assert s.max_payload_bytes == largest
    # And every size up to it fits 10,000 parts of at most 5 GiB
    for size in (5 * 1024**4 + 1, 40 * 1024**4, largest - 1, largest):
        part = s.multipart_part_bytes_for(size)
        assert part <= 5 * 1024**3 and -(-size // part) <= 10_000
    # But one byte more is refused, naming the setting
    with pytest.raises(SettingsError, match="max_payload_bytes|MAX_PAYLOAD_BYTES"):
        Settings.from_env({"PAYLOAD_BUCKET": "b-b", "MAX_PAYLOAD_BYTES": str(largest + 1)})
