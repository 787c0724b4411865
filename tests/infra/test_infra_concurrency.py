"""Reserved concurrency of the long-poll functions (issue 23): daemon 40 %, jobs 30 % of
`payloadstore:accountConcurrency` (default 1000) by default, overridable per function, and a
split leaving fewer than 100 executions unreserved is refused at synth."""

from __future__ import annotations

import json
import os

import aws_cdk as cdk
import pytest

from infra.config import reserved_concurrency_of
from payloadstore_controlplane.concurrency import MIN_UNRESERVED, reserved_concurrency
from tests.infra.test_infra_snapstart import functions_by_group
from tests.support.infra import CDK_ENV, STACK


def reserved(template: dict) -> dict[str, int | None]:
    return {
        group: res["Properties"].get("ReservedConcurrentExecutions")
        for group, (_, res) in functions_by_group(template).items()
    }


def test_by_default_daemon_and_jobs_reserve_40_and_30_percent_of_1000_and_nothing_else(template):
    # Given the default synth, Then the long-poll functions are capped and the rest share the pool
    assert reserved(template) == {
        "daemon": 400,
        "jobs": 300,
        "payloads": None,
        "public": None,
        "authorizer": None,
        "admin": None,
        "metrics": None,
        "renewals": None,
    }


@pytest.fixture(scope="module")
def override_template(tmp_path_factory) -> dict:
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp("cdk-concurrency")
    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        "payloadstore:accountConcurrency": "3000",
        "payloadstore:daemonConcurrency": "50",
    }
    app, _ = build_app(context=context, outdir=outdir, builtin_validation=False)
    app.synth()
    return json.loads((outdir / f"{STACK}.template.json").read_text())


def test_flags_override_the_account_limit_and_one_function(override_template):
    # Given -c accountConcurrency=3000 -c daemonConcurrency=50, Then jobs keeps its 30 % share
    got = reserved(override_template)
    assert (got["daemon"], got["jobs"]) == (50, 900)


def caps_from(context: dict) -> dict[str, int]:
    return reserved_concurrency_of(cdk.Stack(cdk.App(context=context), "S"))


def test_a_split_leaving_fewer_than_100_unreserved_is_refused_at_synth():
    # Given caps leaving 99 of 1000 unreserved, Then synth refuses with the flags' names
    with pytest.raises(ValueError, match="leaves 99 .*payloadstore:daemonConcurrency"):
        caps_from({"payloadstore:daemonConcurrency": "601"})
    # And a small account's default split is refused (80 + 60 leave 60 of 200)
    with pytest.raises(ValueError, match="at least 100"):
        caps_from({"payloadstore:accountConcurrency": "200"})
    # And exactly 100 unreserved is accepted
    assert caps_from({"payloadstore:daemonConcurrency": "600"}) == {"daemon": 600, "jobs": 300}
    with pytest.raises(ValueError, match="integer"):
        caps_from({"payloadstore:jobsConcurrency": "lots"})


def test_the_derivation_is_the_one_the_local_gateway_uses():
    assert reserved_concurrency() == {"daemon": 400, "jobs": 300}
    assert reserved_concurrency(10_000) == {"daemon": 4000, "jobs": 3000}
    assert MIN_UNRESERVED == 100
    with pytest.raises(ValueError, match="at least 1"):
        reserved_concurrency(1000, {"daemon": 0})
