"""Client reads: job status and the result long-poll."""

from __future__ import annotations

import base64
import threading
import time


def test_status_fields_and_other_namespace_is_404(cp, other_cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    s = cp.status(job)
    assert s.status == 200
    assert {k: s.json[k] for k in ("job_id", "queue", "state", "attempts", "tier")} == {
        "job_id": job,
        "queue": cp.queue,
        "state": "queued",
        "attempts": 0,
        "tier": "inline",
    }
    assert other_cp.status(job).status == 404
    assert cp.status("01KB7Z6Q3N4V8W2X5Y9Z0A1B2C").status == 404
    # daemons may read status too
    assert cp.status(job, role="daemon").status == 200


def test_result_is_202_while_queued_or_running(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    r = cp.result(job)
    assert r.status == 202 and r.json["state"] == "queued"
    cp.poll()
    r = cp.result(job, wait=0.3)
    assert r.status == 202 and r.json["state"] == "running"


def test_result_long_poll_wakes_when_the_result_arrives(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()

    def finish():
        time.sleep(0.5)
        cp.post_result(job, {"resultInline": base64.b64encode(b"\x2a").decode()})

    threading.Thread(target=finish).start()
    started = time.monotonic()
    r = cp.result(job, wait=2)
    waited = time.monotonic() - started
    assert r.status == 200 and base64.b64decode(r.json["resultInline"]) == b"\x2a"
    assert 0.4 < waited < 1.8


def test_several_waiters_all_see_the_result(cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    cp.poll()
    cp.post_result(job, {"resultInline": base64.b64encode(b"\x01").decode()})
    # The done marker is rotated, not consumed: every reader gets 200
    assert [cp.result(job, wait=1).status for _ in range(3)] == [200, 200, 200]


def test_result_of_other_namespace_is_404_and_bad_wait_422(cp, other_cp):
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    assert other_cp.result(job).status == 404
    assert cp.result(job, wait=-1).status == 422
    assert cp.result(job, wait="soon").status == 422


def test_result_wait_is_capped_by_setting(cp, settings_env):
    settings_env(RESULT_MAX_WAIT_S="0.5")
    job = cp.enqueue(raw=b"\x01").json["job_id"]
    started = time.monotonic()
    assert cp.result(job, wait=30).status == 202
    assert time.monotonic() - started < 1.5
