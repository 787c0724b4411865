"""`payloadstore cancel JOB_ID` as a shell user runs it, against the local gateway."""

from __future__ import annotations

import pytest

from tests.e2e.sdk_helpers import unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def test_given_a_queued_job_when_cancelled_from_the_cli_then_cancelled_and_a_second_cancel_exits_1(
    shell,
):
    # Given: a queued job no daemon polls
    job_id = shell.run("enqueue", unique_queue("cli-cancel"), "--json", "1").stdout.strip()
    # When: it is cancelled
    out = shell.run("cancel", job_id)
    # Then: it says so; the result exits 1 naming the cancel; cancelling again is refused
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{job_id} cancelled"
    result = shell.run("result", job_id, "--wait", "1")
    assert result.returncode == 1
    assert f"job {job_id} was cancelled" in result.stderr
    again = shell.run("cancel", job_id)
    assert again.returncode == 1 and again.stderr.startswith("error: ")
    assert "cannot be cancelled" in again.stderr
