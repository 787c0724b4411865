"""The daemon helper against an in-memory control plane + S3 (tests/unit/sdk_fakes.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import signal

import pytest

from payloadstore import Daemon, ServiceUnavailable, codec
from tests.unit.sdk_fakes import FakeWorld, make_client, response


def big(n: int) -> bytes:
    return hashlib.sha256(b"seed").digest() * (n // 32) + b"x" * (n % 32)


def daemon_for(world: FakeWorld, **kw) -> Daemon:
    return Daemon(
        make_client(world), ["q"], wait_s=0, install_signal_handlers=kw.pop("signals", False), **kw
    )


def posted_result(world: FakeWorld, job_id: str) -> dict:
    (post,) = [r for r in world.calls("POST", f"/jobs/{job_id}/result")]
    return json.loads(post.content)


def test_given_an_unhealthy_control_plane_when_starting_then_it_refuses_naming_the_check_and_never_polls():
    world = FakeWorld(healthy=False)
    world.health_checks["lifecycle"] = {"ok": False, "detail": "no expiration rule on payloads/"}
    with pytest.raises(ServiceUnavailable, match="lifecycle: no expiration rule on payloads/"):
        daemon_for(world).run(lambda: None)
    assert not world.calls("POST", "/v1/daemon/poll")


def test_given_inline_and_large_jobs_when_running_then_fn_gets_args_and_results_are_stored_by_tier():
    # Given
    world = FakeWorld(inline_threshold=1024)
    client = make_client(world)
    small_job = client.queue("q").add(2, 3)
    large_job = client.queue("q").add(big(5000), repeat=1)
    seen = []

    def fn(a, b=None, repeat=0):
        seen.append((type(a).__name__, repeat))
        return a * 2 if isinstance(a, int) else bytes(a) * 2

    # When
    stats = daemon_for(world).run(fn, stop_when_idle=True)
    # Then
    assert stats["succeeded"] == 2
    assert seen == [("int", 0), ("bytes", 1)]
    small = posted_result(world, small_job.job_id)
    assert codec.decode(base64.b64decode(small["resultInline"])) == 4
    large = posted_result(world, large_job.job_id)["resultRef"]
    presign = [
        json.loads(r.content)
        for r in world.calls("POST", "/payloads/presign")
        if b'"result"' in r.content
    ]
    assert presign[0]["kind"] == "result" and presign[0]["job_id"] == large_job.job_id
    assert large["key"].endswith(f"{large_job.job_id}/result")
    assert bytes(codec.decode(world.objects[large["key"]])) == big(5000) * 2
    assert client.job(large_job.job_id).result(timeout=1) == big(5000) * 2


def test_given_args_altered_in_s3_when_running_then_payload_corrupt_is_reported_and_fn_never_called():
    world = FakeWorld()
    job = make_client(world).queue("q").add(big(5000))
    key = world.jobs[job.job_id]["payload"]["payloadRef"]["key"]
    expected = hashlib.sha256(world.objects[key]).hexdigest()
    world.objects[key] = world.objects[key][:-1] + b"!"
    actual = hashlib.sha256(world.objects[key]).hexdigest()
    calls = []
    stats = daemon_for(world).run(lambda *a, **k: calls.append(a), stop_when_idle=True)
    assert calls == []
    assert stats == {"payload_corrupt": 1}
    (report,) = world.calls("POST", f"/jobs/{job.job_id}/failure")
    body = json.loads(report.content)
    assert body["state"] == "payload_corrupt"
    assert (body["expected_sha256"], body["actual_sha256"]) == (expected, actual)
    assert not world.calls("POST", f"/jobs/{job.job_id}/result")


def test_given_args_deleted_from_s3_when_running_then_payload_lost_is_reported():
    world = FakeWorld()
    job = make_client(world).queue("q").add(big(5000))
    del world.objects[world.jobs[job.job_id]["payload"]["payloadRef"]["key"]]
    stats = daemon_for(world).run(lambda *a: pytest.fail("must not run"), stop_when_idle=True)
    assert stats == {"payload_lost": 1}
    (report,) = world.calls("POST", f"/jobs/{job.job_id}/failure")
    assert json.loads(report.content)["state"] == "payload_lost"


def test_given_a_function_that_raises_when_running_then_the_error_is_posted_with_type_message_and_traceback():
    world = FakeWorld()
    job = make_client(world).queue("q").add(-1)

    def sqrt(x):
        if x < 0:
            raise ValueError(f"negative input {x}")
        return x**0.5

    stats = daemon_for(world).run(sqrt, stop_when_idle=True)
    assert stats == {"failed": 1}
    error = posted_result(world, job.job_id)["error"]
    assert error["type"] == "ValueError" and error["message"] == "negative input -1"
    assert "in sqrt" in error["traceback"] and "raise ValueError" in error["traceback"]


def test_given_an_unencodable_return_value_when_running_then_a_codec_error_is_posted():
    world = FakeWorld()
    job = make_client(world).queue("q").add(1)
    daemon_for(world).run(lambda x: object(), stop_when_idle=True)
    assert posted_result(world, job.job_id)["error"]["type"] == "CodecError"


def test_given_a_payload_not_made_by_add_when_running_then_fn_gets_the_value_itself():
    world = FakeWorld()
    job_id = world.new_job_id()
    world.jobs[job_id] = {
        "queue": "q",
        "state": "queued",
        "tier": "inline",
        "payload": {"payloadInline": base64.b64encode(codec.encode([1, 2]).tobytes()).decode()},
    }
    world.queue.append(job_id)
    daemon_for(world).run(lambda value: sum(value), stop_when_idle=True)
    assert codec.decode(base64.b64decode(posted_result(world, job_id)["resultInline"])) == 3


def test_given_sigterm_during_a_job_when_running_then_the_job_finishes_and_no_further_job_is_taken():
    world = FakeWorld()
    client = make_client(world)
    first, second = client.queue("q").add(1), client.queue("q").add(2)
    daemon = daemon_for(world, signals=True)

    @daemon.register
    def slow(x):
        os.kill(os.getpid(), signal.SIGTERM)
        return x + 100

    previous = signal.getsignal(signal.SIGTERM)
    stats = daemon.run()
    assert stats == {"succeeded": 1}
    assert codec.decode(base64.b64decode(posted_result(world, first.job_id)["resultInline"])) == 101
    assert world.jobs[second.job_id]["state"] == "queued"
    assert len(world.calls("POST", "/v1/daemon/poll")) == 1
    assert signal.getsignal(signal.SIGTERM) is previous


def test_given_concurrency_when_running_then_every_job_is_done_once():
    world = FakeWorld()
    client = make_client(world)
    jobs = [client.queue("q").add(i) for i in range(12)]
    stats = Daemon(client, ["q"], wait_s=0, concurrency=3, install_signal_handlers=False).run(
        lambda i: i * i, stop_when_idle=True
    )
    assert stats == {"succeeded": 12}
    for i, job in enumerate(jobs):
        assert job.result(timeout=1) == i * i


def test_given_max_jobs_when_running_then_it_stops_after_that_many():
    world = FakeWorld()
    client = make_client(world)
    for i in range(3):
        client.queue("q").add(i)
    assert daemon_for(world).run(lambda i: i, max_jobs=2) == {"succeeded": 2}
    assert len(world.queue) == 1


@pytest.mark.parametrize("concurrency", [1, 3])
def test_given_a_revoked_token_when_polling_then_run_raises_auth_error(concurrency):
    import httpx

    from payloadstore import AuthError, Client

    world = FakeWorld()
    transport = world.transport()
    client = Client(
        "http://cp.test",
        "pst_revoked",
        "ns",
        http=httpx.Client(transport=transport),
        s3_http=httpx.Client(transport=transport),
    )
    daemon = Daemon(client, ["q"], wait_s=0, concurrency=concurrency, install_signal_handlers=False)
    with pytest.raises(AuthError, match="unknown token"):
        daemon.run(lambda x: x)


def test_given_the_result_was_already_posted_elsewhere_when_posting_then_the_job_counts_as_refused():
    import httpx

    world = FakeWorld()
    job = make_client(world).queue("q").add(1)
    world.fail(
        "POST",
        f"/jobs/{job.job_id}/result",
        lambda r: httpx.Response(
            409,
            json={
                "error": {"code": "conflict", "message": "a different result was already posted"}
            },
        ),
    )
    assert daemon_for(world).run(lambda x: x, stop_when_idle=True) == {"refused": 1}


def test_given_a_result_over_the_cap_when_storing_then_the_job_fails_with_payload_too_large():
    world = FakeWorld(max_payload_bytes=10_000)
    job = make_client(world).queue("q").add(1)
    assert daemon_for(world).run(lambda x: b"r" * 20_000, stop_when_idle=True) == {"failed": 1}
    error = posted_result(world, job.job_id)["error"]
    assert error["type"] == "PayloadTooLarge" and "over the 10000 byte cap" in error["message"]
    assert not [r for r in world.calls("POST", "/payloads/presign") if b'"result"' in r.content]


def test_given_inline_unavailable_when_posting_a_small_result_then_it_is_stored_through_s3():
    import httpx

    # Given: the control plane refuses inline results (Redis above its high-water mark)
    world = FakeWorld()
    job = make_client(world).queue("q").add(21)
    world.fail(
        "POST",
        f"/jobs/{job.job_id}/result",
        lambda r: httpx.Response(
            503,
            headers={"Retry-After": "1"},
            json={"error": {"code": "inline_unavailable", "message": "above high-water mark"}},
        ),
    )
    # When
    stats = daemon_for(world).run(lambda x: x * 2, stop_when_idle=True)
    # Then: one refused inline post, then a presign of the result key, a PUT and the reference
    assert stats == {"succeeded": 1}
    posts = [json.loads(r.content) for r in world.calls("POST", f"/jobs/{job.job_id}/result")]
    assert "resultInline" in posts[0] and len(posts) == 2
    ref = posts[1]["resultRef"]
    assert ref["key"].endswith(f"{job.job_id}/result")
    assert codec.decode(world.objects[ref["key"]]) == 42
    assert make_client(world).job(job.job_id).result(timeout=1) == 42


def test_given_a_registered_function_when_registering_another_then_value_error_names_both():
    # Given
    daemon = daemon_for(FakeWorld())

    @daemon.register
    def first(x):
        return x

    # When / Then
    def second(x):
        return -x

    with pytest.raises(
        ValueError, match=r"already runs .*first; refusing a second function .*second"
    ):
        daemon.register(second)
    with pytest.raises(ValueError, match="refusing a second function"):
        daemon.run(second)
    assert daemon.register(first) is first  # the same function again is a no-op


DAEMON_SCRIPT = """
import logging, sys
from tests.unit.sdk_fakes import FakeWorld, make_client, response
from payloadstore import Daemon
if sys.argv[1] == "configured":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="APP %(name)s %(message)s")
world = FakeWorld()
client = make_client(world)
job = client.queue("q").add(1)
Daemon(client, ["q"], wait_s=0, install_signal_handlers=False, check_health=False).run(
    lambda x: x + 1, stop_when_idle=True
)
print(job.job_id)
"""


@pytest.mark.parametrize("mode", ["unconfigured", "configured"])
def test_given_a_run_when_a_job_is_done_then_one_line_names_job_queue_tier_seconds_outcome(mode):
    import re
    import subprocess
    import sys
    from pathlib import Path

    # Given: a process that did (or did not) configure logging
    root = Path(__file__).resolve().parents[2]
    # When
    done = subprocess.run(
        [sys.executable, "-c", DAEMON_SCRIPT, mode],
        check=False,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    lines = [line for line in done.stderr.splitlines() if f"job job_id={job_id} " in line]
    assert len(lines) == 1, done.stderr
    assert re.search(
        rf"job job_id={job_id} queue=q tier=inline seconds=\d+\.\d{{3}} outcome=succeeded",
        lines[0],
    )
    if mode == "configured":  # the application's format, no second handler of ours
        assert lines[0].startswith("APP payloadstore.daemon ")
    else:
        assert " INFO job job_id=" in lines[0]


def test_given_only_redis_memory_failing_when_starting_then_it_takes_jobs_to_drain_it(caplog):
    # Given a control plane whose only failing check is Redis past its hard memory mark
    world = FakeWorld(healthy=False)
    world.health_checks["redis_memory"] = {"ok": False, "detail": "97% of 6291456 B"}
    client = make_client(world)
    job = client.queue("q").add(2)
    # When a daemon starts
    with caplog.at_level(logging.WARNING, logger="payloadstore.daemon"):
        stats = daemon_for(world).run(lambda x: x + 1, stop_when_idle=True)
    # Then it takes the job (daemons are what empty a full Redis), saying why it started anyway
    assert stats["succeeded"] == 1 and job.job_id
    assert "needs draining: redis_memory: 97%" in caplog.text
    # And another failing check beside it still stops the daemon before any poll
    world = FakeWorld(healthy=False)
    world.health_checks["redis_memory"] = {"ok": False, "detail": "97%"}
    world.health_checks["redis"] = {"ok": False, "detail": "connection refused"}
    with pytest.raises(ServiceUnavailable, match="redis: connection refused"):
        daemon_for(world).run(lambda: None)
    assert not world.calls("POST", "/v1/daemon/poll")


# -- heartbeats on the monotonic clock (issue 21, defect 7) ------------------------------------

VT = 3.0  # the control plane's VISIBILITY_TIMEOUT_S in these tests


class _RecordingEvent:
    """A heartbeat's `stopped` event that records each scheduled wait and waits only briefly."""

    def __init__(self, delays: list):
        import threading

        self._event = threading.Event()
        self.delays = delays

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout=None) -> bool:
        self.delays.append(timeout)
        return self._event.wait(min(timeout or 0.0, 0.01))


