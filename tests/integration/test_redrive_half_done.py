"""A redrive meeting a job that reads `queued` one retry past its ended entry, with no entry of
its own (`x` = '*'): a retry cut between its job step and its queue step is finished by the
redrive (issue 43); a job a payload_lost report requeued is not one, and is neither retried nor
counted skipped. The real handlers, a real redis-server and the S3 emulator over HTTP."""

from __future__ import annotations

from payloadstore_controlplane.store import keys
from tests.integration.test_operate import fail, redrive, retry, take
from tests.support.faults import cut_once


def failed_job(cp) -> str:
    job = cp.enqueue(inline=b"\x01").json["job_id"]
    take(cp, job)
    fail(cp, job)
    return job


def test_a_job_requeued_by_payload_lost_after_a_retry_is_not_counted_skipped(
    cp, redis_view, monkeypatch
):
    # Given a job that failed, was retried, and whose next delivery reported payload_lost, the
    # report's append cut off: the job is `queued` one retry past its failed entry, `x` = '*',
    # and its old entry (pending, the reporting daemon's) runs it once its lease lapses
    job = failed_job(cp)
    assert retry(cp, job).status == 200
    take(cp, job)
    cut_once(monkeypatch, "append")
    assert cp.report(job, {"state": "payload_lost"}).status == 503
    assert redis_view.hmget(keys.job(job), "s", "x", "rt") == [b"queued", b"*", b"1"]
    # When the queue's failed jobs are redriven
    reply = redrive(cp)
    # Then the queued job is neither retried nor counted as one whose arguments are gone
    assert reply.status == 200, reply.raw_body
    assert reply.json == {"retried": 0, "skipped": 0}


def test_a_redrive_cut_between_its_steps_is_finished_by_a_later_redrive(cp, monkeypatch):
    # Given a failed job whose redrive was cut between its job step and its queue step
    job = failed_job(cp)
    cut_once(monkeypatch, "requeue")
    assert redrive(cp).status == 503
    assert cp.status(job).json["state"] == "queued"
    # When the queue is redriven again
    reply = redrive(cp)
    # Then the job is retried once, and delivered once
    assert reply.json == {"retried": 1, "skipped": 0}, reply.raw_body
    take(cp, job)
    assert cp.poll().status == 204
