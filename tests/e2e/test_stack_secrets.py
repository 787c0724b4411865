"""No token and no working presigned URL in anything the local stack writes beside its token files;
every file that holds tokens or token hashes is readable by its owner only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.e2e.test_make_dev import REPO_ROOT, StackProcess, stacks  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

# The files whose job is to hold tokens (plain or hashed); everything else must hold none.
TOKEN_FILES = ("tokens.json", "token-store.json", "devstack.json")
URL_SECRETS = (b"X-Amz-Signature", b"X-Amz-Credential")


def test_logs_hold_no_token_nor_presigned_url_after_a_demo(tmp_path, stacks):  # noqa: F811
    # Given the local stack, run as `make dev` runs it, with its own port and state dir
    stack = StackProcess(tmp_path, [sys.executable, "-m", "payloadstore_devstack"])
    stacks.append(stack)
    state = stack.wait_ready()
    tokens = [t.encode() for pair in state["namespaces"].values() for t in pair.values()]
    # When the demo pushes an inline and an 8 MiB (S3, presigned) job through a daemon
    env = {**os.environ, "PAYLOADSTORE_STATE_FILE": str(stack.state_file)}
    demo = subprocess.run(
        [sys.executable, "-m", "payloadstore_devstack.demo", "--state-file", str(stack.state_file)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # and the stack is stopped (it saves its token store and bucket on the way out)
    assert stack.ctrl_c() == 0
    # Then no log or saved file holds a token or a signed URL, the banner included
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "moto.log" for p in written), written
    assert b"payloadstore local stack is up" in stack.log_path.read_bytes()
    for path in written:
        if path.name in TOKEN_FILES:
            continue
        data = path.read_bytes()
        leaked = [t[:8] + b"..." for t in tokens if t in data]
        leaked += [s for s in URL_SECRETS if s in data]
        assert not leaked, f"{path.relative_to(tmp_path)} holds {leaked}"
    for output in (demo.stdout, demo.stderr):
        assert not [t for t in tokens if t in output]
    # And every file holding tokens or token hashes, and every log the stack writes, is 0600
    private = [p for p in written if p.name in TOKEN_FILES or p.name.endswith(".log")]
    private = [p for p in private if p != stack.log_path]
    assert {p.name for p in private} >= {"tokens.json", "token-store.json", "moto.log"}
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
