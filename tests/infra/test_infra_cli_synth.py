"""The real `npx cdk synth`: pinned CLI, no credentials, no Docker; cfn-lint clean; assets built."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from infra.config import API_GATEWAY_ACCOUNT_STACK
from tests.support.infra import STACK

pytestmark = pytest.mark.infra

# CDK makes every function DependsOn its role *and* the role's policy; cfn-lint's W3005 calls the
# role entry redundant (it is already implied by GetAtt). Harmless, emitted by aws-cdk-lib itself.
CFN_LINT_IGNORED = ("W3005",)


def _assets(cli_synth) -> dict[str, dict]:
    """Logical id -> staged asset directory of each function and layer."""
    out = {}
    for logical_id, res in cli_synth.template["Resources"].items():
        path = res.get("Metadata", {}).get("aws:asset:path")
        if path:
            out[logical_id] = cli_synth.outdir / path
    return out


def test_synth_needs_no_credentials_and_makes_no_lookups(cli_synth):
    # Given `npx cdk synth` run with no AWS credentials or config in its environment
    manifest = json.loads((cli_synth.outdir / "manifest.json").read_text())
    # Then it produced the dev stage and the account stack, environment-agnostic, with nothing
    # left to look up in an account
    for name in (STACK, API_GATEWAY_ACCOUNT_STACK):
        artifact = manifest["artifacts"][name]
        assert artifact["environment"] == "aws://unknown-account/unknown-region"
    assert API_GATEWAY_ACCOUNT_STACK in manifest["artifacts"][STACK]["dependencies"]
    assert "missing" not in manifest
    # And the built-in template validation and cdk-nag both ran and passed
    report = json.loads((cli_synth.outdir / "validation-report.json").read_text())
    assert {p["pluginName"]: p["conclusion"] for p in report["pluginReports"]}.get(
        "AwsSolutions"
    ) == "success"
    print(f"npx cdk synth took {cli_synth.seconds:.1f}s")


def test_cfn_lint_finds_nothing(cli_synth):
    from cfnlint import api as cfnlint_api

    # When cfn-lint checks the templates the CLI wrote (the stage and the account stack)
    for path in (
        cli_synth.template_path,
        cli_synth.outdir / f"{API_GATEWAY_ACCOUNT_STACK}.template.json",
    ):
        matches = cfnlint_api.lint_file(
            path, config=cfnlint_api.ManualArgs(ignore_checks=list(CFN_LINT_IGNORED))
        )
        # Then it reports nothing: no error, no warning, no informational finding
        assert [f"{m.rule.id} {m.message} ({m.path})" for m in matches] == [], path.name


def test_layer_holds_manylinux_wheels_for_the_runtime_with_unchecked_bytecode(cli_synth):
    (layer_id,) = [
        k
        for k, v in cli_synth.template["Resources"].items()
        if v["Type"] == "AWS::Lambda::LayerVersion"
    ]
    root = _assets(cli_synth)[layer_id] / "python"
    # Then Lambda finds the dependencies under /opt/python
    for package in (
        "aws_lambda_powertools",
        "pydantic",
        "pydantic_core",
        "redis",
        "hiredis",
        "boto3",
        "botocore",
    ):
        assert (root / package / "__init__.py").is_file(), package
    # Built for the runtime: CPython 3.13 on x86_64 Linux, not for this machine's interpreter
    assert glob.glob(str(root / "pydantic_core" / "_pydantic_core.cpython-313-x86_64-linux-gnu.so"))
    # With bytecode for 3.13 in unchecked-hash mode (valid whatever timestamp the zip gives)
    pycs = glob.glob(str(root / "pydantic" / "__pycache__" / "main.cpython-313.pyc"))
    assert pycs, "no 3.13 bytecode in the layer"
    header = Path(pycs[0]).read_bytes()[:8]
    # PEP 552 flags word: bit 0 hash-based, bit 1 check_source. 0b01 = trusted as shipped.
    assert int.from_bytes(header[4:8], "little") == 0b01, "expected an unchecked hash-based .pyc"


def test_function_asset_is_the_functions_tree_without_tests_or_local_caches(cli_synth):
    assets = _assets(cli_synth)
    functions = {
        k: v
        for k, v in cli_synth.template["Resources"].items()
        if v["Type"] == "AWS::Lambda::Function"
    }
    code_dirs = {assets[k] for k in functions}
    # One code asset shared by all functions
    assert len(code_dirs) == 1
    (code,) = code_dirs
    assert (code / "payloadstore_controlplane" / "routes.py").is_file()
    assert not (code / "tests").exists()
    assert not (code / "requirements.txt").exists()
    assert not glob.glob(str(code / "**" / "*.cpython-311.pyc"), recursive=True), (
        "a local cache leaked in"
    )
    assert glob.glob(
        str(code / "payloadstore_controlplane" / "__pycache__" / "routes.cpython-313.pyc")
    )
