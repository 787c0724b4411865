"""`payloadstore enqueue QUEUE --jsonl FILE`: one job per line through the batch route."""

from __future__ import annotations

import json

import pytest

from tests.e2e.sdk_helpers import unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def test_jsonl_enqueues_one_job_per_line_and_a_daemon_runs_them(shell):
    # Given a JSON Lines file of 150 values (and a blank line)
    queue = unique_queue("cli-jsonl")
    lines = [json.dumps({"a": i, "b": 2}) for i in range(150)]
    (shell.dir / "jobs.jsonl").write_text("\n".join(lines[:75]) + "\n\n" + "\n".join(lines[75:]))
    # When the user enqueues it
    out = shell.run("enqueue", queue, "--jsonl", "jobs.jsonl")
    # Then one job id per line, in order, and a summary on stderr
    assert out.returncode == 0, out.stderr
    job_ids = out.stdout.split()
    assert len(job_ids) == len(set(job_ids)) == 150
    assert "enqueued 150 jobs" in out.stderr and "inline=150" in out.stderr
    # And a daemon runs them with each line's value
    daemon = shell.run(
        "daemon", "tasks:divide", "--queue", queue, "--max-jobs", "150", "--poll-wait", "1"
    )
    assert daemon.returncode == 0, daemon.stderr
    first = shell.run("result", job_ids[0], "--wait", "10")
    last = shell.run("result", job_ids[-1], "--wait", "10")
    assert json.loads(first.stdout) == 0.0 and json.loads(last.stdout) == 74.5


def test_a_bad_line_enqueues_nothing_and_names_the_line(shell):
    queue = unique_queue("cli-jsonl-bad")
    (shell.dir / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
    out = shell.run("enqueue", queue, "--jsonl", "bad.jsonl")
    assert out.returncode == 2
    assert "line 2 is not JSON" in out.stderr
    stats = shell.run("queues", queue)
    assert stats.returncode == 4  # the queue was never used: nothing was enqueued
