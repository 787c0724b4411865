"""Concurrent requests to one function, as Lambda serves them in separate containers.

A long-poll of one client must not disturb another request the same function serves meanwhile."""

from __future__ import annotations

import threading

import msgpack
import requests


def test_requests_to_one_function_during_a_long_poll_are_answered_correctly(local_gateway):
    base = f"{local_gateway.url}/v1/namespaces/dev"
    client = local_gateway.auth("dev", "client")
    # Given a job whose result a client is long-polling (jobs function, blocked in Redis)
    job = requests.post(
        f"{base}/queues/concurrency/jobs",
        data=msgpack.packb(1),
        headers={**client, "Content-Type": "application/msgpack"},
        timeout=10,
    ).json()["job_id"]
    polls: list = []

    def long_poll(wait: str):
        polls.append(
            requests.get(
                f"{base}/jobs/{job}/result", params={"wait": wait}, headers=client, timeout=30
            )
        )

    answers: list = []

    def busy(n: int):
        for i in range(n):
            enq = requests.post(
                f"{base}/queues/concurrency/jobs",
                data=msgpack.packb(i),
                headers={**client, "Content-Type": "application/msgpack"},
                timeout=10,
            )
            assert enq.status_code == 201, (enq.status_code, enq.headers, enq.text[:300])
            status = requests.get(f"{base}/jobs/{enq.json()['job_id']}", headers=client, timeout=10)
            answers.append(
                (
                    enq.status_code,
                    sorted(enq.json()),
                    status.status_code,
                    status.json().get("state"),
                )
            )

    # When the same function serves other routes meanwhile, from several callers at once
    threads = [threading.Thread(target=long_poll, args=(w,)) for w in ("0.5", "1", "1.5", "2")]
    threads += [threading.Thread(target=busy, args=(40,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every answer is the one its own route gives
    assert len(answers) == 120
    assert all(a == (201, ["job_id", "tier"], 200, "queued") for a in answers), answers
    assert [p.status_code for p in polls] == [202] * 4
    assert all(p.json()["state"] == "queued" for p in polls)
