"""End-to-end figures on a local stack of its own (redis-server, the S3/SSM emulator, the local
gateway with the real handlers), each against its baseline in the same run:

- control-plane calls and bytes per S3-tier job, client side and daemon side (SDK + Daemon);
- SDK `queue.add()` vs `curl -T` of the same bytes to a presigned URL, and `job.result()` vs
  `curl` GET of the result object, by size;
- a small job's round trip through the handlers (enqueue, poll, result post, result get, called
  in-process as Lambda would) vs raw redis-py doing the same work;
- S3-tier `queue.add()` of 1 MiB payloads, one client, one after another: jobs/s, against
  issue 12's baseline (49.7 jobs/s);
- Redis bytes per queued job vs payload size, ours (inline up to the threshold, then an S3
  reference) vs naive (every payload inline in the stream entry).

    .venv/bin/python bench/bench_e2e.py [--mib 8 64 100] [--repeat 3] [--n 300] [--add-n 200]
        [--json out.json]
    .venv/bin/python bench/bench_e2e.py --add-rate-only 3 [--add-n 200]   # that figure alone

"CP bytes" are the JSON/msgpack bodies of control-plane requests and answers as they cross the
wire (an answer the API gzips, as API Gateway does past its minimumCompressionSize for a client
that accepts gzip, counts compressed; the decoded size is shown beside it); HTTP headers are
counted apart (they depend on the client library and the gateway).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Payload bytes: a random 1 MiB block repeated (nothing on the path compresses), fast to make
# (os.urandom crawls on a loaded VM).
_BLOCK = random.Random(12).randbytes(1 << 20)


def random_bytes(n: int) -> bytes:
    return (_BLOCK * (n // len(_BLOCK) + 1))[:n]


sys.path[:0] = [str(REPO), str(REPO / "functions")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

from tools.localstack import local_stack

NS = "dev"
QUEUE = "bench"
# MAX_PAYLOAD_BYTES is 100 MiB of *encoded* payload: a "100 MiB" job leaves room for msgpack.
MAX_PAYLOAD = 104_857_600 - 64


def payload_size(mib: int) -> int:
    return min(mib * 2**20, MAX_PAYLOAD)


# -- counting control-plane traffic ----------------------------------------------------------------


class Counter:
    """httpx event hooks: every control-plane call with its body and header bytes."""

    def __init__(self):
        self.calls: list[dict] = []
        self._lock = threading.Lock()

    def hooks(self) -> dict:
        return {"request": [self._request], "response": [self._response]}

    def _request(self, request) -> None:
        request.extensions["bench_start"] = {
            "method": request.method,
            "path": request.url.path,
            "req_body": len(request.content or b""),
            "req_headers": sum(len(k) + len(v) + 4 for k, v in request.headers.raw),
        }

    def _response(self, response) -> None:
        response.read()
        entry = dict(response.request.extensions.get("bench_start", {}))
        entry.update(
            status=response.status_code,
            resp_body=response.num_bytes_downloaded,  # as it crossed the wire (maybe gzipped)
            resp_body_decoded=len(response.content or b""),
            resp_headers=sum(len(k) + len(v) + 4 for k, v in response.headers.raw),
        )
        with self._lock:
            self.calls.append(entry)

    def take(self) -> list[dict]:
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


def summarize_calls(calls: list[dict]) -> dict:
    return {
        "calls": len(calls),
        "body_bytes": sum(c["req_body"] + c["resp_body"] for c in calls),
        "decoded_body_bytes": sum(c["req_body"] + c["resp_body_decoded"] for c in calls),
        "header_bytes": sum(c["req_headers"] + c["resp_headers"] for c in calls),
        "routes": [f"{c['method']} {c['path']} -> {c['status']}" for c in calls],
    }


# -- the stack --------------------------------------------------------------------------------------


def clients(stack, counter_c: Counter, counter_d: Counter):
    import httpx

    from payloadstore import Client

    tokens = stack.tokens[NS]

    def make(token: str, counter: Counter):
        return Client(
            stack.endpoint,
            token,
            NS,
            http=httpx.Client(
                timeout=httpx.Timeout(60.0, connect=10.0), event_hooks=counter.hooks()
            ),
            progress=False,
        )

    return make(tokens["client_token"], counter_c), make(tokens["daemon_token"], counter_d)


def identity(x):
    return x


# -- SDK vs curl, and CP calls per job ---------------------------------------------------------------


def curl(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sS", "--fail", "-H", "Expect:", *args], check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def cp_post(stack, token: str, path: str, **kwargs):
    import httpx

    r = httpx.post(
        stack.endpoint + path, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs
    )
    r.raise_for_status()
    return r.json()


def single_put(stack, tokens: dict, size: int, crc: str) -> dict:
    """curl's baseline: one presigned PUT of the whole body. Up to MULTIPART_THRESHOLD the
    control plane's own; above it (the SDK goes multipart there) one signed the same way (size,
    type and CRC64NVME signed in, the checksum the SDK's uploads carry, so the emulator checks
    the same for both) with the local operator key, to the same emulator."""
    grant = cp_post(
        stack,
        tokens["client_token"],
        f"/v1/namespaces/{NS}/payloads/presign",
        json={"op": "put", "size": size, "kind": "args", "crc64nvme": crc},
    )
    if grant.get("url"):
        return grant
    from payloadstore_controlplane.store import sigv4
    from payloadstore_controlplane.store.s3.signer import SigV4Presigner
    from payloadstore_devstack.s3_credentials import LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY

    headers = {
        "Content-Length": str(size),
        "Content-Type": "application/msgpack",
        "x-amz-checksum-crc64nvme": crc,
        "x-amz-sdk-checksum-algorithm": "CRC64NVME",
    }
    key = f"payloads/bench-curl/{uuid.uuid4().hex}"
    with sigv4.invocation_running_as((LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY, None)):
        url = SigV4Presigner(stack.region, stack.moto.endpoint).url(
            "PUT", stack.bucket, key, 900, headers
        )
    return {"url": url, "headers": headers}


def sdk_vs_curl(stack, sizes_mib: list[int], repeat: int) -> dict:

    from payloadstore import _checksum, codec
    from payloadstore.daemon import Daemon

    counter_c, counter_d = Counter(), Counter()
    client, daemon_client = clients(stack, counter_c, counter_d)
    daemon = Daemon(
        daemon_client,
        QUEUE,
        wait_s=1.0,
        check_health=False,
        progress=False,
        install_signal_handlers=False,
    )
    queue = client.queue(QUEUE)
    scratch_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    scratch = Path(tempfile.mkdtemp(prefix="bench-e2e-", dir=scratch_root))
    tokens = stack.tokens[NS]

    def one_job(payload: bytes) -> tuple[float, float, list, list, object]:
        counter_c.take(), counter_d.take()
        started = time.perf_counter()
        job = queue.add(payload)
        t_add = time.perf_counter() - started
        message = daemon.poll()
        if message is None:
            raise SystemExit("the daemon polled nothing")
        daemon.process(message, identity)
        started = time.perf_counter()
        value = job.result(timeout=60)
        t_result = time.perf_counter() - started
        if len(value) != len(payload):
            raise SystemExit("result differs from the payload")
        return t_add, t_result, counter_c.take(), counter_d.take(), job

    one_job(b"warm-up" * 40_000)  # config fetch, connections, imports: not part of a job
    rows, per_job, per_job_multipart = [], None, None
    try:
        for mib in sizes_mib:
            payload = random_bytes(payload_size(mib))
            encoded = codec.encode({"args": [payload], "kwargs": {}})
            body = encoded.tobytes()
            crc = _checksum.to_b64(_checksum.of(body))
            path = scratch / "body"
            path.write_bytes(body)
            samples = {"sdk_add": [], "curl_put": [], "sdk_result": [], "curl_get": []}
            for _ in range(repeat):
                grant = single_put(stack, tokens, len(body), crc)
                headers = [a for k, v in grant["headers"].items() for a in ("-H", f"{k}: {v}")]
                samples["curl_put"].append(curl("-T", str(path), *headers, grant["url"]))
                t_add, t_result, calls_c, calls_d, job = one_job(payload)
                samples["sdk_add"].append(t_add)
                samples["sdk_result"].append(t_result)
                status = client.job(job.job_id).status()
                ref = status.result_ref or {}
                key = ref["key"] if isinstance(ref, dict) else ref.key
                got = cp_post(
                    stack,
                    tokens["client_token"],
                    f"/v1/namespaces/{NS}/payloads/presign",
                    params={"op": "get", "key": key},
                )
                samples["curl_get"].append(curl("-o", "/dev/null", got["url"]))
                # The call goals are of a single-PUT job: the largest one measured. A multipart
                # job (above MULTIPART_THRESHOLD) is shown apart: the smallest one measured
                # (64 MiB by default, the size issue 34's byte goal names).
                calls = {
                    "mib": mib,
                    "client": summarize_calls(calls_c),
                    "daemon": summarize_calls(calls_d),
                }
                if len(body) <= (client.config.multipart_threshold or len(body)):
                    per_job = calls
                elif per_job_multipart is None or per_job_multipart["mib"] == mib:
                    per_job_multipart = calls
            path.unlink()
            med = {k: statistics.median(v) for k, v in samples.items()}
            rows.append(
                {
                    "mib": mib,
                    "samples": samples,
                    **{f"{k}_s": v for k, v in med.items()},
                    "add_ratio": med["sdk_add"] / med["curl_put"],
                    "result_ratio": med["sdk_result"] / med["curl_get"],
                }
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        client.close()
        daemon_client.close()
    return {"by_size": rows, "per_job": per_job, "per_job_multipart": per_job_multipart}


# -- S3-tier add() rate, one client -------------------------------------------------------------------

# Issue 12's figure on the main branch of the time (before transfers were reworked): one client
# adding 1 MiB jobs one after another through S3. The goal is at least twice that.
ADD_RATE_BASELINE = 49.7
ADD_RATE_MIB = 1


def s3_add_rate(stack, n: int) -> dict:
    """One client, `queue.add()` of a 1 MiB payload `n` times in a row (each one: encode,
    sha256, presign, PUT to S3, enqueue by reference): jobs per second over the whole run."""
    counter = Counter()
    client, other = clients(stack, counter, Counter())
    other.close()
    queue = client.queue(f"{QUEUE}-rate")
    payload = random_bytes(ADD_RATE_MIB << 20)
    try:
        for _ in range(5):  # config fetch, connections, first presign/enqueue
            queue.add(payload)
        counter.take()
        samples = []
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            job = queue.add(payload)
            samples.append(time.perf_counter() - t)
            if job.tier != "s3":
                raise SystemExit(f"a {ADD_RATE_MIB} MiB job went {job.tier}, not through S3")
        elapsed = time.perf_counter() - started
        calls = counter.take()
    finally:
        client.close()
    return {
        "mib": ADD_RATE_MIB,
        "n": n,
        "jobs_per_s": n / elapsed,
        "median_ms": statistics.median(samples) * 1e3,
        "p90_ms": sorted(samples)[int(0.9 * (len(samples) - 1))] * 1e3,
        "cp_calls_per_job": len(calls) / n,
        "baseline_jobs_per_s": ADD_RATE_BASELINE,
        "ratio": (n / elapsed) / ADD_RATE_BASELINE,
    }


def add_rate_rounds(rounds: int, n: int) -> None:
    """`s3_add_rate` `rounds` times on one stack: jobs/s, and CPU ms per job (warm-up adds
    included) of this process and of the emulator's, the figure that moves least on a loaded
    machine."""

    def emulator_cpu_s(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp, local_stack(Path(tmp)) as stack:
        pid = stack.moto.proc.pid
        for i in range(rounds):
            cpu, emu = time.process_time(), emulator_cpu_s(pid)
            rate = s3_add_rate(stack, n)
            jobs = n + 5
            print(
                f"round {i}: {rate['jobs_per_s']:.1f} jobs/s, median {rate['median_ms']:.1f} ms, "
                f"CPU per job: bench process {(time.process_time() - cpu) / jobs * 1e3:.1f} ms, "
                f"S3 emulator {(emulator_cpu_s(pid) - emu) / jobs * 1e3:.1f} ms; "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )


# -- round trip through the handlers vs raw redis-py ------------------------------------------------


def _events_module():
    spec = importlib.util.spec_from_file_location("bench_events", REPO / "events" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeContext:
    function_name = "bench"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    memory_limit_in_mb = 512
    aws_request_id = "bench"
    log_group_name = "/aws/lambda/bench"
    log_stream_name = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 10_000


def small_job_round_trip(call, queue: str, ev=None) -> dict:
    """One small job through the handlers, called in-process as Lambda would: enqueue, poll,
    result post, result get. `call(name, handler_module, event, ok_statuses)` invokes each and
    returns its parsed body; the last answer is returned."""
    import msgpack

    from payloadstore_controlplane.handlers import daemon as daemon_fn
    from payloadstore_controlplane.handlers import jobs as jobs_fn

    ev = ev or _events_module()
    payload = base64.b64encode(msgpack.packb({"args": [1, 2], "kwargs": {}})).decode()
    result = base64.b64encode(msgpack.packb(3)).decode()
    enq = call(
        "enqueue",
        jobs_fn,
        ev.event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": NS, "queue": queue},
            body=payload,
            headers={
                "Content-Type": "application/msgpack",
                "Idempotency-Key": uuid.uuid4().hex,
            },
            b64=True,
        ),
        (201,),
    )
    job_id = enq["job_id"]
    polled = call(
        "poll",
        daemon_fn,
        ev.event(
            "POST",
            "/v1/daemon/poll",
            None,
            role="daemon",
            body={"namespace": NS, "queues": [queue], "wait_s": 0, "daemon_id": "bench-d"},
        ),
        (200,),
    )
    post = {"resultInline": result}
    if polled.get("lease"):
        post["lease"] = polled["lease"]
    call(
        "post",
        daemon_fn,
        ev.event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": NS, "job_id": job_id},
            role="daemon",
            body=post,
        ),
        (204,),
    )
    got = call(
        "get",
        jobs_fn,
        ev.event(
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": NS, "job_id": job_id},
            query={"wait": "0"},
        ),
        (200,),
    )
    if got.get("state") != "succeeded":
        raise SystemExit(f"round trip ended {got}")
    return got


def invoke(fn, event, ok, ctx=None):
    """A handler's answer body (parsed), or exit when its status is not one of `ok`."""
    out = fn.lambda_handler(event, ctx or FakeContext())
    if out["statusCode"] not in ok:
        raise SystemExit(f"{event['path']} answered {out['statusCode']}: {out.get('body')}")
    return json.loads(out["body"]) if out.get("body") else None


