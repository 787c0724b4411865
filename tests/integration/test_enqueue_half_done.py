"""An S3-tier enqueue cut off between its two steps (the queue entry in the namespace's slot, the
job's state in the job's slot), then sent again and refused for a policy changed meanwhile, or
never sent again (issue 43): no job reads `queued` (or runs) without an entry its client was
told of. The real handlers, a real redis-server and the S3 emulator over HTTP."""

from __future__ import annotations

import uuid

import pytest

from payloadstore_controlplane.models.policy import NamespacePolicy
from payloadstore_controlplane.store import keys
from payloadstore_controlplane.store.redis_jobs import RedisJobStore
from tests.support.control_plane import ControlPlane, cancel, upload
from tests.support.faults import cut_once

# How the cut falls on the enqueue's append (enqueue_append.lua): before the command reached
# Redis (its connection refused), or after it ran (its reply lost).
CUTS = ["before_the_append", "after_the_append"]


def namespace() -> ControlPlane:
    return ControlPlane("hd" + uuid.uuid4().hex[:10], NamespacePolicy("1d"))


def job_of(ref: dict) -> str:
    return ref["key"].split("/")[-2]


def assert_no_job_left(cp: ControlPlane, redis_view, job: str) -> None:
    """Nothing reads `queued` and nothing delivers the job: its record is as before the
    enqueue (awaiting its enqueue), the client is told 404, a daemon gets no work (an entry a
    cut-off try appended is dropped)."""
    assert redis_view.hget(keys.job(job), "s") == b"awaiting_upload"
    assert cp.status(job).status == 404
    polled = cp.poll(wait_s=0)
    assert polled.status == 204, polled.raw_body


@pytest.mark.parametrize("how", CUTS)
def test_an_s3_enqueue_cut_off_and_refused_on_its_re_send_leaves_no_queued_job(
    cp_env, redis_view, monkeypatch, how
):
    # Given an uploaded S3-tier payload of a `1d` namespace, whose enqueue is answered 503
    # because the connection broke at its append
    cp = namespace()
    ref = upload(cp, b"\x05" * 3000)
    job = job_of(ref)
    cut_once(monkeypatch, "append", after_it_ran=how == "after_the_append")
    first = cp.enqueue(ref=ref)
    assert first.status == 503, first.raw_body
    # When the namespace's retention becomes `7d` and the client sends the enqueue again
    cp.policy = NamespacePolicy("7d")
    again = cp.enqueue(ref=ref)
    # Then the re-send is refused (the object carries the 1-day class), and no job is left
    # queued, or delivered, for an enqueue its client was told was refused
    assert (again.status, again.error["code"]) == (409, "policy_mismatch"), again.raw_body
    assert_no_job_left(cp, redis_view, job)
    # And the client's fresh upload under the new policy is enqueued and delivered, alone
    fresh = cp.enqueue(ref=upload(cp, b"\x05" * 3000))
    assert fresh.status == 201, fresh.raw_body
    polled = cp.poll(wait_s=0)
    assert polled.status == 200 and polled.json["job_id"] == fresh.json["job_id"]
    assert cp.poll(wait_s=0).status == 204


@pytest.mark.parametrize("how", CUTS)
def test_an_s3_enqueue_cut_off_and_never_sent_again_leaves_no_job_queued_without_an_entry(
    cp_env, redis_view, monkeypatch, how
):
    # Given an uploaded S3-tier payload whose enqueue is answered 503 (the connection broke at
    # its append)
    cp = namespace()
    ref = upload(cp, b"\x06" * 3000)
    job = job_of(ref)
    cut_once(monkeypatch, "append", after_it_ran=how == "after_the_append")
    assert cp.enqueue(ref=ref).status == 503
    # When the client (a wire client) never sends it again
    if how == "before_the_append":
        # Then nothing was appended, and no job reads `queued`
        assert_no_job_left(cp, redis_view, job)
    else:
        # Then the entry it appended (after its upload was verified) is the job's: a poll
        # delivers it, as an inline enqueue answered 503 after its script ran is delivered
        polled = cp.poll(wait_s=0)
        assert polled.status == 200 and polled.json["job_id"] == job, polled.raw_body
        assert cp.status(job).json["state"] == "running"
        return
    # And a re-send, late, still enqueues it once
    late = cp.enqueue(ref=ref)
    assert late.status == 201, late.raw_body
    assert redis_view.hget(keys.job(job), "s") == b"queued"
    assert cp.status(job).json["state"] == "queued"


def test_a_poll_between_the_append_and_the_job_step_delivers_the_job_at_once(cp_env, monkeypatch):
    # Given an uploaded S3-tier payload, and a daemon's poll that takes the entry the instant
    # the enqueue appends it (a long-poll woken by the append), before the enqueue's job step
    cp = namespace()
    ref = upload(cp, b"\x07" * 3000)
    job = job_of(ref)
    real = RedisJobStore.settle_ref_enqueue
    polled = {}

    def poll_first(self, *a, **kw):
        polled["reply"] = cp.poll(wait_s=0)
        return real(self, *a, **kw)

    monkeypatch.setattr(RedisJobStore, "settle_ref_enqueue", poll_first)
    # When the client enqueues it
    made = cp.enqueue(ref=ref)
    # Then the poll got the job at once (not after a visibility timeout), and the enqueue
    # answers 201 for it; the job runs once, on that entry
    assert polled["reply"].status == 200 and polled["reply"].json["job_id"] == job
    assert (made.status, made.json["job_id"]) == (201, job), made.raw_body
    assert cp.status(job).json["state"] == "running"
    assert cp.poll(wait_s=0).status == 204