def _heartbeat_run(monkeypatch, clock_offset_s: float, *, new_server: bool, beats: int = 4):
    """One leased job through `Daemon.process` against a control plane on the true clock, while
    the daemon's wall clock is off by `clock_offset_s`: the waits its heartbeat thread scheduled."""
    import threading
    import time as real_time
    import types

    import httpx

    from payloadstore import _daemon_lease as lease_module

    def answer(body: dict) -> dict:
        now = real_time.time()
        body["lease_expires_at"] = round(now + VT, 3)
        if new_server:
            body["lease_expires_in_s"] = VT
        return body

    world = FakeWorld()
    world.fail(
        "POST",
        "/heartbeat",
        *[
            lambda r: httpx.Response(200, json=answer({"cancel_requested": False}))
            for _ in range(50)
        ],
    )
    delivery = answer(
        {
            "job_id": "JOB0001",
            "namespace": "ns",
            "queue": "q",
            "attempt": 1,
            "lease": "L1",
            "payloadInline": base64.b64encode(
                codec.encode({"args": [1], "kwargs": {}}).tobytes()
            ).decode(),
        }
    )
    world.jobs["JOB0001"] = {"queue": "q", "state": "running", "tier": "inline", "payload": {}}
    skewed = types.SimpleNamespace(
        time=lambda: real_time.time() + clock_offset_s,
        monotonic=real_time.monotonic,
        sleep=real_time.sleep,
    )
    # The wall clock is read where the lease keeper schedules its beats.
    monkeypatch.setattr(lease_module, "time", skewed)
    delays: list = []
    start = lease_module._Heartbeat.start

    def recording_start(self):
        self.stopped = _RecordingEvent(delays)
        return start(self)

    monkeypatch.setattr(lease_module._Heartbeat, "start", recording_start)
    enough = threading.Event()

    def fn(x):
        deadline = real_time.monotonic() + 10
        while len(world.calls("POST", "/heartbeat")) < beats and real_time.monotonic() < deadline:
            real_time.sleep(0.005)
        enough.set()
        return x

    outcome = daemon_for(world).process(delivery, fn)
    assert enough.is_set() and outcome == "succeeded"
    return delays


