"""Client behaviour against an in-memory control plane + S3 (tests/unit/sdk_fakes.py)."""

from __future__ import annotations

import base64
import hashlib
import json

import httpx
import pytest

from payloadstore import (
    AuthError,
    Client,
    ConfigError,
    EnqueueUnconfirmed,
    JobFailed,
    JobNotFound,
    PayloadCorrupt,
    PayloadLost,
    PayloadTooLarge,
    ResultTimeout,
    ServiceUnavailable,
    codec,
)
from tests.unit.sdk_fakes import FakeWorld, make_client, response


def big_bytes(n: int) -> bytes:
    return bytes(range(256)) * (n // 256) + bytes(n % 256)


def test_given_a_small_call_when_added_then_it_is_sent_inline_as_raw_msgpack_with_an_idempotency_key():
    # Given
    world = FakeWorld()
    client = make_client(world)
    # When
    job = client.queue("resize").add(b"abc", width=3)
    # Then
    assert job.tier == "inline"
    (post,) = world.calls("POST", "/queues/resize/jobs")
    assert post.headers["content-type"] == "application/msgpack"
    assert len(post.headers["idempotency-key"]) >= 16
    assert codec.decode(world.bodies[world.requests.index(post)]) == {
        "args": [b"abc"],
        "kwargs": {"width": 3},
    }
    assert not world.calls("POST", "/payloads/presign")


def test_given_a_lost_response_when_inline_enqueue_is_retried_then_the_same_key_gives_one_job():
    world = FakeWorld()

    # The first attempt reaches the server but its answer is lost: the server made a job.
    def first_attempt(request):
        world._enqueue(request, request.content)
        return httpx.Response(502)

    world.fail("POST", "/queues/q/jobs", first_attempt)
    client = make_client(world)
    job = client.queue("q").add(1)
    posts = world.calls("POST", "/queues/q/jobs")
    assert len(posts) == 2
    assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
    assert len(world.jobs) == 1 and job.job_id in world.jobs


def test_given_a_large_call_when_added_then_bytes_go_to_s3_with_the_signed_headers_and_the_job_carries_the_ref():
    world = FakeWorld(inline_threshold=1024)
    client = make_client(world)
    payload = big_bytes(50_000)
    job = client.queue("q").add(payload)
    assert job.tier == "s3"
    (presign,) = world.calls("POST", "/payloads/presign")
    body = json.loads(presign.content)
    encoded = codec.encode({"args": [payload], "kwargs": {}})
    # kind=args and content_type=application/msgpack are the server's defaults: not sent
    assert body == {"op": "put", "size": encoded.nbytes, "sha256": encoded.sha256()}
    (put,) = world.calls("PUT", "s3.test")
    assert "authorization" not in put.headers
    stored = world.objects[f"payloads/2026/01/01/{job.job_id}/args"]
    assert hashlib.sha256(stored).hexdigest() == encoded.sha256()
    # The enqueue names the issued key with its bucket and size; the server knows the rest
    (enqueue,) = world.calls("POST", "/queues/q/jobs")
    assert json.loads(enqueue.content) == {
        "payloadRef": {
            "bucket": "fake-bucket",
            "key": f"payloads/2026/01/01/{job.job_id}/args",
            "size": encoded.nbytes,
        }
    }


def test_given_enqueue_fails_after_a_good_upload_when_retried_then_nothing_is_uploaded_again():
    world = FakeWorld()
    world.fail("POST", "/queues/q/jobs", response(503, json={}), httpx.ConnectError("reset"))
    sleeps: list[float] = []
    client = make_client(world, sleeps)
    job = client.queue("q").add(big_bytes(10_000))
    assert len(world.calls("PUT", "s3.test")) == 1
    assert len(world.calls("POST", "/queues/q/jobs")) == 3
    assert len(sleeps) == 2 and job.job_id in world.jobs


def test_given_an_expired_url_when_uploading_then_the_same_job_is_re_presigned_and_the_upload_succeeds():
    world = FakeWorld()
    first_url: list[str] = []

    def expire_first_url(request):
        first_url.append(str(request.url))
        world.expired_urls.add(str(request.url))
        # fall through: S3 answers 403 "Request has expired"

    world.fail("PUT", "s3.test", expire_first_url)
    client = make_client(world)
    job = client.queue("q").add(big_bytes(10_000))
    presigns = [json.loads(r.content) for r in world.calls("POST", "/payloads/presign")]
    assert len(presigns) == 2
    assert "job_id" not in presigns[0] and presigns[1]["job_id"] == job.job_id
    puts = world.calls("PUT", "s3.test")
    assert len(puts) == 2 and str(puts[0].url) == first_url[0] != str(puts[1].url)
    assert f"payloads/2026/01/01/{job.job_id}/args" in world.objects


def test_given_s3_503s_when_uploading_then_the_put_is_retried_with_backoff():
    world = FakeWorld()
    world.fail("PUT", "s3.test", response(503), httpx.WriteError("broken pipe"))
    sleeps: list[float] = []
    job = make_client(world, sleeps).queue("q").add(big_bytes(10_000))
    assert len(world.calls("PUT", "s3.test")) == 3 and len(sleeps) == 2
    assert job.job_id in world.jobs


def test_given_a_payload_over_the_cap_when_added_then_payload_too_large_before_any_presign():
    world = FakeWorld(max_payload_bytes=4096)
    client = make_client(world)
    with pytest.raises(PayloadTooLarge, match="over the 4096 byte") as info:
        client.queue("q").add(big_bytes(5000))
    assert info.value.limit == 4096 and info.value.size > 4096
    assert not world.calls("POST", "/payloads/presign")


def test_given_a_bad_token_when_adding_then_auth_error():
    world = FakeWorld()
    transport = world.transport()
    client = Client("http://cp.test", "pst_bad", "ns", http=httpx.Client(transport=transport))
    with pytest.raises(AuthError, match="unknown token"):
        client.queue("q").add(1)


def test_given_an_inline_result_when_waiting_then_the_value_is_decoded():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(2)
    world.jobs[job.job_id]["result"] = {
        "resultInline": base64.b64encode(codec.encode({"y": [1, 2]}).tobytes()).decode()
    }
    assert job.result(timeout=5) == {"y": [1, 2]}


def test_result_copy_after_result_gives_writable_arrays_not_the_kept_views():
    import numpy as np

    # Given a job whose result is an array, read once as zero-copy views
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(2)
    world.jobs[job.job_id]["result"] = {
        "resultInline": base64.b64encode(codec.encode(np.arange(4.0)).tobytes()).decode()
    }
    view = job.result(timeout=5)
    assert not view.flags.writeable
    # When the result is asked for with copy=True (twice), then without
    first, second = job.result(copy=True), job.result(copy=True)
    # Then each copy is writable and its own (issue 46: the kept read-only views came back),
    # and result() still answers the kept value
    assert first.flags.writeable and second.flags.writeable
    first[0] = 99.0
    assert second[0] == 0.0 and view[0] == 0.0
    assert job.result() is view


def test_given_a_result_in_s3_when_waiting_then_it_is_downloaded_and_verified():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    value = big_bytes(30_000)
    ref, _ = client.payloads.store(codec.encode(value), "result", job_id=job.job_id)
    world.jobs[job.job_id]["result"] = {"resultRef": ref.to_wire()}
    assert bytes(job.result(timeout=5)) == value


def test_given_a_result_object_altered_in_s3_when_waiting_then_payload_corrupt_names_both_hashes():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    ref, _ = client.payloads.store(codec.encode(big_bytes(30_000)), "result", job_id=job.job_id)
    stored = bytearray(world.objects[ref.key])
    stored[-100] ^= 0xFF  # one flipped byte, same size
    world.objects[ref.key] = bytes(stored)
    world.jobs[job.job_id]["result"] = {"resultRef": ref.to_wire()}
    with pytest.raises(PayloadCorrupt) as info:
        job.result(timeout=5)
    assert info.value.expected_sha256 == ref.sha256
    assert info.value.actual_sha256 == hashlib.sha256(world.objects[ref.key]).hexdigest()


def test_given_a_result_object_deleted_when_waiting_then_payload_lost():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    ref, _ = client.payloads.store(codec.encode(big_bytes(30_000)), "result", job_id=job.job_id)
    del world.objects[ref.key]
    world.jobs[job.job_id]["result"] = {"resultRef": ref.to_wire()}
    with pytest.raises(PayloadLost, match=ref.key):
        job.result(timeout=5)


def test_given_a_failed_job_when_waiting_then_job_failed_carries_the_remote_traceback():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    world.jobs[job.job_id]["result"] = {
        "error": {
            "type": "ValueError",
            "message": "bad width",
            "traceback": "Traceback...\nValueError: bad width",
        }
    }
    world.jobs[job.job_id]["state"] = "failed"
    with pytest.raises(JobFailed) as info:
        job.result(timeout=5)
    assert (info.value.type, info.value.message) == ("ValueError", "bad width")
    assert "ValueError: bad width" in info.value.traceback and "remote traceback" in str(info.value)


def test_given_a_pending_job_when_the_timeout_passes_then_result_timeout_with_the_state():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    with pytest.raises(ResultTimeout, match="still queued") as info:
        job.result(timeout=0)
    assert isinstance(info.value, TimeoutError)
    (call,) = world.calls("GET", "/result")
    assert call.url.params["wait"] == "0"


def test_given_a_long_timeout_when_waiting_then_each_poll_asks_at_most_the_server_cap():
    world = FakeWorld()
    client = make_client(world)
    job = client.queue("q").add(1)
    world.fail("GET", "/result", response(202, json={"job_id": job.job_id, "state": "running"}))
    world.jobs[job.job_id]["result"] = {
        "resultInline": base64.b64encode(codec.encode(7).tobytes()).decode()
    }
    assert job.result(timeout=300) == 7
    waits = [float(r.url.params["wait"]) for r in world.calls("GET", "/result")]
    assert waits == [20.0, 20.0]


def test_given_an_unknown_job_when_asking_status_then_job_not_found():
    client = make_client(FakeWorld())
    with pytest.raises(JobNotFound):
        client.job("NOPE").status()


def test_given_the_config_when_used_twice_then_it_is_fetched_once():
    world = FakeWorld()
    client = make_client(world)
    client.queue("q").add(1)
    client.queue("q").add(2)
    assert len(world.calls("GET", "/v1/config")) == 1


def test_given_env_vars_when_building_from_env_then_they_are_used(monkeypatch):
    monkeypatch.setenv("PAYLOADSTORE_ENDPOINT", "http://cp.example:8080/")
    monkeypatch.setenv("PAYLOADSTORE_TOKEN", "pst_t")
    monkeypatch.setenv("PAYLOADSTORE_NAMESPACE", "team-a")
    client = Client.from_env()
    assert (client.wire.endpoint, client.namespace) == ("http://cp.example:8080", "team-a")


def test_given_no_endpoint_when_building_from_env_then_config_error_names_the_variable(monkeypatch):
    monkeypatch.delenv("PAYLOADSTORE_ENDPOINT", raising=False)
    monkeypatch.setenv("PAYLOADSTORE_TOKEN", "pst_t")
    with pytest.raises(ConfigError, match="PAYLOADSTORE_ENDPOINT"):
        Client.from_env()


def test_given_a_devstack_file_when_building_then_the_role_token_of_the_namespace_is_used(
    tmp_path, monkeypatch
):
    state = {
        "endpoint": "http://127.0.0.1:8080",
        "s3_endpoint": "http://127.0.0.1:5000",
        "bucket": "b",
        "redis_url": "redis://x",
        "namespaces": {"dev": {"client_token": "pst_c", "daemon_token": "pst_d"}},
    }
    (tmp_path / ".devstack.json").write_text(json.dumps(state))
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.delenv("PAYLOADSTORE_DEVSTACK", raising=False)
    monkeypatch.chdir(nested)
    client = Client.from_devstack(role="daemon")
    assert client.wire._token == "pst_d" and client.namespace == "dev"
    with pytest.raises(ConfigError, match="namespaces: dev"):
        Client.from_devstack(namespace="prod")


def test_given_a_cp_that_stays_down_when_adding_then_service_unavailable():
    world = FakeWorld()
    world.fail(
        "GET",
        "/v1/config",
        *[response(503, json={"error": {"code": "service_unavailable", "message": "redis down"}})]
        * 5,
    )
    with pytest.raises(ServiceUnavailable, match="redis down"):
        make_client(world).queue("q").add(1)


def test_given_progress_true_when_uploading_then_a_bar_reaches_the_full_size_on_stderr(capsys):
    world = FakeWorld(max_payload_bytes=8 << 20)
    make_client(world).queue("q").submit((big_bytes(3 << 20),), progress=True)
    err = capsys.readouterr().err
    assert "upload args" in err and "100%" in err


def test_given_progress_false_when_uploading_then_stderr_stays_quiet(capsys):
    world = FakeWorld(max_payload_bytes=8 << 20)
    make_client(world).queue("q").submit((big_bytes(3 << 20),), progress=False)
    assert capsys.readouterr().err == ""


def test_given_no_tqdm_when_progress_is_asked_then_a_plain_counter_reaches_100_percent(
    capsys, monkeypatch
):
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # import tqdm -> ImportError
    world = FakeWorld(max_payload_bytes=8 << 20)
    make_client(world).queue("q").submit((big_bytes(3 << 20),), progress=True)
    assert "upload args 100% 3.0/3.0 MiB" in capsys.readouterr().err


def inline_unavailable() -> httpx.Response:
    return httpx.Response(
        503,
        headers={"Retry-After": "1"},
        json={"error": {"code": "inline_unavailable", "message": "redis above high-water mark"}},
    )


def test_given_inline_unavailable_when_adding_a_small_call_then_it_is_stored_through_s3_at_once():
    # Given: the control plane refuses inline bytes (Redis above its high-water mark)
    world = FakeWorld()
    world.fail("POST", "/queues/q/jobs", lambda r: inline_unavailable())
    sleeps: list[float] = []
    client = make_client(world, sleeps)
    # When
    job = client.queue("q").add(b"small", n=1)
    # Then: no waiting, one presign + PUT, and the job carries the reference
    assert sleeps == []
    assert job.tier == "s3" and world.jobs[job.job_id]["tier"] == "s3"
    encoded = codec.encode({"args": [b"small"], "kwargs": {"n": 1}})
    ref = world.jobs[job.job_id]["payload"]["payloadRef"]
    assert ref["size"] == encoded.nbytes and ref["sha256"] == encoded.sha256()
    assert codec.decode(world.objects[ref["key"]]) == {"args": [b"small"], "kwargs": {"n": 1}}
    posts = world.calls("POST", "/queues/q/jobs")
    assert len(posts) == 2 and posts[0].headers["content-type"] == "application/msgpack"


def test_given_a_cp_that_never_confirms_when_submitting_inline_then_enqueue_unconfirmed_names_the_key():
    # Given: every attempt ends in 503 redis_memory_full or a dropped connection
    world = FakeWorld()
    full = response(503, json={"error": {"code": "redis_memory_full", "message": "redis is full"}})
    world.fail("POST", "/queues/q/jobs", full, httpx.ReadError("reset"), full, full, full, full)
    client = make_client(world)
    # When
    with pytest.raises(EnqueueUnconfirmed) as info:
        client.queue("q").submit((1,), idempotency_key="my-key-1")
    # Then: one key on every attempt, and the error says how to get the same job
    assert isinstance(info.value, ServiceUnavailable)
    assert info.value.idempotency_key == "my-key-1" and info.value.queue == "q"
    assert "idempotency_key='my-key-1'" in str(info.value)
    keys = {r.headers["idempotency-key"] for r in world.calls("POST", "/queues/q/jobs")}
    assert keys == {"my-key-1"}
    assert world.jobs == {}
    # And: submitting again with the key, once the server recovers, gives one job
    job = client.queue("q").submit((1,), idempotency_key="my-key-1")
    assert list(world.jobs) == [job.job_id]


def test_given_a_cp_that_never_confirms_an_s3_enqueue_when_adding_then_enqueue_unconfirmed_with_the_job_id():
    world = FakeWorld()
    world.fail("POST", "/queues/q/jobs", *[response(503, json={})] * 5)
    with pytest.raises(EnqueueUnconfirmed) as info:
        make_client(world).queue("q").add(big_bytes(10_000))
    assert info.value.job_id and info.value.idempotency_key is None
    assert world.jobs == {}


def test_given_inline_refused_and_the_presign_refused_too_when_adding_then_enqueue_unconfirmed_with_the_key():
    # Given: Redis past the high-water mark (inline refused) and past the hard mark (no presign)
    world = FakeWorld()
    world.fail("POST", "/queues/q/jobs", lambda r: inline_unavailable())
    full = response(
        503,
        headers={"Retry-After": "0"},
        json={"error": {"code": "redis_memory_full", "message": "no new jobs for now"}},
    )
    world.fail("POST", "/payloads/presign", *[full] * 5)
    # When
    with pytest.raises(EnqueueUnconfirmed) as info:
        make_client(world).queue("q").submit((1,), idempotency_key="key-9")
    # Then: the same typed error as an unanswered enqueue, naming the key to submit again with
    assert info.value.code == "redis_memory_full" and info.value.idempotency_key == "key-9"
    assert "idempotency_key='key-9'" in str(info.value)
    assert world.jobs == {}
