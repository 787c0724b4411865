"""Namespace policies in the template: other KMS keys a namespace may name (-c
payloadstore:kmsKeys), granted to the functions' roles for payload objects only."""

from __future__ import annotations

import json
import os

import pytest

from tests.infra.cfn import as_list, render, resources
from tests.support.infra import CDK_ENV, STACK

pytestmark = pytest.mark.infra

OTHER_KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def _synth(tmp_path, keys: str) -> dict:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context
    from infra.config import CTX_KMS_KEYS

    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        CTX_KMS_KEYS: keys,
    }
    app, _ = build_app(context=context, outdir=tmp_path, nag=False, builtin_validation=False)
    app.synth()
    return json.loads((tmp_path / f"{STACK}.template.json").read_text())


def test_a_listed_key_is_granted_to_the_functions_for_payload_objects_only(tmp_path):
    # Given -c payloadstore:kmsKeys=<another account's key>
    template = _synth(tmp_path, OTHER_KEY)
    # Then the functions know it may be named by a policy
    env = template["Resources"]["PayloadsFunction"]["Properties"]["Environment"]["Variables"]
    assert env["KMS_KEY_ARNS"] == OTHER_KEY
    # And exactly the roles that presign, complete and copy may generate data keys and decrypt
    # with it, for objects under payloads/ and blobs/
    granted = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if OTHER_KEY in as_list(statement["Resource"]):
                assert sorted(as_list(statement["Action"])) == [
                    "kms:Decrypt",
                    "kms:GenerateDataKey",
                ]
                context = statement["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
                assert sorted(render(c).rsplit("/", 2)[-2] for c in context) == [
                    "blobs",
                    "payloads",
                ]
                granted.update(render(r) for r in policy["Properties"]["Roles"])
    assert sorted(r.strip("<>").split("Role")[0].removeprefix("Functions") for r in granted) == [
        "Daemon",
        "Jobs",
        "Payloads",
        # the blob renewer copies a KMS namespace's blob under its key again
        "Renewals",
    ]


def test_a_value_that_is_not_a_key_arn_fails_synth(tmp_path):
    with pytest.raises(ValueError, match="payloadstore:kmsKeys: not KMS key ARNs"):
        _synth(tmp_path, "alias/my-key")
