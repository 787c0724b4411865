"""Queue observability: depth, in flight and oldest queued age, from the handlers on real Redis."""

from __future__ import annotations

import base64

import msgpack


def queue_stats(cp, queue=None, role="client"):
    return cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/queues/{queue}",
        {"ns": cp.ns, "queue": queue or cp.queue},
        role=role,
    )


def queue_list(cp, role="client"):
    return cp.call("jobs", "GET", "/v1/namespaces/{ns}/queues", {"ns": cp.ns}, role=role)


def test_depth_in_flight_and_oldest_age_follow_the_jobs(cp, monkeypatch):
    from payloadstore_controlplane.runtime import clock

    # Given three jobs queued
    jobs = [cp.enqueue(raw=msgpack.packb([i])).json["job_id"] for i in range(3)]
    # When the clock moves 30 s on
    real_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: real_now + 30)
    stats = queue_stats(cp)
    # Then all three wait, none runs, and the oldest is about 30 s old
    assert stats.status == 200
    assert stats.json["name"] == cp.queue
    assert (stats.json["queued"], stats.json["in_flight"]) == (3, 0)
    assert 29 <= stats.json["oldest_queued_age_s"] <= 35

    # When a daemon takes one
    got = cp.poll()
    assert got.status == 200 and got.json["job_id"] == jobs[0]
    stats = queue_stats(cp, role="daemon").json
    # Then two wait and one is in flight
    assert (stats["queued"], stats["in_flight"]) == (2, 1)

    # When its result is posted
    body = {"resultInline": base64.b64encode(msgpack.packb(0)).decode()}
    lease = got.json.get("lease")
    if lease is not None:
        body["lease"] = lease
    assert cp.post_result(jobs[0], body).status == 204
    stats = queue_stats(cp).json
    # Then nothing is in flight any more
    assert (stats["queued"], stats["in_flight"]) == (2, 0)


def test_an_empty_queue_reports_zeros_and_no_age(cp):
    # Given a queue whose only job was delivered and finished
    job = cp.enqueue(raw=msgpack.packb(1)).json["job_id"]
    got = cp.poll().json
    body = {"resultInline": base64.b64encode(msgpack.packb(1)).decode()}
    if got.get("lease"):
        body["lease"] = got["lease"]
    cp.post_result(job, body)
    # Then it still exists, with nothing queued, nothing in flight and no oldest age
    stats = queue_stats(cp)
    assert stats.status == 200
    assert stats.json == {
        "name": cp.queue,
        "queued": 0,
        "in_flight": 0,
        "oldest_queued_age_s": None,
        "failed": 0,
    }


def test_listing_names_every_queue_the_namespace_used(cp, other_cp):
    # Given jobs on two queues of this namespace and one of another namespace
    cp.enqueue(raw=b"\x01")
    cp.enqueue(raw=b"\x02", queue="second")
    other_cp.enqueue(raw=b"\x03")
    # When the client lists its queues
    listed = queue_list(cp)
    # Then it sees its two queues, in name order, and not the other namespace's
    assert listed.status == 200
    names = [q["name"] for q in listed.json["queues"]]
    assert names == sorted([cp.queue, "second"])
    by_name = {q["name"]: q for q in listed.json["queues"]}
    assert by_name["second"]["queued"] == 1


def test_a_queue_that_never_existed_is_404_and_a_bad_name_422(cp):
    missing = queue_stats(cp, queue="never-used")
    assert missing.status == 404 and missing.error["code"] == "not_found"
    assert queue_stats(cp, queue="bad name!").status == 422


def test_another_namespace_is_403(cp, other_cp):
    cp.enqueue(raw=b"\x01")
    r = cp.call(
        "jobs",
        "GET",
        "/v1/namespaces/{ns}/queues/{queue}",
        {"ns": cp.ns, "queue": cp.queue},
        namespace=other_cp.ns,
    )
    assert r.status == 403
    assert queue_list(cp).status == 200
    assert (
        cp.call("jobs", "GET", "/v1/namespaces/{ns}/queues", {"ns": cp.ns}, namespace=None).status
        == 401
    )
