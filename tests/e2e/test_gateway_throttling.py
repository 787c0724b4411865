"""Reserved concurrency on the local gateway (issue 23): with the daemon function's cap taken by
waiting polls, a further poll is throttled as API Gateway answers a throttled Lambda (500,
`{"message": "Internal server error"}`), while enqueue, result and health still answer at once."""

from __future__ import annotations

import threading
import time
import uuid

import msgpack
import requests

DAEMON_CAP = 2


def test_a_saturated_daemon_function_leaves_the_client_routes_answering(start_local_gateway):
    # Given a gateway whose daemon function may run 2 invocations at once (as reserved concurrency)
    gw = start_local_gateway(PAYLOADSTORE_LOCAL_DAEMON_CONCURRENCY=str(DAEMON_CAP))
    daemon = gw.auth("dev", "daemon")
    client = gw.auth("dev", "client")
    idle_queue = f"idle-{uuid.uuid4().hex[:8]}"
    poll_body = {"namespace": "dev", "queues": [idle_queue], "wait_s": 6, "daemon_id": "d"}
    waiting: list[requests.Response] = []

    def long_poll() -> None:
        waiting.append(
            requests.post(f"{gw.url}/v1/daemon/poll", json=poll_body, headers=daemon, timeout=30)
        )

    # And the cap taken by polls waiting on an empty queue
    pollers = [threading.Thread(target=long_poll) for _ in range(DAEMON_CAP)]
    for t in pollers:
        t.start()
    time.sleep(1.5)

    # When one more daemon polls, Then it is throttled at once, as API Gateway answers it
    started = time.monotonic()
    over = requests.post(f"{gw.url}/v1/daemon/poll", json=poll_body, headers=daemon, timeout=30)
    assert time.monotonic() - started < 2.0
    assert over.status_code == 500, (over.status_code, over.text[:300])
    assert over.json() == {"message": "Internal server error"}
    assert over.headers["x-amzn-ErrorType"] == "InternalServerErrorException"

    # And enqueue, result and health answer quickly meanwhile
    started = time.monotonic()
    enq = requests.post(
        f"{gw.url}/v1/namespaces/dev/queues/{idle_queue}-client/jobs",
        data=msgpack.packb(1),
        headers={**client, "Content-Type": "application/msgpack"},
        timeout=10,
    )
    assert enq.status_code == 201, (enq.status_code, enq.text[:300])
    job = enq.json()["job_id"]
    result = requests.get(
        f"{gw.url}/v1/namespaces/dev/jobs/{job}/result", headers=client, timeout=10
    )
    assert result.status_code < 500, (result.status_code, result.text[:300])
    health = requests.get(f"{gw.url}/v1/health", timeout=10)
    assert health.status_code == 200, (health.status_code, health.text[:300])
    assert time.monotonic() - started < 3.0
    # And the waiting polls themselves were not disturbed (nothing to deliver: 204)
    assert len(waiting) == 0

    for t in pollers:
        t.join(30)
    assert [r.status_code for r in waiting] == [204] * DAEMON_CAP
    # And once they answered, the daemon function takes polls again
    again = requests.post(
        f"{gw.url}/v1/daemon/poll", json={**poll_body, "wait_s": 0}, headers=daemon, timeout=30
    )
    assert again.status_code == 204, (again.status_code, again.text[:300])
    assert "function throttled function=daemon reserved_concurrency=2" in gw.log_path.read_text()
