"""The CLI's contract (issue 46): credentials go only where their source says, output is strict
JSON, and every bad input is one `error:` line with its exit code, never a traceback."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from payloadstore.cli import cli


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that records every Authorization header it receives."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            body = b'{"queues": []}'
            if self.path.startswith("/v1/config"):
                body = b'{"inline_threshold": 262144, "max_payload_bytes": 104857600}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _any

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _devstack(path, endpoint: str) -> None:
    tokens = {"client_token": "pst_from_the_file", "daemon_token": "pst_daemon_of_the_file"}
    (path / ".devstack.json").write_text(
        json.dumps({"endpoint": endpoint, "namespaces": {"dev": tokens}})
    )


def _env(**values: str) -> dict[str, str | None]:
    names = ("ENDPOINT", "TOKEN", "NAMESPACE", "DEVSTACK")
    env: dict[str, str | None] = {f"PAYLOADSTORE_{n}": None for n in names}
    env.update(values)
    return env


def test_a_token_from_the_environment_never_goes_to_a_devstack_json_endpoint(
    tmp_path, monkeypatch, listener
):
    # Given a .devstack.json (say, a cloned repository's) naming a listener, and a token in the
    # environment with no endpoint
    url, seen = listener
    _devstack(tmp_path, url)
    monkeypatch.chdir(tmp_path)
    # When a command runs
    done = CliRunner().invoke(cli, ["queues"], env=_env(PAYLOADSTORE_TOKEN="pst_secret"))
    # Then it refuses with one line naming what to set (exit 2), and the listener got nothing
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error: a token from --token/PAYLOADSTORE_TOKEN needs its")
    assert len(done.output.splitlines()) == 1
    assert seen == []


def test_a_given_endpoint_never_gets_the_token_of_another_stacks_devstack_json(
    tmp_path, monkeypatch, listener
):
    # Given an endpoint in the environment, and a .devstack.json of another stack
    url, seen = listener
    _devstack(tmp_path, "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["queues"], env=_env(PAYLOADSTORE_ENDPOINT=url))
    # Then the file's token is not sent there
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error: an endpoint from --endpoint/PAYLOADSTORE_ENDPOINT")
    assert seen == []


def test_the_devstack_json_alone_or_both_given_still_work(tmp_path, monkeypatch, listener):
    url, seen = listener
    _devstack(tmp_path, url)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    # Given only the file: its endpoint gets its own token
    assert runner.invoke(cli, ["queues", "--json"], env=_env()).exit_code == 0
    # Given the file's own endpoint: its token goes with it
    assert runner.invoke(cli, ["queues"], env=_env(PAYLOADSTORE_ENDPOINT=url + "/")).exit_code == 0
    # Given both in the environment: those two
    both = _env(PAYLOADSTORE_ENDPOINT=url, PAYLOADSTORE_TOKEN="pst_given")
    assert runner.invoke(cli, ["queues"], env=both).exit_code == 0
    assert seen == ["Bearer pst_from_the_file"] * 2 + ["Bearer pst_given"]


def _strict(text: str):
    """json.loads that refuses NaN and the infinities, as strict JSON readers do."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_result_output_is_strict_json_by_the_documented_rule(capsys):
    import numpy as np

    from payloadstore.cli import emit_value

    # Given results with NaN, the infinities (also in arrays) and non-string map keys
    value = {
        "nan": float("nan"),
        "inf": [float("inf"), -float("inf")],
        "array": np.array([1.0, np.nan]),
        b"raw key": 1,
        b"\xff\x00": 2,
        3: "int key",
        None: True,
        1.5: np.float32(2.5),
    }
    # When printed as a result
    emit_value(value, None)
    emit_value(float("nan"), None)
    # Then every line is strict JSON, by the rule docs/sdk.md states
    first, second = capsys.readouterr().out.splitlines()
    assert _strict(first) == {
        "nan": "NaN",
        "inf": ["Infinity", "-Infinity"],
        "array": [1.0, "NaN"],
        "raw key": 1,
        "0xff00": 2,
        "3": "int key",
        "null": True,
        "1.5": 2.5,
    }
    assert _strict(second) == "NaN"


