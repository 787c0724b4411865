"""The same control-plane code on a real 3-node Redis Cluster (as on ElastiCache in cluster mode).

Every multi-key command and Lua script must stay inside one hash slot, or the cluster refuses it
with CROSSSLOT; this runs the whole job life cycle there."""

from __future__ import annotations

import base64
import subprocess
import time

import pytest
import redis
from redis.cluster import RedisCluster

from payloadstore_devstack.services import (
    find_redis_cli,
    find_redis_server,
    free_port,
    port_is_open,
)
from tests.support.control_plane import upload


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    binary = find_redis_server()
    base = tmp_path_factory.mktemp("cluster")
    ports = [free_port() for _ in range(3)]
    procs = []
    for port in ports:
        d = base / str(port)
        d.mkdir()
        procs.append(
            subprocess.Popen(
                [
                    binary,
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--dir",
                    str(d),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--logfile",
                    str(d / "redis.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    deadline = time.monotonic() + 30
    while not all(port_is_open(p) for p in ports):
        exited = [p.args[4] for p in procs if p.poll() is not None]
        assert not exited, f"cluster node(s) on port {exited} exited; see {base}/*/redis.log"
        assert time.monotonic() < deadline, "cluster nodes did not start"
        time.sleep(0.05)
    cli = find_redis_cli()
    subprocess.run(
        [
            cli,
            "--cluster",
            "create",
            *[f"127.0.0.1:{p}" for p in ports],
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    node = redis.Redis(port=ports[0])
    while node.cluster("info")["cluster_state"] != "ok":
        assert time.monotonic() < deadline + 10, "cluster did not become ok"
        time.sleep(0.1)
    yield f"redis://127.0.0.1:{ports[0]}/0"
    for p in procs:
        p.terminate()
        p.wait(5)


@pytest.fixture
def on_cluster(redis_cluster, settings_env):
    # No replicas here: nothing to wait for (test_replica_acks.py runs a replicated cluster).
    settings_env(
        REDIS_URL=redis_cluster,
        REDIS_CLUSTER="true",
        REDIS_MIN_REPLICA_ACKS="0",
        VISIBILITY_TIMEOUT_S="1",
    )
    return RedisCluster.from_url(redis_cluster)


def test_whole_job_life_cycle_runs_on_a_cluster(cp, on_cluster):
    b64 = lambda b: base64.b64encode(b).decode()
    # inline enqueue with an Idempotency-Key, twice
    first = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "k1"})
    again = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "k1"})
    assert (first.status, again.status) == (201, 200)
    # by-reference enqueue on a second queue
    ref = upload(cp, b"\x02" * 1000)
    by_ref = cp.enqueue(ref=ref, queue="second")
    assert by_ref.status == 201
    # one XREADGROUP over both queues of the namespace (same slot)
    got = {cp.poll(queues=[cp.queue, "second"]).json["job_id"] for _ in range(2)}
    assert got == {first.json["job_id"], by_ref.json["job_id"]}
    # redelivery through XAUTOCLAIM
    time.sleep(1.2)
    redelivered = cp.poll(queues=[cp.queue, "second"])
    assert redelivered.status == 200 and redelivered.json["attempt"] == 2
    # payload lost -> requeued once (XADD + XACK/XDEL in the namespace slot, Lua in the job slot)
    job = by_ref.json["job_id"]
    if redelivered.json["job_id"] != job:
        time.sleep(1.2)
        assert cp.poll(queues=["second"]).json["job_id"] == job
    assert cp.report(job, {"state": "payload_lost"}).status == 204
    assert cp.poll(queues=["second"]).json["job_id"] == job
    # results (Lua over job hash + done list) and the blocking wait
    for job_id in (first.json["job_id"], job):
        assert cp.post_result(job_id, {"resultInline": b64(b"\x2a")}).status == 204
        assert cp.result(job_id, wait=1).json["state"] == "succeeded"


def test_a_batch_enqueues_in_one_script_on_a_cluster(cp, on_cluster):
    b64 = lambda b: base64.b64encode(b).decode()
    # Given a key used by a single enqueue, and a batch repeating it among new inline jobs
    first = cp.enqueue(raw=b"\x01", headers={"Idempotency-Key": "c1"}).json["job_id"]
    jobs = [
        {"payloadInline": b64(b"\x01"), "idempotency_key": "c1"},
        {"payloadInline": b64(b"\x02"), "idempotency_key": "c2"},
        {"payloadInline": b64(b"\x03")},
    ]
    r = cp.call(
        "jobs",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
        {"ns": cp.ns, "queue": cp.queue},
        body={"jobs": jobs},
    )
    # Then the cluster runs it (every key in the namespace's slot): the repeat is the first
    # job, and the new ones are queued after it in request order
    assert r.status == 200, r.raw_body
    answers = r.json["jobs"]
    assert answers[0]["job_id"] == first
    polled = [cp.poll().json["job_id"] for _ in range(3)]
    assert polled == [first, answers[1]["job_id"], answers[2]["job_id"]]


def test_listing_retry_redrive_and_purge_run_on_a_cluster(cp, on_cluster):
    from tests.integration.test_operate import fail, ids, list_jobs, purge, redrive, retry, take

    # Given two inline jobs that failed (their hashes on other nodes than the queue)
    jobs = [cp.enqueue(raw=bytes([i])).json["job_id"] for i in range(2)]
    for job in jobs:
        take(cp, job)
        fail(cp, job)
    # Then they list as failed (the index in the namespace slot, each hash read on its node)
    assert ids(list_jobs(cp, "failed")) == jobs[::-1]
    # When one is retried and the other redriven, both run again with their bytes
    assert retry(cp, jobs[0]).status == 200
    assert redrive(cp).json == {"retried": 1, "skipped": 0}
    assert {cp.poll().json["job_id"] for _ in range(2)} == set(jobs)
    # When a queued job is purged, it is cancelled
    waiting = cp.enqueue(raw=b"\x09").json["job_id"]
    assert purge(cp).json == {"cancelled": 1, "remaining": 0}
    assert ids(list_jobs(cp, "cancelled")) == [waiting]


def test_a_leases_long_poll_is_woken_by_a_cancel_on_a_cluster(cp, on_cluster, settings_env):
    import threading

    from tests.support.control_plane import cancel, leases

    settings_env(VISIBILITY_TIMEOUT_S="300")
    # Given: a daemon holding a running job, waiting in its leases long-poll (BLPOP on its
    # cancel list, in the namespace's slot; the job hash in the job's)
    job = cp.enqueue(raw=b"\x07").json["job_id"]
    delivery = cp.poll(daemon_id="dc").json
    assert delivery["job_id"] == job
    answers = []
    started = time.monotonic()
    waiter = threading.Thread(
        target=lambda: answers.append(leases(cp, "dc", {job: delivery["lease"]}, wait_s=10))
    )
    waiter.start()
    time.sleep(0.5)
    # When: a client cancels it
    assert cancel(cp, job).status == 202
    waiter.join(15)
    # Then: the long-poll answered at once, naming it
    assert answers and answers[0].status == 200, answers
    assert answers[0].json["cancel_requested"] == [job]
    assert time.monotonic() - started < 3.0
