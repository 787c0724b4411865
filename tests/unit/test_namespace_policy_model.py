"""Namespace policies as values: validation, the headers an upload signs, the authorizer's
context and the stored form (models/policy.py)."""

from __future__ import annotations

import pytest

from payloadstore_controlplane.models.policy import (
    LOCAL_KMS_KEY_ARN,
    NamespacePolicy,
    PolicyError,
    stack_key_arn,
    upload_headers,
    validate_policy,
)

KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
STACK = "arn:aws:kms:eu-west-1:111122223333:key/stack-0000"


def test_the_default_is_todays_behaviour():
    policy = NamespacePolicy()
    assert policy.as_dict() == {"retention": "2d", "kms_key": "none", "inline": "allowed"}
    assert policy.retention_s == 2 * 86_400
    # And the authorizer passes nothing for it (the handlers read the defaults)
    assert policy.to_context() == {}


def test_upload_headers_sign_the_tag_and_the_encryption():
    assert upload_headers(NamespacePolicy("consume"), None) == {
        "x-amz-tagging": "payloadstore-retention=consume",
        "x-amz-server-side-encryption": "AES256",
    }
    assert upload_headers(NamespacePolicy("7d", "stack"), STACK) == {
        "x-amz-tagging": "payloadstore-retention=7d",
        "x-amz-server-side-encryption": "aws:kms",
        "x-amz-server-side-encryption-aws-kms-key-id": STACK,
    }
    assert (
        upload_headers(NamespacePolicy("1d", KEY), STACK)[
            "x-amz-server-side-encryption-aws-kms-key-id"
        ]
        == KEY
    )


def test_context_and_stored_forms_round_trip_and_unknown_values_fall_back():
    policy = NamespacePolicy("30d", KEY, "never")
    assert NamespacePolicy.from_context(policy.to_context()) == policy
    assert NamespacePolicy.from_stored(policy.as_dict()) == policy
    assert NamespacePolicy.from_stored({"retention": "9y", "inline": "x"}) == NamespacePolicy()


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (("3d", "none", "allowed"), "retention '3d' must be one of consume, 1d, 2d, 7d, 30d"),
        (("2d", "none", "maybe"), "inline 'maybe' must be one of allowed, never"),
        (("2d", "alias/x", "allowed"), "must be none, stack or a KMS key ARN"),
        (("2d", KEY, "allowed"), "is not granted to this stack's roles"),
        (("2d", "", "allowed"), "must be none, stack or a KMS key ARN"),
    ],
)
def test_bad_values_are_refused_with_the_reason(values, says):
    with pytest.raises(PolicyError, match=says.replace("(", r"\(").replace(")", r"\)")):
        validate_policy(*values, granted_keys=(), stack_key_arn=STACK)


def test_a_granted_key_and_the_stack_key_are_taken():
    assert validate_policy("7d", KEY, "never", granted_keys=(KEY,)).kms_key == KEY
    assert validate_policy("7d", "stack", "never", stack_key_arn=STACK).kms_key == "stack"
    with pytest.raises(PolicyError, match="no KMS key configured"):
        validate_policy("7d", "stack", "never", stack_key_arn=None)


def test_the_stack_key_is_the_setting_else_the_local_stand_in_on_an_emulator():
    assert stack_key_arn(STACK, "http://127.0.0.1:5000") == STACK
    assert stack_key_arn(None, "http://127.0.0.1:5000") == LOCAL_KMS_KEY_ARN
    assert stack_key_arn(None, None) is None


def test_the_read_window_is_the_class_for_7d_and_30d_and_at_most_the_record_ttl_otherwise():
    two_days = 2 * 86_400
    assert NamespacePolicy("7d").read_window_s(two_days) == 7 * 86_400
    assert NamespacePolicy("30d").read_window_s(two_days) == 30 * 86_400
    assert NamespacePolicy("1d").read_window_s(two_days) == 86_400
    assert NamespacePolicy("2d").read_window_s(3600) == 3600
    assert NamespacePolicy("consume").read_window_s(two_days) == two_days
    assert [NamespacePolicy(r).outlives_records for r in ("consume", "1d", "2d", "7d", "30d")] == [
        False,
        False,
        False,
        True,
        True,
    ]