def test_an_argument_msgpack_cannot_hold_is_one_error_line_and_exit_2(
    tmp_path, monkeypatch, listener, capsys
):
    from payloadstore.cli import main

    url, seen = listener
    monkeypatch.chdir(tmp_path)
    for name, value in _env(PAYLOADSTORE_ENDPOINT=url, PAYLOADSTORE_TOKEN="pst_t").items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    # When enqueueing an integer past msgpack's 64 bits
    with pytest.raises(SystemExit) as exited:
        main(["enqueue", "q", "--json", "18446744073709551616"])
    # Then one error line, exit 2, and no job was sent
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("error: cannot encode") and "nothing was enqueued" in err
    assert len(err.splitlines()) == 1
    assert not any("Traceback" in line for line in err.splitlines())
    assert len(seen) <= 1  # at most /v1/config: no enqueue


def test_an_error_no_command_anticipated_is_still_one_line(monkeypatch, capsys):
    from payloadstore import cli as cli_module

    # Given a command that fails in a way none anticipated
    def broken(*args, **kwargs):
        raise RuntimeError("something odd\nsecond line")

    monkeypatch.setattr(cli_module.cli, "main", broken)
    with pytest.raises(SystemExit) as exited:
        cli_module.main(["queues"])
    assert exited.value.code == 1
    assert capsys.readouterr().err == "error: RuntimeError: something odd\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["result", "JOB", "--wait", "nan"],
        ["result", "JOB", "--wait", "-5"],
        ["enqueue", "q"],
        ["enqueue", "q", "--json", "{"],
        ["no-such-command"],
        ["enqueue", "q", "--json", "1", "--wait", "5", "--out", "/no/such/dir/result.json"],
        ["result", "JOB", "--out", "/no/such/dir/result.bin"],
    ],
)
def test_every_bad_input_is_one_error_line_and_exit_2(argv, monkeypatch, capsys, listener):
    from payloadstore.cli import main

    url, seen = listener
    monkeypatch.setenv("PAYLOADSTORE_ENDPOINT", url)
    monkeypatch.setenv("PAYLOADSTORE_TOKEN", "pst_t")
    # When a command gets a bad input
    with pytest.raises(SystemExit) as exited:
        main(argv)
    # Then it answers one `error:` line, exit 2, before any call
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert seen == []


@pytest.mark.parametrize(
    "argv, option",
    [
        (["top", "--interval", "nan"], "--interval"),
        (["top", "--interval", "inf"], "--interval"),
        (["dashboard", "--port", "0", "--refresh", "nan"], "--refresh"),
        (["dashboard", "--port", "0", "--refresh", "inf"], "--refresh"),
    ],
)
def test_a_nan_or_infinite_interval_is_one_error_line_naming_the_option_and_exit_2(
    argv, option, monkeypatch, capsys, listener
):
    from payloadstore.cli import main

    url, seen = listener
    monkeypatch.setenv("PAYLOADSTORE_ENDPOINT", url)
    monkeypatch.setenv("PAYLOADSTORE_TOKEN", "pst_t")
    # When a refresh interval is NaN or infinite (a range check alone lets NaN through)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    # Then the option is refused: one `error:` line naming it, exit 2, before any call
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert option in err
    assert seen == []


def test_map_keys_that_print_alike_are_all_kept(capsys):
    from payloadstore.cli import emit_value

    # Given a map whose keys are distinct but print alike (a msgpack map may hold "1" and 1)
    value = {"1": "str", 1: "int", "1.5": "str", 1.5: "float", "3": "str", 3: "int", b"3": "bytes"}
    # When printed as a result
    emit_value(value, None)
    # Then every entry is there, each under its own key
    printed = _strict(capsys.readouterr().out)
    assert len(printed) == len(value)
    assert sorted(printed.values()) == sorted(value.values())


@pytest.mark.parametrize("value", ['b"x" * 200_000', '["x" * 200_000]'], ids=["bytes", "json"])
def test_out_keeps_the_old_file_whole_when_writing_the_result_fails(tmp_path, value):
    import subprocess
    import sys

    # Given an --out file holding an older result, and a disk that takes no more than 64 KiB
    # per file (RLIMIT_FSIZE: a write past it fails with EFBIG, as a full disk would)
    out = tmp_path / "result.out"
    out.write_bytes(b"the previous result")
    script = (
        "import resource, signal, sys\n"
        "from payloadstore.cli import emit_value\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
        f"emit_value({value}, sys.argv[1])\n"
    )
    # When the result is written there and the write fails midway
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)], check=False, capture_output=True, text=True
    )
    # Then the command failed, the old file is whole and no partial file is left (docs/sdk.md:
    # written beside it and renamed over it)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert out.read_bytes() == b"the previous result"
    assert [p.name for p in tmp_path.iterdir()] == ["result.out"]