def handler_round_trips(n: int) -> list[float]:
    ev, ctx = _events_module(), FakeContext()
    queue = f"rt-{uuid.uuid4().hex[:6]}"
    samples = []
    for i in range(n + 10):
        started = time.perf_counter()
        small_job_round_trip(lambda _name, fn, event, ok: invoke(fn, event, ok, ctx), queue, ev)
        if i >= 10:  # the first ones warm caches and connections
            samples.append(time.perf_counter() - started)
    return samples


def raw_round_trips(redis_url: str, n: int) -> list[float]:
    """What a minimal hand-written queue does for the same job with redis-py: a job hash and a
    stream entry, a group read, the result into the hash with the ack, and the read back."""
    import msgpack
    import redis

    r = redis.Redis.from_url(redis_url)
    stream, group = f"raw:{{q}}:{uuid.uuid4().hex[:6]}", "g"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    payload = msgpack.packb({"args": [1, 2], "kwargs": {}})
    result = msgpack.packb(3)
    samples = []
    for i in range(n + 10):
        started = time.perf_counter()
        job_id = uuid.uuid4().hex
        key = f"raw:{{j:{job_id}}}"
        r.hset(key, mapping={"ns": NS, "queue": "q", "state": "queued", "attempts": 0})
        r.xadd(stream, {"job": job_id, "inline": payload})
        entries = r.xreadgroup(group, "c", {stream: ">"}, count=1)
        sid = entries[0][1][0][0]
        r.hset(key, mapping={"state": "running", "attempts": 1})
        r.hset(key, mapping={"state": "succeeded", "result": result})
        r.xack(stream, group, sid)
        r.xdel(stream, sid)
        got = r.hgetall(key)
        if got[b"state"] != b"succeeded":
            raise SystemExit("raw round trip failed")
        if i >= 10:
            samples.append(time.perf_counter() - started)
    r.delete(stream)
    return samples


