"""An incident from the shell, against the local gateway: list a queue's failed jobs with their
errors, retry one, redrive the rest, purge a queue (`payloadstore jobs|retry|redrive|purge`)."""

from __future__ import annotations

import json

import pytest

from payloadstore import JobFailed
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def test_list_failed_jobs_read_why_retry_one_redrive_the_rest(shell, local_gateway):
    # Given three jobs that failed on a daemon with a bug
    client, daemon_client = clients(local_gateway)
    queue = client.queue(unique_queue("cli-ops"))
    broken = {"on": True}

    def work(value):
        if broken["on"]:
            raise KeyError(f"no such thing: {value}")
        return value * 2

    with daemon_thread(daemon_client, queue.name, work):
        jobs = [queue.add(i) for i in range(3)]
        for job in jobs:
            with pytest.raises(JobFailed):
                job.result(timeout=30)
        # When the operator lists the queue's failed jobs
        listed = shell.run("jobs", queue.name, "--state", "failed")
        # Then a table names each, newest first, with its state, attempts, tier, age and error
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["JOB", "ID", "STATE", "ATTEMPTS", "TIER", "AGE", "ERROR"]
        rows = [line.split() for line in lines[1:]]
        assert [r[0] for r in rows] == [j.job_id for j in reversed(jobs)]
        assert all(r[1:4] == ["failed", "1", "inline"] and r[5] == "KeyError" for r in rows)
        # and the job's status says why, with the remote traceback
        status = json.loads(shell.run("status", jobs[0].job_id).stdout)
        assert "KeyError" in status["error"]["traceback"]
        # When the bug is fixed, one job is retried and the rest redriven
        broken["on"] = False
        retried = shell.run("retry", jobs[0].job_id)
        assert retried.returncode == 0, retried.stderr
        assert retried.stdout.strip() == f"{jobs[0].job_id} queued (next attempt 2)"
        assert jobs[0].result(timeout=30) == 0
        redriven = shell.run("redrive", queue.name)
        assert redriven.stdout.strip() == f"{queue.name}: retried 2, skipped 0"
        # Then every job succeeds, and nothing is failed any more
        assert [job.result(timeout=30) for job in jobs] == [0, 2, 4]
    empty = shell.run("jobs", queue.name, "--state", "failed")
    assert empty.stdout.splitlines()[1:] == []
    # and a retry of a job that succeeded exits 1 saying why
    again = shell.run("retry", jobs[0].job_id)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "succeeded" in again.stderr


def test_purge_asks_first_unless_yes(shell, local_gateway):
    # Given two jobs waiting on a queue nobody serves
    queue = unique_queue("cli-purge")
    for value in ("1", "2"):
        assert shell.run("enqueue", queue, "--json", value).returncode == 0
    # When purge is answered "n"
    refused = shell.run("purge", queue, input="n\n")
    # Then nothing is cancelled
    assert refused.returncode == 1
    assert "cancel every queued job" in refused.stderr
    assert len(shell.run("jobs", queue).stdout.splitlines()) == 3
    # When purged with --yes
    done = shell.run("purge", queue, "--yes")
    # Then both are cancelled, and they list as cancelled
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{queue}: cancelled 2, 0 still queued"
    cancelled = shell.run("jobs", queue, "--state", "cancelled", "--json").stdout.splitlines()
    assert [json.loads(line)["state"] for line in cancelled] == ["cancelled", "cancelled"]