@pytest.mark.parametrize("clock_offset_s", [-2 * VT, 0.0, 2 * VT], ids=["behind", "true", "ahead"])
def test_given_a_daemon_clock_off_by_2x_the_visibility_timeout_when_heartbeating_then_it_beats_every_third_of_the_lease(
    monkeypatch, clock_offset_s
):
    # Given: a control plane that says the lease's remaining seconds (lease_expires_in_s), and a
    # daemon whose time.time() is 2 visibility timeouts behind, right, or ahead
    # When: a job is in hand for four heartbeats
    delays = _heartbeat_run(monkeypatch, clock_offset_s, new_server=True)
    # Then: every beat (the first after the poll answer, each next one after a heartbeat
    # answer) is scheduled a third of the lease after that answer arrived, on the monotonic
    # clock: never VT late (behind) nor every 0.2 s (ahead)
    scheduled = delays[:4]
    assert len(scheduled) == 4
    assert all(VT / 3 - 0.25 <= d <= VT / 3 + 0.01 for d in scheduled), scheduled


@pytest.mark.parametrize("clock_offset_s", [-2 * VT, 2 * VT], ids=["behind", "ahead"])
def test_given_an_older_control_plane_without_lease_expires_in_s_when_heartbeating_then_the_wall_clock_guess_is_clamped(
    monkeypatch, clock_offset_s
):
    # Given: a control plane that sends only the absolute lease_expires_at
    delays = _heartbeat_run(monkeypatch, clock_offset_s, new_server=False, beats=2)
    # Then: the old estimate from the daemon's own clock, but never below 1 s between beats
    # (ahead: it was every 0.2 s) and never above a third of the longest lease assumed
    from payloadstore.daemon import FALLBACK_MAX_LEASE_S, FALLBACK_MIN_HEARTBEAT_S

    assert FALLBACK_MIN_HEARTBEAT_S == 1.0
    assert all(FALLBACK_MIN_HEARTBEAT_S - 0.25 <= d <= FALLBACK_MAX_LEASE_S / 3 for d in delays[:2])
    if clock_offset_s > 0:
        assert all(d >= FALLBACK_MIN_HEARTBEAT_S - 0.25 for d in delays[:2])


