"""`payloadstore status JOB --show-args` against the local stack: the job's status line, then
its arguments (and result) as a readable preview, or the S3 reference of an S3-tier value."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def test_given_a_queued_inline_job_when_shown_with_args_then_its_arguments_read_as_text(
    shell, local_gateway
):
    # Given: a job no daemon took yet
    client, _ = clients(local_gateway)
    job = client.queue(unique_queue("show-args")).add(21, name="<b>x</b>", scale=0.5)
    # When: its status is asked for with --show-args
    run = shell.run("status", job.job_id, "--show-args")
    # Then: the first line is the status JSON as before, then the arguments decoded
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert json.loads(lines[0])["state"] == "queued"
    assert lines[1].startswith("args: inline ")
    assert lines[2] == "  {'args': [21], 'kwargs': {'name': '<b>x</b>', 'scale': 0.5}}"
    assert not any(line.startswith("result:") for line in lines)


def test_given_an_s3_job_with_a_result_when_shown_then_the_reference_and_array_shapes_print(
    shell, local_gateway
):
    # Given: a job whose arguments (a 400 KB array) went to S3, and that succeeded
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("show-args")
    array = np.zeros((100, 1000), dtype=np.float32)
    with daemon_thread(daemon_client, queue, lambda a: {"total": float(a.sum()), "n": a.size}):
        job = client.queue(queue).add(array)
        assert job.result(timeout=60) == {"total": 0.0, "n": 100_000}
    # When: its status is asked for with --show-args
    run = shell.run("status", job.job_id, "--show-args")
    # Then: the arguments' S3 reference and their shape and dtype, then the result
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    args_line = next(line for line in lines if line.startswith("args: "))
    assert args_line.startswith("args: s3 s3://") and f"/{job.job_id}/args" in args_line
    assert (
        "  {'args': [<ndarray shape=(100, 1000) dtype=<f4, 400000 bytes>], 'kwargs': {}}" in lines
    )
    assert lines[lines.index(next(x for x in lines if x.startswith("result: "))) + 1] == (
        "  {'total': 0.0, 'n': 100000}"
    )


def test_show_args_of_an_unknown_job_is_a_404_on_one_line(shell):
    run = shell.run("status", "01JD0000000000000000000000", "--show-args")
    assert run.returncode != 0
    assert "not found" in run.stderr
