"""Issue 45: a template whose first create succeeds, read from the synthesized templates (the
default dev stage, serverless, and the nodes shape the `template` fixture synthesizes).

- the KMS key policy keeps the account statement only: a key policy naming a role of the same
  stack is refused on create (KMS cannot see the role yet) and CloudFormation does not retry;
- the roles' own IAM policies carry the key grant, for payload and blob objects only;
- what is retained is RetainExceptOnCreate: a failed first create leaves nothing behind;
- a deployment's tokens live under the stack's own id: a stage destroyed and deployed again
  honours none of the old tokens;
- AZs by zone id (-c payloadstore:availabilityZones).
"""

from __future__ import annotations

import json

import pytest

from payloadstore_controlplane.grants import KMS_ACTIONS
from tests.infra.cfn import as_list, render, resources, role_statements

pytestmark = pytest.mark.infra

KMS_GROUPS = sorted(KMS_ACTIONS)


def _key(template) -> tuple[str, dict]:
    ((key_id, key),) = resources(template, "AWS::KMS::Key").items()
    return key_id, key


def _payload_bucket_id(template) -> str:
    (bucket_id,) = [
        k
        for k, v in resources(template, "AWS::S3::Bucket").items()
        if "LoggingConfiguration" in v["Properties"]
    ]
    return bucket_id


@pytest.mark.parametrize("fixture", ["template", "dev_default"])
def test_the_key_policy_names_no_role_only_the_account(request, fixture):
    # Given either shape's template
    template = request.getfixturevalue(fixture)
    if fixture == "dev_default":
        template = template.template
    _key_id, key = _key(template)
    assert key["Properties"]["EnableKeyRotation"] is True
    # Then the key policy has one statement: the account root, which lets IAM administer it
    (statement,) = key["Properties"]["KeyPolicy"]["Statement"]
    principal = render(statement["Principal"]["AWS"])
    assert principal.endswith(":root") and "Role" not in json.dumps(statement)
    # And it delegates every action to IAM (kms:*), so the roles' own policies can grant
    # GenerateDataKey and Decrypt: a root statement of admin actions only would not
    assert statement["Effect"] == "Allow" and statement["Action"] == "kms:*"


@pytest.mark.parametrize("fixture", ["template", "dev_default"])
def test_the_roles_own_policies_grant_the_key_for_payload_and_blob_objects_only(request, fixture):
    template = request.getfixturevalue(fixture)
    if fixture == "dev_default":
        template = template.template
    key_id, _ = _key(template)
    bucket_arn = f"<{_payload_bucket_id(template)}.Arn>"
    granted = set()
    for role_id in resources(template, "AWS::IAM::Role"):
        for statement in role_statements(template, role_id):
            if {"Fn::GetAtt": [key_id, "Arn"]} not in as_list(statement["Resource"]):
                continue
            group = role_id.removeprefix("Functions").split("Role")[0].lower()
            granted.add(group)
            # Then only data keys and decrypt, for objects under payloads/ and blobs/
            assert sorted(as_list(statement["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
            allowed = statement["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
            assert sorted(render(a) for a in allowed) == [
                f"{bucket_arn}/blobs/*",
                f"{bucket_arn}/payloads/*",
            ]
    # And exactly the functions that presign, complete and copy objects hold it
    assert sorted(granted) == KMS_GROUPS


def test_what_is_retained_is_retained_except_on_create(template):
    # Given the default removal policy (retain)
    retained = {
        k: r
        for k, r in template["Resources"].items()
        if r.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")
    }
    # Then the buckets and the key are among them
    kinds = {r["Type"] for r in retained.values()}
    assert {"AWS::S3::Bucket", "AWS::KMS::Key"} <= kinds
    # And none is plain Retain: a failed first create deletes them
    plain = sorted(k for k, r in retained.items() if r["DeletionPolicy"] == "Retain")
    assert plain == [], f"Retain instead of RetainExceptOnCreate: {plain}"


def test_a_deployments_tokens_live_under_the_stacks_own_id(dev_default):
    template = dev_default.template
    stack_uuid = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    # Given the authorizer's and the admin function's environment
    for fn_id in ("AuthorizerFunction", "AdminFunction"):
        env = template["Resources"][fn_id]["Properties"]["Environment"]["Variables"]
        # Then the token path is the stage's path joined with this stack's UUID: a stack
        # created again (after a destroy) has another id, so no earlier token is under it
        assert env["TOKEN_PARAMETER_PATH"] == {
            "Fn::Join": ["/", ["/payloadstore/dev/tokens", stack_uuid]]
        }
    assert template["Outputs"]["TokenParameterPath"]["Value"] == {
        "Fn::Join": ["/", ["/payloadstore/dev/tokens", stack_uuid]]
    }


def test_subnets_take_the_zone_ids_given(tmp_path):
    from tests.infra.conftest import synth_template

    # Given -c payloadstore:availabilityZones=use1-az4,use1-az6
    template = synth_template(tmp_path, {"payloadstore:availabilityZones": "use1-az4,use1-az6"})
    subnets = resources(template, "AWS::EC2::Subnet").values()
    # Then each subnet is placed by zone id, in the order given, and by no AZ name
    assert sorted(s["Properties"]["AvailabilityZoneId"] for s in subnets) == [
        "use1-az4",
        "use1-az6",
    ]
    assert all("AvailabilityZone" not in s["Properties"] for s in subnets)


@pytest.mark.parametrize("bad", ["use1-az1", "us-east-1a,us-east-1b", "use1-az1,use1-az1"])
def test_zone_ids_that_are_not_two_distinct_ids_are_refused(bad):
    import aws_cdk as cdk

    from infra.config import CTX_AVAILABILITY_ZONES, availability_zone_ids_of

    app = cdk.App(context={CTX_AVAILABILITY_ZONES: bad})
    with pytest.raises(ValueError, match="two or more distinct AZ ids"):
        availability_zone_ids_of(app)


def test_with_an_account_and_region_synth_uses_the_accounts_looked_up_zones(tmp_path, monkeypatch):
    from tests.infra.conftest import synth_template

    # Given the CLI resolved an account and region (as `cdk deploy` does from credentials), and
    # the account's AZ lookup (what the CLI caches in cdk.context.json)
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "111122223333")
    monkeypatch.setenv("CDK_DEFAULT_REGION", "eu-west-1")
    lookup = "availability-zones:account=111122223333:region=eu-west-1"
    findings: list[str] = []
    template = synth_template(
        tmp_path, {lookup: ["eu-west-1b", "eu-west-1c", "eu-west-1a"]}, nag_report=findings
    )
    # Then the subnets are in the account's first two zones, by name, not Fn::GetAZs
    zones = sorted(
        s["Properties"]["AvailabilityZone"]
        for s in resources(template, "AWS::EC2::Subnet").values()
    )
    assert zones == ["eu-west-1b", "eu-west-1c"]
    # And cdk-nag's acknowledgements still match the findings, whose ids now carry the account
    # and region (else `make deploy`'s synth would fail on them)
    assert findings == []


def test_without_an_account_synth_leaves_the_zones_to_the_deploy(dev_default):
    zones = [
        s["Properties"]["AvailabilityZone"]
        for s in resources(dev_default.template, "AWS::EC2::Subnet").values()
    ]
    assert all("Fn::Select" in z and "Fn::GetAZs" in json.dumps(z) for z in zones)
