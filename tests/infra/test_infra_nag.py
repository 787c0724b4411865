"""cdk-nag AwsSolutions (v3, CDK Validations API) over the stack: nothing unacknowledged."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _plugin(report: dict) -> dict:
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    return plugin


@pytest.mark.parametrize("shape", ["synth", "dev_default"])
def test_aws_solutions_checks_ran_and_found_no_unacknowledged_error(request, shape):
    # Given the stack (nodes; and the default dev stage, serverless) synthesized with
    # AwsSolutionsChecks registered as a validation plugin
    plugin = _plugin(request.getfixturevalue(shape).report)
    # Then every finding, error or warning, has been acknowledged
    open_findings = [
        (v["severity"], v["ruleName"], [c["constructPath"] for c in v["violatingConstructs"]])
        for v in plugin["violations"]
    ]
    assert open_findings == []
    assert plugin["conclusion"] == "success"
    # And the checks really ran: the acknowledged ones are reported as such
    assert len(plugin["suppressedViolations"]) > 0


def test_every_acknowledgement_carries_a_reason(synth):
    for finding in _plugin(synth.report)["suppressedViolations"]:
        reason = finding.get("reason", "")
        assert len(reason.split()) >= 8, (
            f"{finding['ruleName']} acknowledged without a real reason: {reason!r}"
        )


def test_acknowledgements_live_in_one_module():
    # Then no construct module acknowledges findings on its own: nag.py is the one place to review
    offenders = []
    for path in INFRA.glob("*.py"):
        if path.name == "nag.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in (
                "acknowledge",
                "acknowledge_warning",
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_the_real_app_fails_synth_on_an_unacknowledged_finding(tmp_path):
    # Given the app as `npx cdk synth` builds it, but without the acknowledgements
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from infra.app_factory import build_app, cdk_json_context

    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
    }
    app, _stack = build_app(context=context, outdir=tmp_path, nag=False, builtin_validation=False)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    # When it synthesizes, Then synth fails and names a rule
    with pytest.raises(Exception, match="AwsSolutions-"):
        app.synth()
