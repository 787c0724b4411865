"""`payloadstore blob put PATH` and `payloadstore enqueue ... --blob NAME=PATH` (issue 25)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.e2e.sdk_helpers import unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e

TASKS = """
import hashlib

def weigh(model, scale=1):
    return {"sha256": hashlib.sha256(model.read()).hexdigest(), "size": model.size * scale}
"""


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    sh = Shell(tmp_path, local_gateway)
    (tmp_path / "blobtasks.py").write_text(TASKS)
    sh.env["PAYLOADSTORE_BLOB_CACHE"] = str(tmp_path / "cache")
    return sh


def test_blob_put_prints_the_sha256_and_uploads_only_once(shell):
    data = os.urandom(1 << 20)
    (shell.dir / "model.bin").write_bytes(data)
    first = shell.run("blob", "put", "model.bin")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == hashlib.sha256(data).hexdigest()
    assert f"uploaded_bytes={len(data)}" in first.stderr
    again = shell.run("blob", "put", "model.bin")
    assert again.stdout == first.stdout and "uploaded_bytes=0" in again.stderr


def test_enqueue_with_a_blob_passes_it_as_a_keyword_argument(shell):
    data = os.urandom(300_000)
    (shell.dir / "model.bin").write_bytes(data)
    queue = unique_queue("cli-blob")
    enqueued = shell.run("enqueue", queue, "--blob", "model=model.bin", "--no-progress")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    daemon = shell.run(
        "daemon", "blobtasks:weigh", "--queue", queue, "--max-jobs", "1", "--poll-wait", "1"
    )
    assert daemon.returncode == 0 and "succeeded=1" in daemon.stderr, daemon.stderr
    result = shell.run("result", job_id, "--wait", "10")
    assert json.loads(result.stdout) == {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def test_a_malformed_blob_option_is_a_usage_error(shell):
    out = shell.run("enqueue", "q", "--blob", "no-equals-sign")
    assert out.returncode == 2 and "NAME=PATH" in out.stderr
