"""`payloadstore queues` and `payloadstore top` as a shell user runs them, `top` in a real
pseudo-terminal (the child is a session leader on it, so Ctrl-C is a real SIGINT)."""

from __future__ import annotations

import os
import pty
import select
import signal
import time

import pytest

from payloadstore import Client, JobFailed
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue
from tests.e2e.test_cli import Shell, payloadstore_command

pytestmark = pytest.mark.e2e


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


def enqueue_some(gateway, queue: str, count: int) -> None:
    with Client(gateway.url, gateway.token("dev", "client"), "dev") as client:
        for i in range(count):
            client.queue(queue).add(i)


def test_queues_prints_a_table_with_depth_in_flight_and_age(shell, local_gateway):
    # Given three jobs waiting on a fresh queue
    queue = unique_queue("cli-queues")
    enqueue_some(local_gateway, queue, 3)
    # When the user lists the queues
    out = shell.run("queues")
    # Then a table names the queue with 3 queued, 0 in flight and an age
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.strip().splitlines()
    assert header.split()[:3] == ["QUEUE", "QUEUED", "IN"]
    [row] = [r for r in rows if r.split()[0] == queue]
    cells = row.split()
    assert cells[1:4] == ["3", "0", "0"]
    assert cells[4].endswith("s")
    # And --json gives the same figures to scripts
    as_json = shell.run("queues", "--json")
    assert as_json.returncode == 0, as_json.stderr
    import json

    by_name = {q["name"]: q for q in json.loads(as_json.stdout)["queues"]}
    assert by_name[queue]["queued"] == 3 and by_name[queue]["in_flight"] == 0


def test_queues_counts_a_cancelled_queued_job_out_and_shows_failed(shell, local_gateway):
    # Given three jobs waiting on a fresh queue, and a daemon-run job that failed on another
    queue = unique_queue("cli-counts")
    enqueue_some(local_gateway, queue, 3)
    other = unique_queue("cli-failed")
    client, daemon_client = clients(local_gateway)
    with daemon_thread(daemon_client, other, lambda: 1 / 0), pytest.raises(JobFailed):
        client.queue(other).call(timeout=60)
    [first, *_] = [j for page in client.queue(queue).jobs("queued") for j in page]
    # When the user cancels one of the waiting jobs
    cancelled = shell.run("cancel", first.job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    # Then `queues` counts 2 queued at once, with a FAILED column (1 on the other queue)
    out = shell.run("queues")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.strip().splitlines()
    assert header.split() == ["QUEUE", "QUEUED", "IN", "FLIGHT", "FAILED", "OLDEST"]
    cells = {r.split()[0]: r.split() for r in rows}
    assert cells[queue][1:4] == ["2", "0", "0"]
    assert cells[other][1:4] == ["0", "0", "1"]
    assert client.queue(queue).stats().queued == 2
    # And the cancelled job lists as `cancelled`, not `cancelled (cancel requested)`
    listed = shell.run("jobs", queue, "--state", "cancelled")
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in listed.stdout.splitlines() if r.startswith(first.job_id)]
    assert row.split()[1] == "cancelled" and "requested" not in row


def test_queues_for_one_unknown_queue_exits_4(shell):
    out = shell.run("queues", "never-used-queue")
    assert out.returncode == 4
    assert out.stderr.startswith("error: ")


def _read_until(fd: int, needle: bytes, timeout_s: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_top_refreshes_in_a_terminal_and_ctrl_c_leaves_it_cleanly(shell, local_gateway):
    # Given two jobs waiting on a fresh queue
    queue = unique_queue("cli-top")
    enqueue_some(local_gateway, queue, 2)
    # When the user runs `payloadstore top` in a terminal
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.chdir(shell.dir)
        # As in a user's terminal: Ctrl-C interrupts. A test run started in the background by a
        # shell (`make test &`) inherits SIGINT ignored, and exec keeps that.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        command = payloadstore_command() + ["top", "--interval", "0.3"]
        os.execvpe(command[0], command, shell.env)
    try:
        first = _read_until(master, queue.encode(), 30)
        # Then it switches to the alternate screen and shows the queue with its two jobs
        assert b"\x1b[?1049h" in first, first[-500:]
        row = next(line for line in first.decode(errors="replace").splitlines() if queue in line)
        assert row.split()[1:3] == ["2", "0"], row
        # And it redraws: a second frame arrives
        again = _read_until(master, queue.encode(), 10)
        assert queue.encode() in again
        # When the user presses Ctrl-C
        os.write(master, b"\x03")
        rest = _read_until(master, b"\x1b[?1049l", 10)
        # Then it restores the screen and the cursor, and exits 0
        assert b"\x1b[?25h\x1b[?1049l" in rest
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.close(master)
