"""Concurrent requests to one function, as Lambda serves them in separate containers.

A long-poll of one client must not disturb another request the same function serves meanwhile,
and a flood of long-polls on a cold stack must not starve the other routes (each first request of
a container used to build its own SSM client; see payloadstore_controlplane/runtime/once.py)."""

from __future__ import annotations

import threading
import time
import uuid

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


def test_100_concurrent_long_polls_leave_other_routes_answering(local_gateway):
    url = local_gateway.url
    daemon = local_gateway.auth("dev", "daemon")
    client = local_gateway.auth("dev", "client")
    idle_queue = f"idle-{uuid.uuid4().hex[:8]}"
    polls: list = []

    def long_poll():
        polls.append(
            requests.post(
                f"{url}/v1/daemon/poll",
                json={"namespace": "dev", "queues": [idle_queue], "wait_s": 15, "daemon_id": "d"},
                headers=daemon,
                timeout=60,
            )
        )

    # Given 100 daemons long-polling an empty queue at once (each holds a Redis connection)
    pollers = [threading.Thread(target=long_poll) for _ in range(100)]
    for t in pollers:
        t.start()
    time.sleep(1.5)
    # When other callers use the API meanwhile
    answers = []
    for i in range(3):
        health = requests.get(f"{url}/v1/health", timeout=30)
        enq = requests.post(
            f"{url}/v1/namespaces/dev/queues/busy-{i}/jobs",
            data=msgpack.packb(i),
            headers={**client, "Content-Type": "application/msgpack"},
            timeout=30,
        )
        status = requests.get(
            f"{url}/v1/namespaces/dev/jobs/{enq.json().get('job_id', 'x')}",
            headers=client,
            timeout=30,
        )
        answers.append(
            (health.status_code, health.json()["status"], enq.status_code, status.status_code)
        )
        if i == 0:
            still_polling = sum(t.is_alive() for t in pollers)
    for t in pollers:
        t.join()
    # Then they were answered normally while the polls were held
    assert still_polling > 50, "the long-polls ended before the other calls were made"
    assert answers == [(200, "ok", 201, 200)] * 3, answers
    # And every long-poll ended as an idle poll does, none with a 503
    assert sorted(p.status_code for p in polls) == [204] * 100, [
        (p.status_code, p.text[:120]) for p in polls if p.status_code != 204
    ]
