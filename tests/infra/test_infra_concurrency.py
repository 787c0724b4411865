"""Reserved concurrency that fits the account (issue 32): the default template reserves nothing;
`make deploy`'s preflight (infra/preflight.py) decides from the account's settings what the stage
reserves, says so in one line and hands CDK exactly that; `payloadstore:reservedConcurrency=
off|auto|N` overrides; the local gateway decides the same way.

The account's settings are injected (no AWS here): each test stubs what GetAccountSettings and the
stage's own functions would answer."""

from __future__ import annotations

import json
import os

import aws_cdk as cdk
import pytest

from infra import preflight
from infra.config import reserved_concurrency_of
from payloadstore_controlplane.concurrency import (
    MIN_UNRESERVED,
    AccountConcurrency,
    decide,
)
from payloadstore_devstack.gateway import local_concurrency_caps
from tests.infra.test_infra_snapstart import functions_by_group
from tests.support.infra import CDK_ENV, STACK

pytestmark = pytest.mark.infra


def reserved(template: dict) -> dict[str, int | None]:
    return {
        group: res["Properties"].get("ReservedConcurrentExecutions")
        for group, (_, res) in functions_by_group(template).items()
    }


def test_a_plain_synth_reserves_nothing(template):
    # Given the default synth (no flag: what `cdk synth` and a bare `cdk deploy` build)
    # Then no function reserves concurrency, so no account is too small for the template
    assert set(reserved(template).values()) == {None}


def account(limit: int, reserved_elsewhere: int = 0, own: int = 0):
    """What the preflight would read: limit, unreserved (after every reservation) and this
    stage's own current reservation."""
    settings = AccountConcurrency(
        limit=limit, unreserved=limit - reserved_elsewhere - own, own_reserved=own
    )
    return lambda stage: settings


def run_preflight(
    capsys, tmp_path, reader, *cdk_args: str, stage: str = "prod"
) -> tuple[int, str, str, str]:
    """The preflight of a stage other than dev (auto reserves nothing for dev)."""
    out_file = tmp_path / "deploy.args"
    code = preflight.main(
        ["--stage", stage, "--write", str(out_file), "--", *cdk_args], reader=reader
    )
    captured = capsys.readouterr()
    written = out_file.read_text().strip() if out_file.exists() else ""
    return code, captured.out, captured.err, written


def test_auto_reserves_nothing_for_the_dev_stage_and_reads_no_account(capsys, tmp_path):
    # Given a 1,000 account, where auto would reserve 400 + 300 for any other stage
    def reader(stage):
        raise AssertionError("the dev stage's auto must not need the account's settings")

    # When `make deploy` runs for the dev stage (auto, its default)
    code, out, _, written = run_preflight(capsys, tmp_path, reader, stage="dev")
    # Then it reserves nothing, and says why in its line
    assert code == 0
    assert written == "-c payloadstore:reservedConcurrency=off"
    assert out.strip().startswith("reserved concurrency: none (auto reserves nothing for the dev")
    # And an explicit total still reserves for dev
    code, out, _, written = run_preflight(
        capsys, tmp_path, account(1000), "-c", "payloadstore:reservedConcurrency=70", stage="dev"
    )
    assert code == 0 and "payloadstore:reservedConcurrency=70" in written


def test_a_new_account_with_a_limit_of_10_deploys_with_nothing_reserved_and_is_told_why(
    capsys, tmp_path
):
    # Given an account whose Lambda concurrency limit is 10 (new accounts start low)
    code, out, _, written = run_preflight(capsys, tmp_path, account(10))
    # Then the preflight lets the deploy go on, reserving nothing (AWS would refuse any number)
    assert code == 0
    assert written == "-c payloadstore:reservedConcurrency=off"
    # And says so in one line, with the reason, then how to ask for a higher limit
    line, warning = out.strip().splitlines()
    assert line.startswith("reserved concurrency: none (the account's limit 10 leaves 10")
    assert f"keep the {MIN_UNRESERVED} unreserved AWS requires" in line
    assert warning.startswith("warning: ") and "Service Quotas" in warning
    assert "--quota-code L-B99A9384" in warning