def test_given_an_older_control_plane_when_the_guess_is_far_off_then_interval_stays_in_range():
    from payloadstore._wire import HeartbeatAnswer
    from payloadstore.daemon import FALLBACK_MAX_LEASE_S, FALLBACK_MIN_HEARTBEAT_S, _Heartbeat

    old = HeartbeatAnswer(lease_expires_at=1_000.0, cancel_requested=False)
    assert _Heartbeat.interval(old, wall_now=990.0) == pytest.approx(10 / 3)
    assert _Heartbeat.interval(old, wall_now=1_006.0) == FALLBACK_MIN_HEARTBEAT_S
    assert _Heartbeat.interval(old, wall_now=-1e6) == FALLBACK_MAX_LEASE_S / 3
    new = HeartbeatAnswer(lease_expires_at=1_000.0, cancel_requested=False, lease_expires_in_s=3.0)
    assert _Heartbeat.interval(new, wall_now=-1e6) == pytest.approx(1.0)
    assert _Heartbeat.interval(new, wall_now=1e6) == pytest.approx(1.0)


def poll_bodies(world: FakeWorld) -> list[dict]:
    return [
        json.loads(body)
        for r, body in zip(world.requests, world.bodies, strict=True)
        if r.method == "POST" and r.url.path == "/v1/daemon/poll"
    ]