def round_trip(stack, n: int) -> dict:
    handlers = handler_round_trips(n)
    raw = raw_round_trips(stack.redis.url, n)
    h, r = statistics.median(handlers), statistics.median(raw)
    return {
        "n": n,
        "handlers_us": h * 1e6,
        "raw_us": r * 1e6,
        "ratio": h / r,
        "handlers_samples_us": [x * 1e6 for x in handlers],
        "raw_samples_us": [x * 1e6 for x in raw],
    }


# -- Redis bytes per job vs payload size --------------------------------------------------------------


def call_size(size: int) -> int:
    """Encoded size of `{"args": [<size bytes>], "kwargs": {}}` (msgpack bin 8/16/32 header)."""
    import msgpack

    header = 2 if size < 256 else 3 if size < 65_536 else 5
    return len(msgpack.packb({"args": [b""], "kwargs": {}})) - 2 + header + size


def redis_bytes(stack, sizes: list[int]) -> list[dict]:
    """Bytes per queued job by payload size: ours through the handlers (S3's HEAD answered from
    the issue record, as no object is uploaded), naive as one stream entry holding the payload."""
    import msgpack
    import redis

    from payloadstore_controlplane.handlers import jobs as jobs_fn
    from payloadstore_controlplane.handlers import payloads as payloads_fn
    from payloadstore_controlplane.models.policy import DEFAULT_RETENTION, RETENTION_TAG
    from payloadstore_controlplane.store import s3_objects
    from payloadstore_controlplane.store.records import sha256_hex_to_b64
    from payloadstore_controlplane.store.s3.multipart import UploadedPart
    from payloadstore_controlplane.store.s3.objects import ObjectInfo

    ev = _events_module()
    ctx = FakeContext()
    r = redis.Redis.from_url(stack.redis.url, socket_timeout=300)
    # This stack is the bench's own: no append-only file to write 100 MiB entries into.
    r.config_set("appendonly", "no")
    issued: dict[str, tuple[int, str]] = {}
    uploaded_parts: dict[str, list] = {}
    stubbed = ("head", "tags", "create_multipart", "list_parts", "complete_multipart")
    real = {name: getattr(s3_objects.S3Objects, name) for name in stubbed}

    def head(self, key):
        size, sha = issued[key]
        return ObjectInfo(
            size=size,
            sha256_b64=sha if "-" in sha else sha256_hex_to_b64(sha),
            content_type="application/msgpack",
        )

    # The verifying check reads the retention tag (issue 35): the default policy's, as signed.
    def tags(self, key):
        return {RETENTION_TAG: DEFAULT_RETENTION}

    # Above MULTIPART_THRESHOLD a job is multipart: S3 answers its parts as issued.
    def create_multipart(self, key, content_type, algorithm="SHA256", policy_headers=None):
        return "upload-" + uuid.uuid4().hex * 3

    def list_parts(self, key, upload_id):
        return uploaded_parts[key]

    def complete_multipart(self, key, upload_id, parts):
        return True

    def presign_all_parts(grant: dict, size: int) -> None:
        mp = grant["multipart"]
        specs, parts, digests = [], [], []
        for n in range(1, mp["part_count"] + 1):
            length = min(mp["part_bytes"], size - mp["part_bytes"] * (n - 1))
            digest = hashlib.sha256(os.urandom(8)).digest()
            digests.append(digest)
            specs.append({"number": n, "size": length, "sha256": digest.hex()})
            parts.append(UploadedPart(n, length, f'"{n}"', base64.b64encode(digest).decode()))
        for i in range(0, len(specs), 100):
            out = payloads_fn.lambda_handler(
                ev.event(
                    "POST",
                    "/v1/namespaces/{ns}/payloads/parts",
                    {"ns": NS},
                    body={"job_id": grant["job_id"], "parts": specs[i : i + 100]},
                ),
                ctx,
            )
            if out["statusCode"] != 200:
                raise SystemExit(f"parts answered {out['statusCode']}: {out.get('body')}")
        composite = base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode()
        uploaded_parts[grant["key"]] = parts
        issued[grant["key"]] = (size, f"{composite}-{len(parts)}")

    def used() -> int:
        """What the data set holds: used_memory without the connections' own buffers. A
        connection's query buffer keeps up to a whole 100 MiB command (the naive XADD before) and
        Redis shrinks it later on its own; counted in, it swamps the ~350 B of an S3-tier job
        (negative "bytes per job" after a large size)."""
        info = r.info("memory")
        return int(info["used_memory"]) - sum(
            int(info.get(k, 0))
            for k in (
                "mem_clients_normal",
                "mem_clients_slaves",
                "mem_aof_buffer",
                "mem_replication_backlog",
            )
        )

    def settle() -> None:
        """An empty Redis whose allocator gave back what the previous size used, and whose
        figure no longer moves (a closed connection's buffers are freed at once; Redis shrinks
        an idle one's only in its next cron)."""
        r.flushall(asynchronous=False)
        r.connection_pool.disconnect()
        for _ in range(50):
            if int(r.info("memory").get("lazyfree_pending_objects", 0)) == 0:
                break
            time.sleep(0.1)
        r.memory_purge()
        last = used()
        for _ in range(20):
            time.sleep(0.25)
            now = used()
            if abs(now - last) < 4096:
                return
            last = now

    def enqueue_ours(size: int, queue: str) -> None:
        """One job through the handlers: inline bytes, or presign + enqueue by reference."""
        encoded_len = call_size(size)
        inline = encoded_len <= 262_144
        if inline:
            body = msgpack.packb({"args": [random_bytes(size)], "kwargs": {}})
            out = jobs_fn.lambda_handler(
                ev.event(
                    "POST",
                    "/v1/namespaces/{ns}/queues/{queue}/jobs",
                    {"ns": NS, "queue": queue},
                    body=base64.b64encode(body).decode(),
                    headers={
                        "Content-Type": "application/msgpack",
                        "Idempotency-Key": uuid.uuid4().hex,
                    },
                    b64=True,
                ),
                ctx,
            )
        else:
            sha = uuid.uuid4().hex * 2
            answer = payloads_fn.lambda_handler(
                ev.event(
                    "POST",
                    "/v1/namespaces/{ns}/payloads/presign",
                    {"ns": NS},
                    query={"op": "put", "size": str(encoded_len)},
                    body={"kind": "args", "sha256": sha},
                ),
                ctx,
            )
            grant = json.loads(answer["body"])
            if answer["statusCode"] != 200:
                raise SystemExit(f"presign answered {answer['statusCode']}: {grant}")
            ref = {
                "kind": "s3",
                "bucket": grant["bucket"],
                "key": grant["key"],
                "size": encoded_len,
                "contentType": "application/msgpack",
            }
            if grant.get("multipart"):
                presign_all_parts(grant, encoded_len)
            else:
                issued[grant["key"]] = (encoded_len, sha)
                ref["sha256"] = sha
            out = jobs_fn.lambda_handler(
                ev.event(
                    "POST",
                    "/v1/namespaces/{ns}/queues/{queue}/jobs",
                    {"ns": NS, "queue": queue},
                    body={"payloadRef": ref},
                ),
                ctx,
            )
        if out["statusCode"] not in (200, 201):
            raise SystemExit(f"enqueue answered {out['statusCode']}: {out.get('body')}")

    rows = []
    s3_objects.S3Objects.head = head
    s3_objects.S3Objects.tags = tags
    s3_objects.S3Objects.create_multipart = create_multipart
    s3_objects.S3Objects.list_parts = list_parts
    s3_objects.S3Objects.complete_multipart = complete_multipart
    try:
        # Once per kind before measuring: script loads and other one-time structures are not
        # part of any size's figure.
        for size in (1024, 1 << 20):
            enqueue_ours(size, f"warm-{uuid.uuid4().hex[:6]}")
        for size in sizes:
            # Encoded size of the job's call; S3-tier jobs leave only their reference in Redis,
            # so no bytes are made for them (and they are cheap: N is larger, the figure
            # steadier).
            encoded_len = call_size(size)
            inline = encoded_len <= 262_144
            n_ours = max(2, min(1000, (32 << 20) // size)) if inline else 1000
            n_naive = max(2, min(1000, (32 << 20) // size))
            queue = f"mem-{uuid.uuid4().hex[:6]}"
            settle()
            before = used()
            for _ in range(n_ours):
                enqueue_ours(size, queue)
            ours = (used() - before) / n_ours

            settle()
            before = used()
            for _ in range(n_naive):
                job_id = uuid.uuid4().hex
                body = msgpack.packb({"args": [random_bytes(size)], "kwargs": {}})
                r.hset(f"naive:{{j:{job_id}}}", mapping={"ns": NS, "queue": "q", "state": "queued"})
                r.xadd("naive:{q}", {"job": job_id, "inline": body})
            naive = (used() - before) / n_naive
            rows.append(
                {
                    "payload_bytes": size,
                    "n": n_ours,
                    "n_naive": n_naive,
                    "ours": ours,
                    "naive": naive,
                }
            )
    finally:
        for name, method in real.items():
            setattr(s3_objects.S3Objects, name, method)
    return rows


# -- main -------------------------------------------------------------------------------------------


def collect(
    sizes_mib: list[int], repeat: int, n: int, mem_sizes: list[int], add_n: int = 200
) -> dict:
    if shutil.which("curl") is None:
        raise SystemExit("curl is needed for the baseline (apt-get install curl)")
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp, local_stack(Path(tmp)) as stack:
        out = {"transfers": sdk_vs_curl(stack, sizes_mib, repeat)}
        out["add_rate"] = s3_add_rate(stack, add_n)
        out["round_trip"] = round_trip(stack, n)
        out["redis_bytes"] = redis_bytes(stack, mem_sizes)
    return out


MEM_SIZES = [1024, 16 << 10, 200 << 10, 1 << 20, 8 << 20, 64 << 20, MAX_PAYLOAD]


def report(out: dict) -> str:
    lines = []
    per_job = out["transfers"]["per_job"]
    multipart = out["transfers"].get("per_job_multipart")
    if multipart:
        for side in ("client", "daemon"):
            s = multipart[side]
            lines.append(
                f"CP per {multipart['mib']} MiB multipart job, {side}: {s['calls']} calls, "
                f"{s['body_bytes']:,} B bodies on the wire ({s['decoded_body_bytes']:,} B "
                "decoded): " + "; ".join(s["routes"])
            )
    if per_job:
        for side in ("client", "daemon"):
            s = per_job[side]
            lines.append(
                f"CP per {per_job['mib']} MiB S3-tier job, {side}: {s['calls']} calls, "
                f"{s['body_bytes']:,} B bodies on the wire ({s['decoded_body_bytes']:,} B decoded; "
                f"+{s['header_bytes']:,} B headers): " + "; ".join(s["routes"])
            )
        total = per_job["client"]["body_bytes"] + per_job["daemon"]["body_bytes"]
        decoded = sum(per_job[side]["decoded_body_bytes"] for side in ("client", "daemon"))
        lines.append(
            f"CP body bytes, whole life of the job: {total:,} B on the wire ({decoded:,} B decoded)"
        )
    lines.append("size     queue.add  curl -T  ratio   result()  curl GET  ratio  (medians, s)")
    for r in out["transfers"]["by_size"]:
        lines.append(
            f"{r['mib']:>4} MiB {r['sdk_add_s']:>9.3f} {r['curl_put_s']:>8.3f} {r['add_ratio']:>5.2f}x "
            f"{r['sdk_result_s']:>9.3f} {r['curl_get_s']:>9.3f} {r['result_ratio']:>5.2f}x"
        )
    rate = out.get("add_rate")
    if rate:
        lines.append(
            f"S3-tier queue.add() of {rate['mib']} MiB, one client, {rate['n']} in a row: "
            f"{rate['jobs_per_s']:.1f} jobs/s (median {rate['median_ms']:.1f} ms, p90 "
            f"{rate['p90_ms']:.1f} ms, {rate['cp_calls_per_job']:.0f} CP calls each); issue 12's "
            f"baseline {rate['baseline_jobs_per_s']} jobs/s, ratio {rate['ratio']:.2f}x"
        )
    rt = out["round_trip"]
    lines.append(
        f"small job round trip, median of {rt['n']}: handlers {rt['handlers_us']:,.0f} us, "
        f"raw redis-py {rt['raw_us']:,.0f} us, ratio {rt['ratio']:.2f}x"
    )
    for row in out["redis_bytes"]:
        lines.append(
            f"Redis bytes per queued job, payload {row['payload_bytes']:>11,} B: ours "
            f"{row['ours']:>13,.0f}  naive {row['naive']:>13,.0f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[8, 64, 100])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--add-n", type=int, default=200, help="1 MiB adds for the jobs/s figure")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--add-rate-only",
        type=int,
        metavar="ROUNDS",
        default=0,
        help="only the 1 MiB add rate, ROUNDS times on one stack, with CPU per job of this "
        "process (SDK, gateway, handlers) and of the S3 emulator",
    )
    args = parser.parse_args()
    if args.add_rate_only:
        add_rate_rounds(args.add_rate_only, args.add_n)
        return
    out = collect(args.mib, args.repeat, args.n, MEM_SIZES, args.add_n)
    print(report(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
