"""Memory of the functions and the `payloadstore:architecture` flag (issue 23).

The long-poll functions get the memory their measured peak allows (bench/bench_function_cpu.py):
daemon 128 MB, jobs 256 MB, each overridable with `-c payloadstore:memory:<group>=MB`; the layer
and every function run on x86_64 unless `-c payloadstore:architecture=arm64`, which builds the
layer for Graviton (pip --platform manylinux2014_aarch64) and runs the functions on ARM_64."""

from __future__ import annotations

import json
import os

import aws_cdk as cdk
import pytest

from infra.bundling import LayerBundling
from infra.config import LOCK_FILE, architecture_of, log_level_of, memory_of
from tests.infra.cfn import resources
from tests.infra.test_infra_snapstart import functions_by_group
from tests.support.infra import CDK_ENV, STACK


def synth_with(tmp_path_factory, name: str, flags: dict[str, str]):
    os.environ.update(CDK_ENV)
    from infra.app_factory import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp(name)
    context = {
        **cdk_json_context(),
        "aws:cdk:bundling-stacks": [],
        "aws:cdk:disable-asset-staging": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
        **flags,
    }
    app, stack = build_app(context=context, outdir=outdir, builtin_validation=False, nag=False)
    app.synth()
    return json.loads((outdir / f"{STACK}.template.json").read_text()), stack


@pytest.fixture(scope="module")
def arm_synth(tmp_path_factory):
    return synth_with(
        tmp_path_factory,
        "cdk-arm64",
        {
            "payloadstore:architecture": "arm64",
            "payloadstore:memory:daemon": "256",
            "payloadstore:logLevel": "warning",
        },
    )


def memory(template: dict) -> dict[str, int]:
    return {
        g: res["Properties"]["MemorySize"] for g, (_, res) in functions_by_group(template).items()
    }


def architectures(template: dict) -> set[str]:
    found = {
        a
        for _, res in functions_by_group(template).values()
        for a in res["Properties"]["Architectures"]
    }
    for layer in resources(template, "AWS::Lambda::LayerVersion").values():
        found.update(layer["Properties"]["CompatibleArchitectures"])
    return found


def test_the_long_poll_functions_get_their_measured_memory_by_default(template):
    # Given the default synth, Then the daemon function (an idle daemon holds one of it
    # continuously) has 128 MB and jobs 256 MB; the short routes keep theirs
    assert memory(template) == {
        "daemon": 128,
        "jobs": 256,
        "payloads": 512,
        "public": 512,
        "authorizer": 512,
        "admin": 256,
        "metrics": 256,
        "renewals": 256,
    }


def test_by_default_the_layer_and_every_function_are_x86_64(synth, template):
    assert architectures(template) == {"x86_64"}
    # And the layer is built with pip for x86_64 wheels
    assert synth.stack.functions.layer_bundling.platform == "manylinux2014_x86_64"


def test_arm64_flag_builds_the_layer_for_graviton_and_runs_every_function_on_arm64(arm_synth):
    template, stack = arm_synth
    # Given -c payloadstore:architecture=arm64, Then every function and the layer say arm64
    assert architectures(template) == {"arm64"}
    # And the layer's pip build asks for aarch64 wheels, under an asset hash of its own (an x86
    # build in the cache is never reused for Graviton)
    bundling = stack.functions.layer_bundling
    assert bundling.platform == "manylinux2014_aarch64"
    assert bundling.asset_hash() != LayerBundling(LOCK_FILE).asset_hash()
    # And the memory flag overrides one function only
    assert memory(template)["daemon"] == 256
    assert memory(template)["jobs"] == 256


def log_levels(template: dict) -> dict[str, str]:
    return {
        g: res["Properties"]["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"]
        for g, (_, res) in functions_by_group(template).items()
    }


def test_every_function_logs_at_info_by_default_and_at_the_flag_s_level(template, arm_synth):
    # Given the default synth, Then every function logs at INFO (a job's enqueue and end lines)
    assert set(log_levels(template).values()) == {"INFO"}
    # And with -c payloadstore:logLevel=warning, every function at WARNING (no per-job lines)
    assert set(log_levels(arm_synth[0]).values()) == {"WARNING"}


def flags(context: dict):
    return cdk.Stack(cdk.App(context=context), "S")


def test_bad_architecture_or_memory_flags_are_refused_at_synth():
    with pytest.raises(ValueError, match="payloadstore:architecture must be one of x86_64, arm64"):
        architecture_of(flags({"payloadstore:architecture": "graviton"}))
    assert architecture_of(flags({"payloadstore:architecture": "ARM64"})) == "arm64"
    with pytest.raises(ValueError, match=r"payloadstore:memory:daemon must be 128\.\.10240"):
        memory_of(flags({"payloadstore:memory:daemon": "64"}), "daemon")
    with pytest.raises(ValueError, match="integer"):
        memory_of(flags({"payloadstore:memory:jobs": "lots"}), "jobs")
    with pytest.raises(ValueError, match="payloadstore:logLevel must be one of DEBUG, INFO"):
        log_level_of(flags({"payloadstore:logLevel": "verbose"}))


def test_the_arm64_layer_build_asks_pip_for_aarch64_wheels(monkeypatch, tmp_path):
    # Given the layer bundling of an arm64 stage, When it builds (pip stubbed out)
    import subprocess

    from infra import bundling

    seen: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bundling.subprocess, "run", fake_run)
    layer = LayerBundling(LOCK_FILE, platform="manylinux2014_aarch64")
    layer.compiler = None
    layer.build(tmp_path)
    # Then pip installs binary wheels for aarch64 and CPython 3.13 only
    (pip,) = [c for c in seen if "pip" in c]
    assert pip[pip.index("--platform") + 1] == "manylinux2014_aarch64"
    assert "--only-binary=:all:" in pip
    assert pip[pip.index("--python-version") + 1] == "3.13"
