"""The daemon's job line tells the function's own time, when the job ends (issue 44): before,
`seconds=` counted the result post's wait for the next job too (a 0.4 s job logged
`seconds=10.029`), and the line came that wait late."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest

from payloadstore import Daemon
from tests.e2e.sdk_helpers import clients, unique_queue

pytestmark = pytest.mark.e2e


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def test_given_an_idle_queue_after_a_0_1s_job_then_its_line_says_under_1s_as_it_ends(
    local_gateway,
):
    # Given: a daemon with the default 10 s poll wait, and a job whose function takes 0.1 s
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("job-line")
    lines = _Lines()
    logger = logging.getLogger("payloadstore.daemon")
    logger.addHandler(lines)
    saved = logger.level
    logger.setLevel(logging.INFO)
    daemon = Daemon(daemon_client, [queue], install_signal_handlers=False, check_health=False)
    assert daemon.wait_s == 10.0

    def tenth(x):
        time.sleep(0.1)
        return x

    runner = threading.Thread(target=lambda: daemon.run(tenth), daemon=True)
    runner.start()
    try:
        job = client.queue(queue).add(1)
        # When: the job ends, and no other job comes (the result post waits for one 10 s)
        assert job.result(timeout=30) == 1
        ended = time.monotonic()
        deadline = ended + 3
        found: list[tuple[float, str]] = []
        while not found and time.monotonic() < deadline:
            found = [(t, m) for t, m in lines.lines if f"job job_id={job.job_id} " in m]
            time.sleep(0.05)
    finally:
        daemon.stop()
        runner.join(timeout=30)
        logger.removeHandler(lines)
        logger.setLevel(saved)
    # Then: its one line came as it ended, not after the 10 s wait, and says about 0.1 s
    assert found, [m for _, m in lines.lines]
    logged_at, message = found[0]
    seconds = float(re.search(r"seconds=(\d+\.\d{3})", message).group(1))
    print(f"job line: {message!r}, logged {logged_at - ended:+.2f} s from the result")
    assert 0.1 <= seconds < 1.0, message
    assert logged_at - ended < 1.0