def queue_ids_ahead_of_the_clock(cp: ControlPlane, redis_view, ahead_ms: int) -> None:
    """The queue's last entry id `ahead_ms` past Redis's clock, as after a failover onto a
    replica whose clock is behind the old primary's (or, in cluster mode, a queue's node whose
    clock is ahead of the job's node): XADD then stamps new entries with that id's time."""
    warm = cp.enqueue(ref=upload(cp, b"\x01" * 3000))
    assert warm.status == 201, warm.raw_body
    assert cp.poll(wait_s=0).status == 200
    now_s, now_us = redis_view.time()
    ahead = now_s * 1000 + now_us // 1000 + ahead_ms
    redis_view.execute_command("XSETID", keys.queue(cp.ns, cp.queue), f"{ahead}-0")


def test_a_refused_re_send_drops_a_cut_off_try_s_entry_whatever_the_queue_s_clock_says(
    cp_env, redis_view, monkeypatch
):
    # Given a queue whose entry ids run a minute ahead of the job's clock, and an uploaded
    # S3-tier payload whose enqueue appended its entry, then lost its reply (503)
    cp = namespace()
    queue_ids_ahead_of_the_clock(cp, redis_view, 60_000)
    ref = upload(cp, b"\x09" * 3000)
    job = job_of(ref)
    cut_once(monkeypatch, "append", after_it_ran=True)
    assert cp.enqueue(ref=ref).status == 503
    # When the namespace's retention changes and the re-send is refused
    cp.policy = NamespacePolicy("7d")
    again = cp.enqueue(ref=ref)
    assert (again.status, again.error["code"]) == (409, "policy_mismatch"), again.raw_body
    # Then the entry of the cut-off try never runs the job its client was told was refused
    assert_no_job_left(cp, redis_view, job)


def test_an_enqueue_checked_while_a_re_send_is_refused_is_delivered_once_if_answered_201(
    cp_env, redis_view, monkeypatch
):
    # Given an uploaded S3-tier payload whose enqueue is being checked when a re-send of it,
    # under a policy changed meanwhile, is refused, and a daemon's poll that meets the first
    # enqueue's entry before its job step
    cp = namespace()
    ref = upload(cp, b"\x0b" * 3000)
    job = job_of(ref)
    from payloadstore_controlplane.logic import enqueue as enqueue_logic

    real_verify = enqueue_logic.verify_uploaded
    real_settle = RedisJobStore.settle_ref_enqueue
    seen: dict = {"polls": []}

    def refused_meanwhile(*a, **kw):
        real_verify(*a, **kw)
        if "refused" not in seen:
            cp.policy = NamespacePolicy("7d")
            seen["refused"] = cp.enqueue(ref=ref)
            cp.policy = NamespacePolicy("1d")

    def poll_first(self, *a, **kw):
        seen["polls"].append(cp.poll(wait_s=0))
        return real_settle(self, *a, **kw)

    monkeypatch.setattr(enqueue_logic, "verify_uploaded", refused_meanwhile)
    monkeypatch.setattr(RedisJobStore, "settle_ref_enqueue", poll_first)
    # When the first enqueue goes on
    made = cp.enqueue(ref=ref)
    # Then the re-send was refused, and the first, answered 201, is delivered exactly once
    assert seen["refused"].error["code"] == "policy_mismatch", seen["refused"].raw_body
    assert (made.status, made.json["job_id"]) == (201, job), made.raw_body
    delivered = [r for r in seen["polls"] if r.status == 200]
    delivered += [r for r in (cp.poll(wait_s=0),) if r.status == 200]
    assert [r.json["job_id"] for r in delivered] == [job]
    assert cp.status(job).json["state"] == "running"
    assert cp.poll(wait_s=0).status == 204


def test_a_cancel_answered_404_for_a_cut_off_s3_enqueue_keeps_its_entry_from_running(
    cp_env, redis_view, monkeypatch
):
    # Given an uploaded S3-tier payload whose enqueue appended its entry, then lost its reply
    # (503)
    cp = namespace()
    ref = upload(cp, b"\x0c" * 3000)
    job = job_of(ref)
    cut_once(monkeypatch, "append", after_it_ran=True)
    assert cp.enqueue(ref=ref).status == 503
    # When the client cancels the job instead of sending the enqueue again, and is told there
    # is no such job
    assert cancel(cp, job).status == 404
    # Then no daemon runs it: the entry of the cut-off try is dropped
    assert_no_job_left(cp, redis_view, job)
    # And a re-send, late, still enqueues it once
    late = cp.enqueue(ref=ref)
    assert late.status == 201, late.raw_body
    polled = cp.poll(wait_s=0)
    assert polled.status == 200 and polled.json["job_id"] == job, polled.raw_body
    assert cp.poll(wait_s=0).status == 204
