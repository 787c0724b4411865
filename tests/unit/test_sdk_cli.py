"""CLI pieces that need no server: the admin-Lambda token path, argument checks, value output."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from payloadstore.cli import LambdaTokenAdmin, cli, emit_value
from payloadstore.errors import ConfigError


class FakeLambda:
    """Answers like the deployed admin function (payloadstore_controlplane.handlers.admin) would."""

    def __init__(self, answer: dict, function_error: str | None = None):
        self.answer = answer
        self.function_error = function_error
        self.events: list[tuple[str, dict]] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict:
        self.events.append((FunctionName, json.loads(Payload)))
        out = {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(self.answer).encode())}
        if self.function_error:
            out["FunctionError"] = self.function_error
        return out


def without_local_stack(monkeypatch) -> None:
    """As if payloadstore_devstack were not installed: the package and every submodule an
    earlier test imported (an import finds `payloadstore_devstack.services` in sys.modules
    before it looks at the package)."""
    for name in [n for n in sys.modules if n.split(".")[0] == "payloadstore_devstack"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "payloadstore_devstack", None)


def test_given_the_admin_function_when_minting_then_it_is_invoked_with_the_mint_event():
    fake = FakeLambda(
        {"token": "pst_abc", "token_id": "0123456789ab", "namespace": "team", "role": "daemon"}
    )
    token, info = LambdaTokenAdmin("ps-admin", lambda_client=fake).mint("team", "daemon")
    assert (token, info.token_id, info.role) == ("pst_abc", "0123456789ab", "daemon")
    assert fake.events == [("ps-admin", {"action": "mint", "namespace": "team", "role": "daemon"})]


def test_given_a_token_or_an_id_when_revoking_then_the_event_names_the_right_field():
    fake = FakeLambda({"revoked": 1})
    admin = LambdaTokenAdmin("ps-admin", lambda_client=fake)
    assert admin.revoke("pst_secret") == 1 and admin.revoke("0123456789ab") == 1
    assert [e for _, e in fake.events] == [
        {"action": "revoke", "token": "pst_secret"},
        {"action": "revoke", "token_id": "0123456789ab"},
    ]


def test_given_the_admin_function_refuses_when_minting_then_config_error_with_its_reason():
    fake = FakeLambda({"error": "invalid namespace 'Bad NS'"})
    with pytest.raises(ConfigError, match="invalid namespace"):
        LambdaTokenAdmin("ps-admin", lambda_client=fake).mint("Bad NS", "client")


def test_given_the_admin_function_namespace_policy_sends_set_or_get_policy():
    policy = {"retention": "7d", "kms_key": "stack", "inline": "never"}
    fake = FakeLambda({"namespace": "team", "policy": policy})
    admin = LambdaTokenAdmin("ps-admin", lambda_client=fake)
    assert admin.policy("team", {"retention": "7d", "inline": "never"}) == policy
    assert admin.policy("team", {}) == policy
    assert [e for _, e in fake.events] == [
        {"action": "set_policy", "namespace": "team", "retention": "7d", "inline": "never"},
        {"action": "get_policy", "namespace": "team"},
    ]


def test_given_the_admin_function_refuses_a_policy_the_command_exits_2_with_its_reason(
    monkeypatch,
):
    fake = FakeLambda({"error": "retention '3x' must be one of consume, 1d, 2d, 7d, 30d"})
    monkeypatch.setattr("payloadstore.cli.LambdaTokenAdmin.__init__", _fake_init(fake))
    result = CliRunner().invoke(
        cli, ["namespace", "policy", "team", "--kms-key", "x", "--admin-function", "ps-admin"]
    )
    assert result.exit_code == 2, result.output
    assert "must be one of" in result.output
    assert fake.events[0][1]["kms_key"] == "x"


def _fake_init(fake):
    def init(self, function_name, lambda_client=None, region=None):
        self._lambda, self._function = fake, function_name

    return init


def test_given_neither_file_nor_json_when_enqueueing_then_usage_error_exit_2():
    result = CliRunner().invoke(cli, ["--endpoint", "http://x", "--token", "pst_x", "enqueue", "q"])
    assert result.exit_code == 2 and "exactly one of --file, --json or --jsonl" in result.output


def test_given_invalid_json_when_enqueueing_then_usage_error_exit_2():
    result = CliRunner().invoke(
        cli, ["--endpoint", "http://x", "--token", "pst_x", "enqueue", "q", "--json", "{"]
    )
    assert result.exit_code == 2 and "not JSON" in result.output


def test_given_no_credentials_anywhere_when_enqueueing_then_exit_2_naming_what_to_set(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for name in ("PAYLOADSTORE_ENDPOINT", "PAYLOADSTORE_TOKEN", "PAYLOADSTORE_DEVSTACK"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, ["enqueue", "q", "--json", "1"])
    assert result.exit_code == 2
    assert "PAYLOADSTORE_ENDPOINT" in result.output and "payloadstore dev" in result.output


def test_values_are_printed_as_json_and_bytes_raw(tmp_path, capsysbinary):
    import numpy as np

    emit_value({"a": np.arange(3), "b": b"xyz"}, None)
    emit_value(b"\x00\x01", str(tmp_path / "out.bin"))
    out = capsysbinary.readouterr().out
    assert json.loads(out) == {"a": [0, 1, 2], "b": {"bytes": 3}}
    assert (tmp_path / "out.bin").read_bytes() == b"\x00\x01"


@pytest.mark.parametrize(
    ("host", "reason"),
    [("0.0.0.0", "listens everywhere"), ("dashboard.example", "takes an IP address")],
)
def test_the_dashboard_refuses_to_serve_on_a_wildcard_or_a_name(host, reason):
    # Given an endpoint and a token (nothing is called before serving)
    result = CliRunner().invoke(
        cli,
        ["--endpoint", "http://127.0.0.1:9", "--token", "pst_x", "dashboard", "--host", host],
    )
    # Then it exits 2 (configuration) saying why, and serves nothing
    assert result.exit_code == 2
    assert reason in result.output
    assert "pst_x" not in result.output


def test_the_dashboard_without_an_endpoint_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("PAYLOADSTORE_ENDPOINT", "PAYLOADSTORE_TOKEN", "PAYLOADSTORE_DEVSTACK"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, ["dashboard", "--port", "0"])
    assert result.exit_code == 2
    assert "PAYLOADSTORE_ENDPOINT" in result.output


def test_the_dashboard_on_a_port_in_use_says_so_and_exits_2():
    import socket

    # Given a port another process listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # When the dashboard is asked to serve there
        result = CliRunner().invoke(
            cli,
            [
                "--endpoint",
                "http://127.0.0.1:9",
                "--token",
                "pst_x",
                "dashboard",
                "--port",
                str(port),
            ],
        )
    # Then it says which address it could not take
    assert result.exit_code == 2
    assert f"cannot serve the dashboard on 127.0.0.1:{port}" in result.output


class FakeCloudFormation:
    """describe_stacks as CloudFormation answers it for a deployed stage."""

    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs
        self.asked: list[str] = []

    def describe_stacks(self, StackName: str) -> dict:
        self.asked.append(StackName)
        outs = [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]
        return {"Stacks": [{"StackName": StackName, "Outputs": outs}]}


def test_given_a_stage_minting_invokes_its_admin_function_found_in_the_stack_outputs(monkeypatch):
    # Given a deployed dev stage whose outputs name its admin function, and no AWS CLI or jq
    cfn = FakeCloudFormation(
        {"AdminFunctionName": "PayloadStore-dev-Admin-1A2B", "ApiUrl": "https://x/dev/"}
    )
    lam = FakeLambda({"token": "pst_new", "token_id": "0123456789ab", "namespace": "dev",
                      "role": "client"})  # fmt: skip
    clients = {"cloudformation": cfn, "lambda": lam}
    monkeypatch.setattr("boto3.client", lambda service, region_name=None: clients[service])
    # When the smoke's tokens are minted with the payloadstore command
    result = CliRunner().invoke(
        cli, ["token", "create", "-n", "dev", "--role", "client", "--stage", "dev"]
    )
    # Then the stage's admin function minted it, and stdout is the token alone
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "pst_new"
    assert cfn.asked == ["PayloadStore-dev"]
    assert lam.events == [
        ("PayloadStore-dev-Admin-1A2B", {"action": "mint", "namespace": "dev", "role": "client"})
    ]
    # And the endpoint comes from the same outputs
    result = CliRunner().invoke(cli, ["stage-output", "--stage", "dev"])
    assert result.exit_code == 0 and result.stdout.strip() == "https://x/dev/"
    result = CliRunner().invoke(cli, ["stage-output", "Nope", "--stage", "dev"])
    assert result.exit_code != 0 and "AdminFunctionName, ApiUrl" in result.output


def test_given_no_local_stack_package_when_running_dev_then_one_error_line_names_the_extra(
    monkeypatch,
):
    # Given an install without the local stack's distribution (payloadstore-devstack): a None in
    # sys.modules makes its import fail as if it were not installed
    without_local_stack(monkeypatch)
    # When `payloadstore dev` runs
    result = CliRunner().invoke(cli, ["dev", "--port", "1"])
    # Then it exits 2 with one `error:` line saying how to get the stack, and starts nothing
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "pip install 'payloadstore[stack]'" in lines[0] and "make dev" in lines[0]
    assert "missing: payloadstore_devstack" in lines[0]


def test_importing_the_sdk_and_its_cli_does_not_import_the_local_stack():
    # Given a fresh interpreter
    script = (
        "import sys, payloadstore, payloadstore.cli, payloadstore.aio; "
        "print(sorted(m for m in sys.modules if m.startswith('payloadstore_devstack')))"
    )
    # When the SDK, its async client and its CLI are imported
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    # Then no module of the local stack was imported with them
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_given_the_control_plane_without_the_local_stack_token_list_reads_the_deployed_store(
    tmp_path, monkeypatch
):
    from moto import mock_aws

    from payloadstore_controlplane.store.tokens import TokenStore

    # Given the control plane installed without the local stack (`payloadstore[controlplane]`,
    # which docs/sdk.md names for the SSM modes), no .devstack.json, and a deployed stage's
    # token path in SSM with one token minted
    without_local_stack(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAYLOADSTORE_DEVSTACK", raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "TOKEN_PARAMETER_PATH": "/payloadstore/prod/tokens",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        import boto3

        store = TokenStore(boto3.client("ssm"), "/payloadstore/prod/tokens", cache_s=0)
        _, minted = store.mint("team", "daemon")
        # When the tokens are listed
        result = CliRunner().invoke(cli, ["token", "list"])
    # Then the deployed store answers, as it did before the stack became its own distribution
    assert result.exit_code == 0, result.output
    assert minted.token_id in result.output and "team" in result.output


def test_given_a_devstack_file_but_no_local_stack_token_commands_say_what_to_install(
    tmp_path, monkeypatch
):
    # Given a .devstack.json here (a local stack's state) but no local stack installed
    without_local_stack(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for name in ("PAYLOADSTORE_DEVSTACK", "TOKEN_PARAMETER_PATH"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".devstack.json").write_text(
        json.dumps({"endpoint": "http://127.0.0.1:1", "s3_endpoint": "http://127.0.0.1:2"})
    )
    for argv in (["token", "list"], ["namespace", "policy", "team"]):
        # When a token or policy command runs
        result = CliRunner().invoke(cli, argv)
        # Then it exits 2 with one `error:` line naming the extra, no traceback
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert "pip install 'payloadstore[stack]'" in lines[0], lines[0]


def test_given_the_control_plane_without_the_local_stack_a_policy_is_set_in_the_deployed_store(
    tmp_path, monkeypatch
):
    from moto import mock_aws

    # Given the control plane without the local stack, a deployed stage's token path, and a
    # .devstack.json in the working directory (its key is the stack key a policy may name)
    without_local_stack(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".devstack.json").write_text(
        json.dumps({"endpoint": "http://127.0.0.1:1", "s3_endpoint": "http://127.0.0.1:2"})
    )
    monkeypatch.delenv("PAYLOADSTORE_DEVSTACK", raising=False)
    monkeypatch.delenv("KMS_KEY_ARN", raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "TOKEN_PARAMETER_PATH": "/payloadstore/prod/tokens",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        # When the namespace's retention is changed
        result = CliRunner().invoke(cli, ["namespace", "policy", "team", "--retention", "7d"])
    # Then the store takes it, as before the stack became its own distribution
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["retention"] == "7d"