def test_an_account_of_400_gets_the_default_partition_160_and_120(capsys, tmp_path):
    code, out, _, written = run_preflight(capsys, tmp_path, account(400))
    assert code == 0
    assert out.strip() == (
        "reserved concurrency: daemon 160, jobs 120 "
        "(40 % and 30 % of the account's limit 400; 120 unreserved)"
    )
    assert written == (
        "-c payloadstore:reservedConcurrency=280 -c payloadstore:daemonConcurrency=160 "
        "-c payloadstore:jobsConcurrency=120"
    )


def test_a_second_stage_beside_one_reserving_700_of_1000_gets_what_fits(capsys, tmp_path):
    # Given a 1,000 account where another stage already reserves 700 (400 + 300)
    code, out, _, written = run_preflight(capsys, tmp_path, account(1000, reserved_elsewhere=700))
    # Then this stage reserves the 200 that leave AWS's 100 unreserved, split 4:3
    assert code == 0
    assert out.strip() == (
        "reserved concurrency: daemon 114, jobs 86 (all that fits: the account's limit 1000, "
        "other functions reserve 700, and AWS keeps 100 unreserved)"
    )
    assert "payloadstore:reservedConcurrency=200" in written
    # And the first stage alone got the default partition
    assert decide(AccountConcurrency(1000, 1000)).caps == {"daemon": 400, "jobs": 300}


def test_a_redeploy_does_not_count_the_stage_s_own_reservation_against_it():
    # Given the stage already reserves 700 of 1,000 (its last deploy), nothing else does
    settings = account(1000, own=700)("dev")
    # Then it keeps its default partition rather than shrinking to the 200 "left"
    assert settings.reserved_elsewhere == 0
    assert decide(settings).caps == {"daemon": 400, "jobs": 300}


def test_off_and_an_explicit_total_override_auto(capsys, tmp_path):
    # off: nothing reserved, whatever the account, and the account is not even read
    def unreadable(stage):
        raise AssertionError("off needs no account settings")

    code, out, _, written = run_preflight(
        capsys, tmp_path, unreadable, "-c", "payloadstore:reservedConcurrency=off"
    )
    assert code == 0 and written == "-c payloadstore:reservedConcurrency=off"
    assert out.startswith("reserved concurrency: none (payloadstore:reservedConcurrency=off)")
    # N: that total, split 4:3, when it fits
    code, out, _, written = run_preflight(
        capsys, tmp_path, account(1000), "-c", "payloadstore:reservedConcurrency=70"
    )
    assert code == 0
    assert out.startswith("reserved concurrency: daemon 40, jobs 30 (")
    assert "payloadstore:daemonConcurrency=40" in written


def test_a_total_that_aws_would_refuse_stops_before_cloudformation(capsys, tmp_path):
    # Given 700 asked for explicitly where another stage already reserves 700 of 1,000
    code, out, err, written = run_preflight(
        capsys,
        tmp_path,
        account(1000, reserved_elsewhere=700),
        "--context",
        "payloadstore:reservedConcurrency=700",
    )
    # Then the preflight fails, writes nothing for cdk, and says why with the numbers
    assert code == 1 and written == "" and out == ""
    assert "leaves -400 of the account's 1000 unreserved" in err
    assert "reserve at most 200 in all" in err
    assert "Service Quotas" in err


def test_a_bad_flag_is_refused_with_its_name(capsys, tmp_path):
    code, _, err, _ = run_preflight(
        capsys, tmp_path, account(1000), "-c", "payloadstore:reservedConcurrency=lots"
    )
    assert code == 1
    assert "payloadstore:reservedConcurrency must be off, auto or a number" in err