def next_asks(world: FakeWorld) -> list[dict]:
    """The `next` of each result post and failure report (the jobs asked for with them)."""
    return [
        json.loads(body)["next"]
        for r, body in zip(world.requests, world.bodies, strict=True)
        if r.method == "POST"
        and r.url.path.endswith(("/result", "/failure"))
        and "next" in json.loads(body)
    ]


def test_given_concurrency_when_running_then_one_poller_asks_for_the_free_workers_and_they_run_in_parallel():
    import threading

    # Given 4 workers, 10 jobs, and a function that holds each job until 4 run at once
    world = FakeWorld()
    client = make_client(world)
    jobs = [client.queue("q").add(i) for i in range(10)]
    running, most, lock = [0], [0], threading.Lock()
    all_four = threading.Barrier(4, timeout=5)
    in_flight, most_polls = [0], [0]
    real_poll = client.wire.poll

    def counted_poll(*a, **k):
        with lock:
            in_flight[0] += 1
            most_polls[0] = max(most_polls[0], in_flight[0])
        try:
            return real_poll(*a, **k)
        finally:
            with lock:
                in_flight[0] -= 1

    client.wire.poll = counted_poll  # type: ignore[method-assign]

    def fn(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if i < 4:
            all_four.wait()
        with lock:
            running[0] -= 1
        return i + 1

    # When
    daemon = Daemon(client, ["q"], wait_s=0, concurrency=4, install_signal_handlers=False)
    stats = daemon.run(fn, stop_when_idle=True)
    # Then every job is done once, 4 at a time, by one poll at a time asking for the free slots
    assert stats == {"succeeded": 10}
    assert [job.result(timeout=1) for job in jobs] == list(range(1, 11))
    assert most[0] == 4 and most_polls[0] == 1
    bodies = poll_bodies(world)
    assert bodies[0]["max_jobs"] == 4
    assert all(1 <= b.get("max_jobs", 1) <= 4 for b in bodies)
    assert {b["daemon_id"] for b in bodies} == {daemon.daemon_id}


def test_given_a_control_plane_without_max_jobs_when_running_then_the_poller_falls_back_to_single_polls():
    world = FakeWorld(takes_max_jobs=False)
    client = make_client(world)
    for i in range(6):
        client.queue("q").add(i)
    stats = Daemon(client, ["q"], wait_s=0, concurrency=3, install_signal_handlers=False).run(
        lambda i: i, stop_when_idle=True
    )
    assert stats == {"succeeded": 6}
    bodies = poll_bodies(world)
    assert "max_jobs" in bodies[0]  # asked once, refused with 422
    assert all("max_jobs" not in b for b in bodies[1:])


def test_given_run_max_jobs_with_concurrency_when_running_then_no_more_than_that_are_taken():
    world = FakeWorld()
    client = make_client(world)
    for i in range(10):
        client.queue("q").add(i)
    stats = Daemon(client, ["q"], wait_s=0, concurrency=4, install_signal_handlers=False).run(
        lambda i: i, max_jobs=5
    )
    assert stats == {"succeeded": 5}
    assert len(world.queue) == 5
    asked = [b.get("max_jobs", 1) for b in poll_bodies(world)]
    asked += [n["max_jobs"] for n in next_asks(world)]
    assert sum(asked) == 5


def test_given_a_poll_error_with_concurrency_when_running_then_the_poller_backs_off_and_goes_on():
    import httpx

    world = FakeWorld()
    client = make_client(world)
    client.queue("q").add(1)
    world.fail(
        "POST",
        "/v1/daemon/poll",
        httpx.Response(500, json={"error": {"code": "internal_error", "message": "boom"}}),
    )
    stats = Daemon(client, ["q"], wait_s=0, concurrency=2, install_signal_handlers=False).run(
        lambda i: i, stop_when_idle=True
    )
    assert stats == {"succeeded": 1}


# -- result-and-next (issue 34) -----------------------------------------------------------------


def control_plane_calls(world: FakeWorld) -> list:
    """The daemon's calls to the control plane for jobs: polls, result posts, failure reports."""
    return [
        r
        for r in world.requests
        if r.method == "POST"
        and (r.url.path == "/v1/daemon/poll" or r.url.path.endswith(("/result", "/failure")))
    ]


def test_given_a_busy_queue_when_one_worker_runs_then_each_result_post_fetches_the_next_job():
    # Given 5 queued jobs
    world = FakeWorld()
    client = make_client(world)
    for i in range(5):
        client.queue("q").add(i)
    # When a daemon of one worker runs them until idle
    daemon = Daemon(client, ["q"], wait_s=3, install_signal_handlers=False)
    stats = daemon.run(lambda i: i * 10, stop_when_idle=True)
    # Then each result post asked for the next job (waiting as a poll would), so 5 jobs took
    # 5 posts and 2 polls (the first, and the one that found the queue idle)
    assert stats == {"succeeded": 5}
    assert all(
        n == {"queues": ["q"], "max_jobs": 1, "wait_s": 3, "daemon_id": daemon.daemon_id}
        for n in next_asks(world)
    )
    assert len(poll_bodies(world)) == 2
    assert len(control_plane_calls(world)) == 7
    assert [world.jobs[f"JOB{i:04d}"]["state"] for i in range(1, 6)] == ["succeeded"] * 5


def test_given_a_busy_queue_when_a_pool_runs_then_workers_keep_their_slot_with_the_next_job():
    world = FakeWorld()
    client = make_client(world)
    for i in range(12):
        client.queue("q").add(i)
    daemon = Daemon(client, ["q"], wait_s=0, concurrency=3, install_signal_handlers=False)
    stats = daemon.run(lambda i: i, stop_when_idle=True)
    assert stats == {"succeeded": 12}
    # Workers ask without waiting (an idle queue is the single poller's to long-poll)
    assert {n["wait_s"] for n in next_asks(world)} == {0}
    # Far fewer polls than jobs: most jobs came with a result post's answer
    polled = sum(1 for _ in poll_bodies(world))
    assert polled <= 4, polled
    assert len(control_plane_calls(world)) <= 12 + 4


def test_given_run_max_jobs_when_results_fetch_next_then_no_more_than_that_are_taken():
    world = FakeWorld()
    client = make_client(world)
    for i in range(5):
        client.queue("q").add(i)
    stats = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False).run(
        lambda i: i, max_jobs=2
    )
    assert stats == {"succeeded": 2}
    assert len(world.queue) == 3
    assert len(next_asks(world)) == 1  # the second job's post asks for nothing


