"""`-c payloadstore:snapStart=true`: SnapStart on the functions behind the API, invoked through a
`live` alias on the published version; off by default."""

from __future__ import annotations

import json
import os

import pytest

from payloadstore_controlplane.routes import FUNCTIONS
from tests.support.infra import CDK_ENV, STACK

API_GROUPS = ("payloads", "jobs", "daemon", "public", "authorizer")


def functions_by_group(template: dict) -> dict[str, dict]:
    out = {}
    for logical_id, res in template["Resources"].items():
        if res["Type"] == "AWS::Lambda::Function":
            handler = res["Properties"].get("Handler", "")
            for group, h in FUNCTIONS.items():
                if h == handler:
                    out[group] = (logical_id, res)
    return out


@pytest.fixture(scope="module")
def snap_template(tmp_path_factory) -> dict:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp("cdk-snapstart")
    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        "payloadstore:snapStart": "true",
    }
    app, _ = build_app(context=context, outdir=outdir, builtin_validation=False)
    app.synth()
    return json.loads((outdir / f"{STACK}.template.json").read_text())


def test_by_default_no_function_uses_snapstart(template):
    # Given the default synth, Then no function has SnapStart and no alias exists
    for _, res in functions_by_group(template).values():
        assert "SnapStart" not in res["Properties"]
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Alias"]


def test_the_flag_snapshots_the_api_functions_and_the_api_invokes_their_live_alias(snap_template):
    # Given the stack synthesized with -c payloadstore:snapStart=true
    by_group = functions_by_group(snap_template)
    aliases = {
        k: r for k, r in snap_template["Resources"].items() if r["Type"] == "AWS::Lambda::Alias"
    }
    # Then every function behind the API (and the authorizer) snapshots published versions
    for group in API_GROUPS:
        assert by_group[group][1]["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    # and has a `live` alias on a published version of itself
    aliased = {}
    for logical_id, alias in aliases.items():
        props = alias["Properties"]
        assert props["Name"] == "live"
        aliased[props["FunctionName"]["Ref"]] = logical_id
    assert {by_group[g][0] for g in API_GROUPS} <= set(aliased)
    # and the API's integrations and the authorizer call the aliases, never $LATEST
    text = json.dumps(
        {
            k: r
            for k, r in snap_template["Resources"].items()
            if r["Type"] in ("AWS::ApiGateway::Method", "AWS::ApiGateway::Authorizer")
        }
    )
    for group in API_GROUPS:
        assert aliased[by_group[group][0]] in text
    # The admin function, not behind the API, is left as it is
    assert "SnapStart" not in by_group["admin"][1]["Properties"]