def test_the_aws_reader_reads_the_limit_and_the_stage_s_own_functions():
    # Given boto3 clients stubbed with what AWS answers (GetAccountSettings, the stack's
    # resources, GetFunctionConcurrency)
    from botocore.exceptions import ClientError

    class Lambda:
        def get_account_settings(self):
            return {
                "AccountLimit": {
                    "ConcurrentExecutions": 1000,
                    "UnreservedConcurrentExecutions": 300,
                }
            }

        def get_function_concurrency(self, FunctionName):
            return {"ReservedConcurrentExecutions": {"d-fn": 400, "j-fn": 300}[FunctionName]}

    class CloudFormation:
        def describe_stack_resource(self, StackName, LogicalResourceId):
            assert StackName == "PayloadStore-dev"
            name = {"DaemonFunction": "d-fn", "JobsFunction": "j-fn"}[LogicalResourceId]
            return {"StackResourceDetail": {"PhysicalResourceId": name}}

    class NewStage(CloudFormation):
        def describe_stack_resource(self, StackName, LogicalResourceId):
            raise ClientError({"Error": {"Code": "ValidationError"}}, "DescribeStackResource")

    class Session:
        def __init__(self, cfn):
            self.cfn = cfn

        def client(self, name):
            return {"lambda": Lambda(), "cloudformation": self.cfn}[name]

    # Then a deployed stage's 700 are its own, not another's
    got = preflight.aws_reader(Session(CloudFormation()))("dev")
    assert (got.limit, got.unreserved, got.own_reserved) == (1000, 300, 700)
    assert got.reserved_elsewhere == 0
    # And a stage not deployed yet owns nothing: the 700 are someone else's
    got = preflight.aws_reader(Session(NewStage()))("dev")
    assert got.reserved_elsewhere == 700


def synth_with(context: dict, tmp_path_factory) -> dict:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp("cdk-concurrency")
    full = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        **context,
    }
    app, _ = build_app(context=full, outdir=outdir, builtin_validation=False, nag=False)
    app.synth()
    return json.loads((outdir / f"{STACK}.template.json").read_text())


def test_the_preflight_s_context_makes_the_template_reserve_exactly_its_line(tmp_path_factory):
    # Given the context the preflight wrote for the second stage (daemon 114, jobs 86)
    decision = decide(AccountConcurrency(1000, 300))
    got = reserved(synth_with(decision.context(), tmp_path_factory))
    # Then the template reserves those numbers on daemon and jobs, nothing on the others
    assert {g: c for g, c in got.items() if c is not None} == {"daemon": 114, "jobs": 86}


def caps_from(context: dict) -> dict[str, int]:
    return reserved_concurrency_of(cdk.Stack(cdk.App(context=context), "S"))


def test_the_template_flags_off_n_and_per_function_overrides():
    assert caps_from({}) == {}
    assert caps_from({"payloadstore:reservedConcurrency": "off"}) == {}
    assert caps_from({"payloadstore:reservedConcurrency": "700"}) == {"daemon": 400, "jobs": 300}
    assert caps_from(
        {"payloadstore:reservedConcurrency": "700", "payloadstore:daemonConcurrency": "50"}
    ) == {"daemon": 50, "jobs": 300}
    # auto needs the account: only the preflight can decide it, and synth says so
    with pytest.raises(ValueError, match="make deploy"):
        caps_from({"payloadstore:reservedConcurrency": "auto"})
    with pytest.raises(ValueError, match="integer"):
        caps_from({"payloadstore:jobsConcurrency": "lots"})


def test_the_local_gateway_decides_as_make_deploy_does():
    # By default: auto on a 1,000 account nothing else reserves (a stage `make deploy` would make)
    assert local_concurrency_caps({}) == {"daemon": 400, "jobs": 300}
    assert local_concurrency_caps({"PAYLOADSTORE_LOCAL_ACCOUNT_CONCURRENCY": "10"}) == {}
    assert local_concurrency_caps({"PAYLOADSTORE_LOCAL_RESERVED_CONCURRENCY": "off"}) == {}
    assert local_concurrency_caps({"PAYLOADSTORE_LOCAL_RESERVED_CONCURRENCY": "70"}) == {
        "daemon": 40,
        "jobs": 30,
    }
    assert local_concurrency_caps({"PAYLOADSTORE_LOCAL_DAEMON_CONCURRENCY": "2"}) == {
        "daemon": 2,
        "jobs": 300,
    }


def test_without_aws_credentials_the_preflight_stops_with_a_clear_message(tmp_path):
    # Given no AWS credentials at all (what a fresh machine has), When `make deploy`'s
    # preflight runs (its first step)
    import subprocess
    import sys

    from tests.support.infra import REPO, credential_free_env

    result = subprocess.run(
        [sys.executable, "-m", "infra.preflight", "--stage", "dev", "--"],
        cwd=REPO,
        env=credential_free_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it stops before anything is deployed, saying what is missing and how to give it
    assert result.returncode == 1
    assert result.stderr.startswith("error: no AWS credentials found")
    assert "aws configure" in result.stderr and "Traceback" not in result.stderr