def test_given_a_control_plane_before_next_when_it_refuses_the_field_then_the_post_goes_again_without_it():
    world = FakeWorld(takes_next="refuse")
    client = make_client(world)
    for i in range(3):
        client.queue("q").add(i)
    stats = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False).run(
        lambda i: i + 1, stop_when_idle=True
    )
    assert stats == {"succeeded": 3}
    posts = [
        json.loads(b)
        for r, b in zip(world.requests, world.bodies, strict=True)
        if r.url.path.endswith("/result") and r.method == "POST"
    ]
    # The first post with next was refused (stored nothing) and sent again without it; then
    # never asked again
    assert ["next" in p for p in posts] == [True, False, False, False]
    assert [world.jobs[f"JOB{i:04d}"]["state"] for i in range(1, 4)] == ["succeeded"] * 3
    assert len(poll_bodies(world)) == 4


def test_given_a_control_plane_that_ignores_next_when_it_answers_204_then_the_daemon_polls_again():
    world = FakeWorld(takes_next="ignore")
    client = make_client(world)
    for i in range(3):
        client.queue("q").add(i)
    stats = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False).run(
        lambda i: i, stop_when_idle=True
    )
    assert stats == {"succeeded": 3}
    assert len(next_asks(world)) == 1
    assert len(poll_bodies(world)) == 4


