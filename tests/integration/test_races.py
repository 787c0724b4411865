"""Operations under races (issue 33, defects 1, 2, 6 and 7): two operations interleaved at the
step where they collided, on the real handlers, a real redis-server and the S3 emulator over HTTP.

Where an ordinary sequence of calls forces the interleaving (a retry sent twice), the test is
black-box: calls and answers only. Where the race falls between two steps of one request, that
request is run in a thread and paused between those steps (a wrapped store or S3 call blocks on
an Event) while the other operation runs to the end; then it goes on. Each test failed on the
code before its fix (docs/design.md, "Job integrity", lists the invariant each fix keeps)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable

import pytest
import requests

from payloadstore_controlplane.store import s3_objects
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from tests.integration.test_multipart import (
    PART,
    MiB,
    ask_parts,
    payload,
    put_part,
    split,
    upload_all,
)
from tests.support.control_plane import (
    ControlPlane,
    Reply,
    cancel,
    create_blob,
    heartbeat,
    sha256_hex,
    upload,
)


class Paused:
    """Run `call` in a thread that stops at a wrapped step until `go()`: `reached` is set when
    it got there (the step not run yet)."""

    def __init__(self, call: Callable[[], Reply]):
        self.reached = threading.Event()
        self._go = threading.Event()
        self.reply: list[Reply] = []
        self.errors: list[Exception] = []
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)

    def _run(self, call):
        try:
            self.reply.append(call())
        except Exception as e:  # noqa: BLE001 - reported by start() and go()
            self.errors.append(e)
            self.reached.set()

    def wait_here(self) -> None:
        """Called by the wrapped step: stop until go()."""
        self.reached.set()
        assert self._go.wait(30), "the paused request was never let go"

    def start(self) -> Paused:
        self._thread.start()
        assert self.reached.wait(30), "the request never reached the paused step"
        assert not self.errors, self.errors
        return self

    def go(self) -> Reply:
        self._go.set()
        self._thread.join(30)
        assert not self.errors, self.errors
        assert self.reply, "the paused request did not answer"
        return self.reply[0]


# -- defect 7: a lapsed delivery's multipart result completion ------------------------------------


def result_ref(presigned: dict, size: int) -> dict:
    return {"bucket": presigned["bucket"], "key": presigned["key"], "size": size}


def test_given_a_lapsed_delivery_completing_its_multipart_result_when_a_redelivery_uploads_its_own_then_the_lapsed_one_is_refused_and_the_redelivery_posts(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: multipart from 6 MiB on, a lease of 1 s, and delivery 1 (daemon a) of a job that
    # uploaded a 12 MiB result in parts
    settings_env(
        MULTIPART_THRESHOLD=str(6 * MiB), MULTIPART_PART_BYTES=str(PART), VISIBILITY_TIMEOUT_S="1"
    )
    assert cp.enqueue(inline=b"\x01").status == 201
    job = cp.poll(daemon_id="a").json["job_id"]
    lease_1 = cp.leases[job]
    first = payload(12 * MiB, seed=1)
    up_1 = upload_all(cp, first, role="daemon", kind="result", lease=lease_1, job_id=job)
    # And: delivery 1's result post is slow at S3's completion (a large object on AWS): it
    # stops there until delivery 2 is under way
    real_complete = s3_objects.S3Objects.complete_multipart
    paused: list[Paused] = []

    def slow_complete(self, key, upload_id, parts):
        if key == up_1["key"] and paused and not paused[0].reached.is_set():
            paused[0].wait_here()
        return real_complete(self, key, upload_id, parts)

    monkeypatch.setattr(s3_objects.S3Objects, "complete_multipart", slow_complete)
    post_1 = Paused(lambda: cp.post_result(job, {"resultRef": result_ref(up_1, len(first))}))
    paused.append(post_1)
    post_1.start()
    # When: delivery 1's lease lapses, daemon b takes the job over and uploads its own result
    # in parts, and only then delivery 1's completion goes on
    time.sleep(1.2)
    polled = cp.poll(daemon_id="b")
    assert polled.status == 200 and polled.json["attempt"] == 2, polled.raw_body
    lease_2 = polled.json["lease"]
    second = payload(12 * MiB, seed=2)
    presign_2 = cp.presign_put(len(second), sha256=None, role="daemon", job_id=job, lease=lease_2)
    assert presign_2.status == 200, presign_2.raw_body
    urls = ask_parts(
        cp,
        job,
        [
            {"number": n, "size": len(c), "sha256": sha256_hex(c)}
            for n, c in enumerate(split(second, PART), 1)
        ][:2],
        role="daemon",
        kind="result",
        lease=lease_2,
    )
    assert urls.status == 200, urls.raw_body
    for url, chunk in zip(urls.json["parts"], split(second, PART), strict=False):
        assert put_part(url, chunk).status_code == 200
    answer_1 = post_1.go()
    # Then: delivery 1 is refused as the lapsed delivery it is, and nothing is done for it
    assert answer_1.status == 409, answer_1.raw_body
    assert answer_1.error["code"] == "lease_mismatch"
    # And: delivery 2 asks its last part, uploads it and posts its result: accepted
    last = split(second, PART)[2]
    more = ask_parts(
        cp,
        job,
        [{"number": 3, "size": len(last), "sha256": sha256_hex(last)}],
        role="daemon",
        kind="result",
        lease=lease_2,
    )
    assert more.status == 200, more.raw_body
    assert put_part(more.json["parts"][0], last).status_code == 200
    posted = cp.post_result(
        job, {"resultRef": result_ref(presign_2.json, len(second)), "lease": lease_2}
    )
    assert posted.status == 204, posted.raw_body
    # And: the client reads delivery 2's result
    res = cp.result(job).json
    assert res["state"] == "succeeded"
    assert res["resultRef"]["key"] == presign_2.json["key"]
    assert requests.get(res["download"]["url"], timeout=30).content == second


# -- defect 1: a retry sent twice (or a retry after a redrive) --------------------------------------


def retry(cp: ControlPlane, job_id: str) -> Reply:
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/jobs/{job_id}/retry",
        {"ns": cp.ns, "job_id": job_id},
    )


def redrive(cp: ControlPlane) -> Reply:
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/redrive",
        {"ns": cp.ns, "queue": cp.queue},
        body={"states": ["failed"]},
    )


def fail(cp: ControlPlane, job_id: str) -> None:
    body = {"error": {"type": "ValueError", "message": "not yet"}}
    reply = cp.post_result(job_id, body)
    assert reply.status == 204, reply.raw_body


def delivered(cp: ControlPlane, job_id: str, daemon_id: str = "d1") -> dict:
    got = cp.poll(daemon_id=daemon_id)
    assert got.status == 200, f"job {job_id} was not delivered: {got.status} {got.raw_body}"
    assert got.json["job_id"] == job_id
    return got.json


def blob_shas(delivery: dict) -> list[str]:
    return [b["sha256"] for b in delivery.get("blobs") or []]


def s3_job_with_a_blob(cp: ControlPlane) -> tuple[str, str]:
    sha = create_blob(cp, b"weights " * 1000)
    ref = upload(cp, b"\x07" * 3000)
    made = cp.enqueue(body={"payloadRef": ref, "blobs": [sha]})
    assert made.status == 201, made.raw_body
    return made.json["job_id"], sha


@pytest.mark.parametrize("first", ["retry", "redrive"])
def test_given_a_failed_s3_job_with_a_blob_when_it_is_retried_twice_then_every_delivery_has_its_blob_list(
    cp: ControlPlane, first
):
    # Given: an S3-tier job referencing a blob, delivered once and failed
    job, sha = s3_job_with_a_blob(cp)
    assert blob_shas(delivered(cp, job)) == [sha]
    fail(cp, job)
    # When: it is retried (or its queue redriven), then retried again (a double click, or the
    # re-send of a retry whose answer was lost): both answered queued
    again = retry(cp, job) if first == "retry" else redrive(cp)
    assert again.status == 200, again.raw_body
    assert (retry(cp, job).status, cp.status(job).json["state"]) == (200, "queued")
    # Then: its next delivery has the blob list, and fails again
    assert blob_shas(delivered(cp, job)) == [sha]
    fail(cp, job)
    # And: retried once more, the job runs with its full blob list again (before: from a second
    # entry without one, and the function failed "blob #0 of its blob list, which has 0")
    assert retry(cp, job).status == 200
    third = delivered(cp, job)
    assert third["attempt"] == 3
    assert blob_shas(third) == [sha]
    # And: nothing else is queued for it
    assert cp.poll(daemon_id="d2").status == 204


def test_given_a_lost_reply_to_a_retrys_requeue_step_then_it_appends_one_whole_entry(
    cp: ControlPlane, monkeypatch
):
    # Given: a failed S3-tier job referencing a blob, and a retry whose namespace step runs twice
    # (redis-py sends the script again after a reply timeout: the first run happened)
    job, sha = s3_job_with_a_blob(cp)
    delivered(cp, job)
    fail(cp, job)
    real = RedisJobStore.requeue
    answers: list[str] = []

    def twice(self, *args, **kwargs):
        answers.append(real(self, *args, **kwargs))
        answers.append(real(self, *args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(RedisJobStore, "requeue", twice)
    # When: the job is retried
    assert retry(cp, job).status == 200
    # Then: the second run answered as the first, and the job has one entry, with its blob list
    assert answers[0] and answers[0] == answers[1]
    assert blob_shas(delivered(cp, job)) == [sha]
    assert cp.poll(daemon_id="d2").status == 204


# -- defect 6 (and its kin): a retry racing the settle step of the job's end ------------------------


def pause_first(
    monkeypatch, owner, method: str, paused: list[Paused], when=None, *, after: bool = False
) -> None:
    """Make the first call of owner.<method> (that `when(args, kwargs)` accepts) stop before it
    runs (`after`: once it answered) until the test lets the paused request go; later calls
    run as they are."""
    real = getattr(owner, method)

    def wrapped(self, *args, **kwargs):
        first = paused and not paused[0].reached.is_set() and (when is None or when(args, kwargs))
        if first and not after:
            paused[0].wait_here()
        out = real(self, *args, **kwargs)
        if first and after:
            paused[0].wait_here()
        return out

    monkeypatch.setattr(owner, method, wrapped)


def paused_at(
    monkeypatch, owner, method: str, call: Callable[[], Reply], *, after: bool = False
) -> Paused:
    """`call` started in a thread that stops at the first call of owner.<method> (pause_first:
    before it runs, or once it answered with `after`) until the test lets it go."""
    paused: list[Paused] = []
    pause_first(monkeypatch, owner, method, paused, after=after)
    request = Paused(call)
    paused.append(request)
    return request.start()


def test_given_a_cancelled_inline_job_when_a_retry_races_the_poll_dropping_its_entry_then_the_job_runs(
    cp: ControlPlane, monkeypatch
):
    # Given: an inline job cancelled while queued, before any delivery, whose entry the cancel
    # did not find (past its search bound: it stays in the stream until a poll finds the job
    # cancelled)
    monkeypatch.setattr(RedisJobStore, "find_inline_entry", lambda *args, **kwargs: "")
    job = cp.enqueue(raw=b"\x0a\x0b").json["job_id"]
    assert cancel(cp, job).json["state"] == "cancelled"
    # And: a poll that found it cancelled, paused before it drops the entry (keeping its args)
    poll = paused_at(monkeypatch, RedisJobStore, "settle", lambda: cp.poll(daemon_id="a"))
    # When: the client retries the job (answered queued), and then the poll goes on
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    answer = poll.go()
    # Then: the job is delivered with its arguments (the poll, going on past the entry it
    # dropped, takes the one the retry needs); before, the job stayed queued with no entry
    assert answer.status == 200, f"the job was stranded: {answer.status} {answer.raw_body}"
    got = answer.json
    assert (got["job_id"], got["attempt"]) == (job, 1)
    assert base64.b64decode(got["payloadInline"]) == b"\x0a\x0b"
    assert cp.status(job).json["state"] == "running"
    assert cp.poll(daemon_id="c").status == 204


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_given_a_job_failing_when_a_retry_races_the_settle_of_its_end_then_the_job_runs_whole(
    cp: ControlPlane, monkeypatch, tier
):
    # Given: a running job (an S3-tier one referencing a blob), whose daemon posts an error:
    # the job slot says failed, and the post is paused before its entry is dropped
    if tier == "s3":
        job, sha = s3_job_with_a_blob(cp)
    else:
        sha = create_blob(cp, b"vocabulary " * 100)
        made = cp.enqueue(
            body={"payloadInline": base64.b64encode(b"\x01\x02").decode(), "blobs": [sha]}
        )
        assert made.status == 201, made.raw_body
        job = made.json["job_id"]
    delivered(cp, job)
    post = paused_at(
        monkeypatch,
        RedisJobStore,
        "settle",
        lambda: cp.post_result(job, {"error": {"type": "ValueError", "message": "x"}}),
    )
    # When: the client, woken by the failure, retries at once; then the post goes on
    assert cp.status(job).json["state"] == "failed"
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    assert post.go().status == 204
    # Then: the job is delivered again with its arguments and its blob list
    got = delivered(cp, job, daemon_id="b")
    assert got["attempt"] == 2
    assert blob_shas(got) == [sha]
    if tier == "inline":
        assert base64.b64decode(got["payloadInline"]) == b"\x01\x02"
    assert cp.poll(daemon_id="c").status == 204


def test_given_a_failing_post_paused_past_the_lease_when_a_retry_runs_on_another_daemon_then_the_late_settle_leaves_its_entry(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: a lease of 1 s, a running inline job, and its daemon's error post paused after the
    # job slot ended it, before its entry is dropped
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x0c").json["job_id"]
    delivered(cp, job, daemon_id="a")
    post = paused_at(
        monkeypatch,
        RedisJobStore,
        "settle",
        lambda: cp.post_result(job, {"error": {"type": "ValueError", "message": "x"}}),
    )
    # When: the job is retried, and once the entry's visibility timeout passed daemon b
    # reclaims it and runs the retried job; only then the paused post goes on
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    time.sleep(1.2)
    running = delivered(cp, job, daemon_id="b")
    assert running["attempt"] == 2
    assert post.go().status == 204
    # Then: the job is still b's, and if b dies it is delivered again (its entry was left to
    # b's delivery, not turned into a new one under it)
    assert cp.status(job).json["state"] == "running"
    time.sleep(1.3)
    again = cp.poll(daemon_id="c")
    assert again.status == 200, f"the job was stranded: {again.status} {again.raw_body}"
    assert (again.json["job_id"], again.json["attempt"]) == (job, 3)
    assert base64.b64decode(again.json["payloadInline"]) == b"\x0c"


def test_given_a_cancel_settling_an_entry_a_poll_took_when_a_retry_comes_between_then_the_poll_runs_the_job_and_keeps_its_entry(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: a lease of 1 s, a queued S3-tier job; a cancel paused after the job slot cancelled
    # it, before its entry is dropped; and a poll (daemon a) paused after it took that entry,
    # before it starts the delivery
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = queued_job(cp, "s3")
    cancelling = paused_at(monkeypatch, RedisJobStore, "settle", lambda: cancel(cp, job))
    polling = paused_at(
        monkeypatch, RedisJobStore, "start_delivery", lambda: cp.poll(daemon_id="a")
    )
    # When: the client retries the cancelled job, then the cancel goes on, then the poll
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    assert cancelling.go().status == 200
    got = polling.go()
    # Then: the poll runs the retried job
    assert got.status == 200, got.raw_body
    assert got.json["job_id"] == job
    # And: if daemon a dies, the job is delivered again (the cancel's settle left a's entry)
    time.sleep(1.3)
    again = cp.poll(daemon_id="b")
    assert again.status == 200, f"the job was stranded: {again.status} {again.raw_body}"
    assert again.json["job_id"] == job
    assert cp.poll(daemon_id="c").status == 204


# -- race G: a retry's requeue late after a purge ended the job it queued --------------------------


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_given_a_retry_paused_before_its_requeue_when_a_resumed_retry_and_a_purge_end_the_job_first_then_its_arguments_stay_for_the_next_retry(
    cp: ControlPlane, monkeypatch, tier
):
    # Given: a job referencing a blob, cancelled while queued (its end keeps its args and blob
    # list for a retry)
    sha = create_blob(cp, b"weights " * 1000)
    if tier == "s3":
        body = {"payloadRef": upload(cp, b"\x07" * 3000), "blobs": [sha]}
    else:
        body = {"payloadInline": base64.b64encode(b"\x0c\x0d").decode(), "blobs": [sha]}
    job = cp.enqueue(body=body).json["job_id"]
    assert cancel(cp, job).json["state"] == "cancelled"
    # And: a retry paused before its requeue (the job slot says queued already)
    late = paused_at(monkeypatch, RedisJobStore, "requeue", lambda: retry(cp, job))
    # When: the retry is sent again (answered as a resume: it appends the job's entry), a
    # purge cancels the job again, and then the paused retry goes on
    assert retry(cp, job).status == 200
    assert purge(cp).json["cancelled"] == 1
    assert late.go().status == 200
    # Then: the job stays cancelled, with nothing left queued for it (a second purge finds
    # nothing: before, the late requeue had appended an entry from the kept args and blob list,
    # deleted them, and this purge dropped that entry as stale; the S3-tier job then ran
    # without its blob list. The inline job recovered by itself before the fix, its `x` still
    # '*' letting the purge keep the args again; it stays here as a guard of the same path)
    assert cp.status(job).json["state"] == "cancelled"
    assert purge(cp).json["cancelled"] == 0
    # And: retried, it runs whole: its arguments and its blob list
    assert retry(cp, job).status == 200
    got = delivered(cp, job)
    assert blob_shas(got) == [sha]
    if tier == "inline":
        assert base64.b64decode(got["payloadInline"]) == b"\x0c\x0d"
    else:
        assert got["payloadRef"]["key"].endswith(f"{job}/args")
    assert cp.poll(daemon_id="d2").status == 204


# -- defect 2: purge racing a poll ------------------------------------------------------------------


def queued_job(cp: ControlPlane, tier: str) -> str:
    if tier == "s3":
        made = cp.enqueue(ref=upload(cp, b"\x03" * 3000))
    else:
        made = cp.enqueue(raw=b"\x03")
    assert made.status == 201, made.raw_body
    return made.json["job_id"]


def purge(cp: ControlPlane) -> Reply:
    return cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/purge",
        {"ns": cp.ns, "queue": cp.queue},
    )


def assert_left_running_and_redelivered(cp: ControlPlane, job: str, lease: str) -> None:
    # Its daemon is not told to cancel it ...
    beat = heartbeat(cp, job, {"lease": lease})
    assert beat.status == 200, beat.raw_body
    assert beat.json["cancel_requested"] is False
    assert cp.status(job).json["state"] == "running"
    # ... and if that daemon dies, the lapsed lease lets another daemon take the job
    time.sleep(1.3)
    again = cp.poll(daemon_id="b")
    assert again.status == 200, f"the job was stranded: {again.status} {again.raw_body}"
    assert (again.json["job_id"], again.json["attempt"]) == (job, 2)


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_given_a_purge_that_scanned_a_queued_job_when_a_daemon_takes_it_then_purge_leaves_it_running(
    cp: ControlPlane, settings_env, monkeypatch, tier
):
    # Given: a queued job, and a purge paused right after it scanned the queue
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = queued_job(cp, tier)
    purging = paused_at(monkeypatch, RedisJobStore, "scan_queue", lambda: purge(cp), after=True)
    # When: a daemon takes the job, then the purge goes on
    lease = delivered(cp, job, daemon_id="a")["lease"]
    answer = purging.go()
    # Then: the purge cancelled nothing, and the job that started is left to run
    assert answer.status == 200, answer.raw_body
    assert answer.json["cancelled"] == 0
    assert_left_running_and_redelivered(cp, job, lease)


@pytest.mark.parametrize("tier", ["inline", "s3"])
def test_given_a_purge_about_to_cancel_a_queued_job_when_a_daemon_takes_it_first_then_no_cancel_is_requested(
    cp: ControlPlane, settings_env, monkeypatch, tier
):
    # Given: a queued job, and a purge paused just before its job-slot step for that job
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = queued_job(cp, tier)
    paused: list[Paused] = []
    pause_first(
        monkeypatch,
        RedisJobStore,
        "_run_on_job",
        paused,
        when=lambda args, kwargs: args[0] in ("lifecycle_cancel", "operate_purge"),
    )
    purging = Paused(lambda: purge(cp))
    paused.append(purging)
    purging.start()
    # When: a daemon takes the job first, then the purge goes on
    lease = delivered(cp, job, daemon_id="a")["lease"]
    answer = purging.go()
    # Then: purge cancelled nothing and requested no cancel of the job that started
    assert answer.status == 200, answer.raw_body
    assert answer.json["cancelled"] == 0
    assert_left_running_and_redelivered(cp, job, lease)


# -- races A and D (tests/races/FOUND.md): a requeue's '*' and an entry about to be dropped -------


def lapsed_s3_job(cp: ControlPlane, s3_client) -> tuple[str, str]:
    """An S3-tier job delivered to daemon a, its args object gone, its 1 s lease lapsed."""
    ref = upload(cp, b"\x0d" * 2000)
    job = cp.enqueue(ref=ref).json["job_id"]
    lease = delivered(cp, job, daemon_id="a")["lease"]
    s3_client.delete_object(Bucket=ref["bucket"], Key=ref["key"])
    time.sleep(1.2)
    return job, lease


def assert_redelivered_when_its_daemon_dies(cp: ControlPlane, job: str, attempt: int) -> None:
    """The job runs (attempt `attempt`) on an entry a lapsed lease lets another daemon take."""
    assert cp.status(job).json["state"] == "running"
    time.sleep(1.3)
    again = cp.poll(daemon_id="c")
    assert again.status == 200, f"the job was stranded: {again.status} {again.raw_body}"
    assert (again.json["job_id"], again.json["attempt"]) == (job, attempt + 1)
    assert cp.poll(daemon_id="d").status == 204


def test_given_a_poll_that_took_back_a_lapsed_entry_when_the_lapsed_delivery_reports_payload_lost_then_the_job_runs_on_a_live_entry(
    cp: ControlPlane, settings_env, monkeypatch, s3_client
):
    # Given: a lease of 1 s, an S3-tier job whose delivery (daemon a) lapsed, and a poll of
    # daemon b that took its entry back (past the visibility timeout) and is paused before it
    # starts the delivery
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job, lease_a = lapsed_s3_job(cp, s3_client)
    polling = paused_at(
        monkeypatch, RedisJobStore, "start_delivery", lambda: cp.poll(daemon_id="b")
    )
    # When: delivery a reports payload_lost (its lease is still the job's: accepted, the job
    # requeued once), then the poll goes on
    lost = cp.report(job, {"state": "payload_lost", "detail": "GET 404", "lease": lease_a})
    assert lost.status == 204, lost.raw_body
    got = polling.go()
    # Then: the job is delivered again (attempt 2), and if that daemon dies it is delivered
    # once more; before, the poll started it from the entry the report had deleted, and the
    # report's new entry was dropped as a stale double: the job ran with no entry
    assert got.status == 200, got.raw_body
    assert (got.json["job_id"], got.json["attempt"]) == (job, 2)
    assert_redelivered_when_its_daemon_dies(cp, job, 2)


def test_given_a_payload_lost_report_and_a_poll_holding_the_old_entry_when_a_cancel_and_a_retry_come_between_then_the_job_runs_on_a_live_entry(
    cp: ControlPlane, settings_env, monkeypatch, s3_client
):
    # Given: a lease of 1 s, an S3-tier job whose delivery (daemon a) lapsed; its payload_lost
    # report accepted (the job requeued, `x` = '*') and paused before its entries are sorted
    # out; and a poll of daemon a that took the old entry back and is paused before it starts
    # the delivery
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job, lease_a = lapsed_s3_job(cp, s3_client)
    report = {"state": "payload_lost", "detail": "GET 404", "lease": lease_a}
    reporting = paused_at(monkeypatch, RedisJobStore, "read_entry", lambda: cp.report(job, report))
    polling = paused_at(
        monkeypatch, RedisJobStore, "start_delivery", lambda: cp.poll(daemon_id="a")
    )
    # When: a client cancels the job (queued: cancelled at once), the report goes on (its
    # record step finds the job moved on), the client retries the job (queued again on
    # whichever of its entries a daemon starts first), and the poll goes on
    assert cancel(cp, job).json["state"] == "cancelled"
    assert reporting.go().status == 204
    assert retry(cp, job).status == 200
    got = polling.go()
    # Then: the poll runs the job from the entry it holds (attempt 2), and if that daemon dies
    # the job is delivered once more; before, the report deleted that entry after its record
    # step (answered 'moved'), under the poll about to start the job from it: the job ran with
    # no entry, and a dead daemon's job was never delivered again
    assert got.status == 200, got.raw_body
    assert (got.json["job_id"], got.json["attempt"]) == (job, 2)
    assert_redelivered_when_its_daemon_dies(cp, job, 2)


def test_given_a_payload_lost_report_whose_old_entry_a_poll_settled_when_the_report_goes_on_then_the_cancelled_job_keeps_its_arguments(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: a lease of 1 s, an inline job referencing a blob, delivered to daemon a and asked
    # to cancel while it runs; its lease lapsed
    settings_env(VISIBILITY_TIMEOUT_S="1")
    sha = create_blob(cp, b"weights " * 1000)
    body = {"payloadInline": base64.b64encode(b"\x0e\x0f").decode(), "blobs": [sha]}
    job = cp.enqueue(body=body).json["job_id"]
    lease_a = delivered(cp, job, daemon_id="a")["lease"]
    assert cancel(cp, job).json["cancel_requested"] is True
    time.sleep(1.2)
    # And: delivery a's payload_lost report, accepted (the job requeued) and paused before it
    # reads the old entry to append the new one
    report = {"state": "payload_lost", "detail": "GET 404", "lease": lease_a}
    reporting = paused_at(monkeypatch, RedisJobStore, "read_entry", lambda: cp.report(job, report))
    # When: a poll takes the old entry back, finds the cancel requested and ends the job
    # cancelled (its end keeps the args and blob list), then the report goes on
    assert cp.poll(daemon_id="b").status == 204
    assert cp.status(job).json["state"] == "cancelled"
    assert reporting.go().status == 204
    # Then: nothing is left queued for it (before, the report appended an entry with neither
    # args nor blob list, and this poll's settle of it replaced the kept blob list with none)
    assert cp.poll(daemon_id="c").status == 204
    # And: retried, the job runs whole
    assert retry(cp, job).status == 200
    got = delivered(cp, job, daemon_id="c")
    assert blob_shas(got) == [sha]
    assert base64.b64decode(got["payloadInline"]) == b"\x0e\x0f"
    assert cp.poll(daemon_id="d").status == 204


def test_given_a_payload_lost_report_that_appended_the_new_entry_when_a_poll_starts_the_job_from_the_old_one_then_that_one_is_kept(
    cp: ControlPlane, settings_env, monkeypatch, s3_client
):
    # Given: a lease of 1 s, an S3-tier job whose delivery (daemon a) lapsed, and its
    # payload_lost report paused once it appended the requeued job's new entry
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job, lease_a = lapsed_s3_job(cp, s3_client)
    paused: list[Paused] = []
    pause_first(monkeypatch, RedisJobStore, "append", paused, after=True)
    reporting = Paused(
        lambda: cp.report(job, {"state": "payload_lost", "detail": "GET 404", "lease": lease_a})
    )
    paused.append(reporting)
    reporting.start()
    # When: daemon b's poll takes the old entry back and starts the job from it, then the
    # report goes on
    got = delivered(cp, job, daemon_id="b")
    assert got["attempt"] == 2
    assert reporting.go().status == 204
    # Then: the entry b runs the job on is kept (the new one is the stale double): if b dies,
    # the job is delivered again; before, the report deleted it
    assert_redelivered_when_its_daemon_dies(cp, job, 2)


def test_given_a_retry_between_a_failing_post_and_its_settle_when_a_poll_takes_the_old_entry_back_then_the_retried_job_runs_on_a_live_entry(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: a lease of 1 s, a running inline job whose daemon (a) posts an error, paused after
    # the job slot made it failed and before the settle step drops its entry
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x0e").json["job_id"]
    delivered(cp, job, daemon_id="a")
    post = paused_at(
        monkeypatch,
        RedisJobStore,
        "settle",
        lambda: cp.post_result(job, {"error": {"type": "ValueError", "message": "x"}}),
    )
    # And: a retry paused after its job-slot step (the job queued), before its namespace step
    retrying = paused_at(monkeypatch, RedisJobStore, "requeue", lambda: retry(cp, job))
    # When: the old entry's visibility timeout passes and daemon b polls (taking it back),
    # then the post and the retry go on
    time.sleep(1.2)
    first = cp.poll(daemon_id="b")
    assert post.go().status == 204
    retried = retrying.go()
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    # Then: the retried job is delivered once (attempt 2) with its arguments, and if its daemon
    # dies it is delivered again; before, b started it from the entry the settle then deleted,
    # and the retry's own entry was dropped as a stale double
    got = first if first.status == 200 else cp.poll(daemon_id="b")
    assert got.status == 200, got.raw_body
    assert (got.json["job_id"], got.json["attempt"]) == (job, 2)
    assert base64.b64decode(got.json["payloadInline"]) == b"\x0e"
    assert_redelivered_when_its_daemon_dies(cp, job, 2)


def test_given_a_retry_before_a_failing_posts_settle_when_the_same_daemon_takes_the_old_entry_back_then_the_retried_job_runs_on_a_live_entry(
    cp: ControlPlane, settings_env, monkeypatch
):
    # Given: a lease of 1 s, a running inline job whose daemon (a) posts an error, paused
    # before the settle step drops its entry, and the job retried meanwhile (answered queued)
    settings_env(VISIBILITY_TIMEOUT_S="1")
    job = cp.enqueue(raw=b"\x0f").json["job_id"]
    delivered(cp, job, daemon_id="a")
    post = paused_at(
        monkeypatch,
        RedisJobStore,
        "settle",
        lambda: cp.post_result(job, {"error": {"type": "ValueError", "message": "x"}}),
    )
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    # When: past the visibility timeout the same daemon (a) polls again and runs the retried
    # job, and only then the post's settle goes on
    time.sleep(1.2)
    got = delivered(cp, job, daemon_id="a")
    assert got["attempt"] == 2
    assert base64.b64decode(got["payloadInline"]) == b"\x0f"
    assert post.go().status == 204
    # Then: if a dies now, the job is delivered again; before, the settle took a's entry for
    # the failed delivery's own (same consumer) and replaced it under the running job
    assert_redelivered_when_its_daemon_dies(cp, job, 2)


def test_given_a_cancel_that_found_the_queued_entry_when_a_retry_lands_before_it_drops_it_then_the_job_runs(
    cp: ControlPlane, monkeypatch
):
    # Given: a queued inline job (no hash yet) whose cancel has found its entry and is paused
    # before it drops it (the job already reads cancelled)
    job = cp.enqueue(raw=b"\x0c\x0d").json["job_id"]
    cancelling = paused_at(
        monkeypatch, RedisJobStore, "find_inline_entry", lambda: cancel(cp, job), after=True
    )
    assert cp.status(job).json["state"] == "cancelled"
    # When: the client retries the job (answered queued), and then the cancel goes on
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    assert cancelling.go().json["state"] == "cancelled"
    # Then: the retried job is delivered once, with its arguments (not stranded queued)
    answer = cp.poll(daemon_id="a")
    assert answer.status == 200, f"the job was stranded: {answer.status} {answer.raw_body}"
    assert answer.json["job_id"] == job
    assert base64.b64decode(answer.json["payloadInline"]) == b"\x0c\x0d"
    assert cp.poll(daemon_id="b").status == 204


def test_given_a_cancel_that_found_the_queued_entry_when_a_poll_takes_it_first_then_nothing_runs_and_a_retry_does(
    cp: ControlPlane, monkeypatch
):
    # Given: a queued inline job whose cancel has found its entry and is paused before it
    # drops it
    job = cp.enqueue(raw=b"\x0e\x0f").json["job_id"]
    cancelling = paused_at(
        monkeypatch, RedisJobStore, "find_inline_entry", lambda: cancel(cp, job), after=True
    )
    # When: a daemon polls first (it finds the job cancelled), and then the cancel goes on
    assert cp.poll(daemon_id="a").status == 204
    assert cancelling.go().json["state"] == "cancelled"
    # Then: the cancelled job never ran, and a retry runs it once with its arguments
    assert cp.status(job).json["state"] == "cancelled"
    retried = retry(cp, job)
    assert (retried.status, (retried.json or {}).get("state")) == (200, "queued"), retried.raw_body
    answer = cp.poll(daemon_id="b")
    assert answer.status == 200, f"the job was stranded: {answer.status} {answer.raw_body}"
    assert (answer.json["job_id"], base64.b64decode(answer.json["payloadInline"])) == (
        job,
        b"\x0e\x0f",
    )
    assert cp.poll(daemon_id="c").status == 204
