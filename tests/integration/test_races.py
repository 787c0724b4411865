"""Operations under races (issue 33, defects 1, 2, 6 and 7): two operations interleaved at the
step where they collided, on the real handlers, a real redis-server and the S3 emulator over HTTP.

Where an ordinary sequence of calls forces the interleaving (a retry sent twice), the test is
black-box: calls and answers only. Where the race falls between two steps of one request, that
request is run in a thread and paused between those steps (a wrapped store or S3 call blocks on
an Event) while the other operation runs to the end; then it goes on. Each test failed on the
code before its fix (docs/design.md, "Job integrity", lists the invariant each fix keeps)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import requests

from payloadstore_controlplane.store import s3_objects
from tests.integration.test_multipart import (
    PART,
    MiB,
    ask_parts,
    payload,
    put_part,
    split,
    upload_all,
)
from tests.support.control_plane import ControlPlane, Reply, sha256_hex


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