def test_given_a_failure_report_when_the_daemon_runs_then_it_fetches_the_next_job_too():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(b"x" * 2000)  # S3 tier (threshold 1024)
    world.objects.pop(next(k for k in world.objects if job.job_id in k))  # the payload is gone
    client.queue("q").add(1)
    stats = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False).run(
        lambda v: v, stop_when_idle=True
    )
    assert stats == {"payload_lost": 1, "succeeded": 1}
    reports = world.calls("POST", "/failure")
    assert len(reports) == 1 and json.loads(reports[0].content)["next"]["max_jobs"] == 1
    assert len(poll_bodies(world)) == 2


def test_given_a_stop_while_running_when_the_result_is_posted_then_no_next_job_is_taken():
    world = FakeWorld()
    client = make_client(world)
    for i in range(3):
        client.queue("q").add(i)
    daemon = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False)

    def fn(i):
        daemon.stop()
        return i

    assert daemon.run(fn) == {"succeeded": 1}
    assert next_asks(world) == [] and len(world.queue) == 2


def test_an_unexpected_error_of_one_job_is_counted_abandoned_and_the_next_job_runs():
    # Given a blob cache that fails once (its disk is full), and two jobs
    world = FakeWorld()
    client = make_client(world)
    first, second = client.queue("q").add(1), client.queue("q").add(2)
    daemon = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False)
    original = client.blobs.pinned
    failures = [OSError(28, "No space left on device")]

    def pinned(shas):
        if failures:
            raise failures.pop()
        return original(shas)

    client.blobs.pinned = pinned  # type: ignore[method-assign]
    # When the daemon runs until idle
    stats = daemon.run(lambda x: x * 10, stop_when_idle=True)
    # Then run() went on: the first is abandoned (left for redelivery, nothing posted), the
    # second succeeded
    assert stats == {"abandoned": 1, "succeeded": 1}
    assert not world.calls("POST", f"/jobs/{first.job_id}/result")
    assert codec.decode(base64.b64decode(posted_result(world, second.job_id)["resultInline"])) == 20


