"""`make synth` / `make deploy`: CDK only (the `infra` extra, no torch, no test extras), the stage
and CDK_ARGS passed through, notices and telemetry off. Dry runs (`make -n`): nothing installed,
nothing deployed (deploying needs AWS credentials; the real synth is test_infra_cli_synth.py)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.support.infra import REPO

pytestmark = pytest.mark.infra


def dry_run(*args: str) -> list[str]:
    """The recipe lines `make -n` prints, as if pyproject.toml and package.json had just changed
    (-W), so the install steps (the target's extra, the CDK CLI) are printed whatever this
    checkout already installed."""
    # make is what the README's commands run: a machine without it cannot pass for one with it
    assert shutil.which("make") is not None, "make not installed"
    result = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "-W", "package.json", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.splitlines()


def cdk_line(lines: list[str], command: str) -> list[str]:
    (line,) = [line for line in lines if re.search(rf"\bnpx cdk {command}\b", line)]
    return shlex.split(line)


def installed_extras(lines: list[str]) -> set[str]:
    return {
        extra for line in lines for extra in re.findall(r"pip install .*-e '\.\[([^\]]+)\]'", line)
    }


def requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement)[0].lower()


def extra_closure(extra: str) -> set[str]:
    """The requirement names `pip install -e '.[extra]'` asks for, self-references expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = {requirement_name(r) for r in project["dependencies"]}
    todo, seen = [extra], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for req in extras[current]:
            if req.startswith("payloadstore["):
                todo += req[len("payloadstore[") : req.index("]")].split(",")
            else:
                names.add(requirement_name(req))
    return names


def test_make_deploy_runs_cdk_deploy_of_the_stage_with_its_context_quietly():
    # When `make deploy` is dry-run for a stage with more context
    lines = dry_run(
        "deploy", "STAGE=x", "CDK_ARGS=-c payloadstore:foo=bar --require-approval never"
    )
    argv = cdk_line(lines, "deploy")
    # Then it deploys that stage's stack, with the stage and the extra arguments as given,
    # notices off and the CLI's telemetry off
    assert argv[:4] == ["CDK_DISABLE_CLI_TELEMETRY=true", "npx", "cdk", "deploy"]
    assert argv[4] == "PayloadStore-x"
    assert "--no-notices" in argv
    assert argv[argv.index("-c") + 1] == "payloadstore:stage=x"
    assert argv[-6:-2] == ["-c", "payloadstore:foo=bar", "--require-approval", "never"]
    # And before it the preflight decides the reserved concurrency from the same arguments and
    # the stage, and its decision comes last (the CLI keeps the last value of a context key)
    (pre,) = [shlex.split(line) for line in lines if "-m infra.preflight" in line]
    assert pre[pre.index("--stage") + 1] == "x"
    written = pre[pre.index("--write") + 1]
    assert pre[pre.index("--") + 1 :] == [
        "-c", "payloadstore:foo=bar", "--require-approval", "never"
    ]  # fmt: skip
    assert lines.index(next(line for line in lines if "-m infra.preflight" in line)) < next(
        i for i, line in enumerate(lines) if "npx cdk deploy" in line
    )
    assert argv[-2:] == ["$(cat", f"{written})"]
    # And it installs the infra extra only, and the pinned CLI
    assert installed_extras(lines) == {"infra"}
    assert any(line.startswith("npm ci") for line in lines)


def test_make_synth_builds_the_dev_stage_by_default_with_only_the_infra_extra():
    lines = dry_run("synth")
    argv = cdk_line(lines, "synth")
    assert argv[:4] == ["CDK_DISABLE_CLI_TELEMETRY=true", "npx", "cdk", "synth"]
    assert "--no-notices" in argv
    assert argv[argv.index("-c") + 1] == "payloadstore:stage=dev"
    assert installed_extras(lines) == {"infra"}


@pytest.mark.parametrize("target", ["synth", "deploy"])
def test_make_synth_and_deploy_install_the_control_plane_the_app_imports(target):
    # Given a fresh clone (issue 32: ModuleNotFoundError payloadstore_controlplane), When the
    # target installs its extra, Then the same pip command installs functions/ beside it
    (install,) = [line for line in dry_run(target) if "-m pip install" in line]
    assert "-e ./functions" in install and "-e '.[infra]'" in install
    # And the extra asks for the control plane's distribution, so pip cannot skip it
    assert "payloadstore-controlplane" in extra_closure("infra")


def test_the_infra_extra_is_cdk_and_what_the_app_imports_no_torch_no_test_tools():
    # What `make synth` / `make deploy` install (the extra named by their install line)
    names = extra_closure("infra")
    assert {"aws-cdk-lib", "constructs", "cdk-nag", "pydantic"} <= names
    # Not the test set's heavy or test-only packages
    for unwanted in ("torch", "pytest", "cfn-lint", "schemathesis", "moto", "numpy", "mkdocs"):
        assert unwanted not in names, unwanted
    # (The test extra does carry torch: the check above is about the right set, not an empty one.)
    assert "torch" in extra_closure("test")


# app.py as `npx cdk` runs it, with `import aws_cdk` failing as in a venv without the extra.
WITHOUT_CDK = (
    "import runpy, sys; sys.path.insert(0, '.'); sys.modules['aws_cdk'] = None; "
    "runpy.run_path('app.py', run_name='__main__')"
)


def test_the_app_without_cdk_installed_says_which_target_installs_it():
    # Given a venv without aws_cdk (what `make dev` alone leaves), when the CLI runs app.py
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_CDK],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it stops with one line naming the module and the make targets, not a traceback
    assert result.returncode == 1
    assert "no module named 'aws_cdk'" in result.stderr
    assert "make synth" in result.stderr
    assert "Traceback" not in result.stderr