def test_a_revoked_token_stops_the_daemon_with_its_error():
    from payloadstore import AuthError

    # Given a token revoked while a job runs (its result post answers 401)
    world = FakeWorld()
    client = make_client(world)
    client.queue("q").add(1)
    client.queue("q").add(2)
    world.fail(
        "POST",
        "/result",
        response(401, json={"error": {"code": "unauthorized", "message": "revoked"}}),
    )
    # When the daemon runs, Then it stops with AuthError (the CLI's one `error:` line, exit 3),
    # not counting the job abandoned and taking no further job
    with pytest.raises(AuthError, match="revoked"):
        Daemon(client, ["q"], wait_s=0, install_signal_handlers=False).run(
            lambda x: x, stop_when_idle=True
        )
    assert len(world.calls("POST", "/v1/daemon/poll")) == 1


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "interrupt"])
def test_a_job_function_that_exits_fails_that_job_and_the_daemon_goes_on(raised):
    # Given a function that calls sys.exit (a library's CLI entry point, say) or raises
    # KeyboardInterrupt itself on its first job: on the job's own thread, so not a signal to the
    # daemon (signals reach only the main thread)
    world = FakeWorld()
    client = make_client(world)
    first, second = client.queue("q").add(1), client.queue("q").add(2)
    daemon = Daemon(client, ["q"], wait_s=0, install_signal_handlers=False)

    def fn(x):
        if x == 1:
            raise raised
        return x * 10

    # When the daemon runs until idle
    stats = daemon.run(fn, stop_when_idle=True)
    # Then that job failed with its error (posted), and the next one ran
    assert stats == {"failed": 1, "succeeded": 1}
    assert posted_result(world, first.job_id)["error"]["type"] == type(raised).__name__
    assert codec.decode(base64.b64decode(posted_result(world, second.job_id)["resultInline"])) == 20
