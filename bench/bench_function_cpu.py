"""CPU per call and peak memory of every Lambda function, as Lambda's python3.13 runtime runs them.

Each function group runs as one long-lived "container": a python3.13 process (`-I -S -B`) with
only the staged code asset (/var/task) and the staged dependency layer (/opt/python) on its path,
the deployed environment (tracing on, as `Tracing: Active` runs it, with a sampled trace header
per invocation; EMF metrics printed; Redis AUTH read from a Secrets Manager secret), that imports
its handler once and then answers the invocations this script sends it, one at a time, against a
private redis-server and the local S3/SSM/Secrets Manager emulator. A job goes through the real
sequence (presign, PUT to S3, enqueue, poll, result post, result get), so every call does its
real work.

Per route (median over --rounds calls, warm containers):
- CPU ms: time.process_time() of the container across the handler call (all its threads). On
  Lambda, CPU share scales with memory (1,769 MB = one vCPU), so a call's duration at M MB is
  about CPU ms x 1769 / M when the call is CPU-bound (a waiting poll is not: it is billed for its
  wait);
- wall ms on this machine (2 shared cores: indicative only);
- log bytes: what the handler printed (JSON log lines, EMF metrics), which CloudWatch Logs
  ingests.
Per function: import CPU, and peak RSS (VmHWM) after import + the rounds, and after the
largest calls a function serves (a poll taking 16 inline jobs of 256 KiB, a 256 KiB inline result
posted and read back, a 4 MiB batch enqueue), with Lambda's runtime interface client
(awslambdaric, fetched by pip for the runtime's platform) imported in the same process as on
Lambda: the memory the function needs.

    .venv/bin/python bench/bench_function_cpu.py [--rounds 30] [--wait-s 2] [--json out.json]

`make cost` (tools/cost) reads the JSON this writes to bench/function_cpu.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions"), str(REPO / "bench")]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from bench_layer_cold_import import LocalServices, stage_assets, staged_dirs

from payloadstore_controlplane.routes import FUNCTIONS

DEFAULT_JSON = REPO / "bench" / "function_cpu.json"
NS, QUEUE = "dev", "default"
INLINE_MAX = 256 * 1024
S3_BYTES = 1 << 20  # what is uploaded per S3-tier job here; the control plane never sees bytes
# The runtime interface client of Lambda's managed Python runtimes, imported in each container.
RIC = "awslambdaric==4.2.2"
GROUPS = ("authorizer", "payloads", "jobs", "daemon", "public", "metrics", "renewals")

# One container: imports its handler, then answers invocations read from stdin (answers on a pipe).
WORKER = r"""
import sys, os, json, time, uuid
sys.path[:0] = [{code!r}, {layer!r}]
if {ric!r}:
    # Lambda's runtime interface client lives in the same process as the handler.
    sys.path.append({ric!r})
    import awslambdaric.bootstrap
c0 = time.process_time()
import importlib
def hwm_kb():
    # VmHWM: this process's peak RSS (ru_maxrss would carry the parent's across exec).
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
mod = importlib.import_module({module!r})
import_cpu = time.process_time() - c0
out = os.fdopen({fd}, "w")
out.write(json.dumps({{"import_cpu_ms": import_cpu * 1000,
                      "rss_kb": hwm_kb()}}) + "\n")
out.flush()

class Context:
    function_name = {function!r}
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + {function!r}
    memory_limit_in_mb = 128
    log_group_name = "/aws/lambda/" + {function!r}
    log_stream_name = "bench"
    def __init__(self, timeout_s):
        self.aws_request_id = str(uuid.uuid4())
        self.deadline = time.monotonic() + timeout_s
    def get_remaining_time_in_millis(self):
        return max(0, int((self.deadline - time.monotonic()) * 1000))

for line in sys.stdin:
    event = json.loads(line)
    # What Lambda sets per invocation with active tracing: a sampled trace to attach to.
    os.environ["_X_AMZN_TRACE_ID"] = (
        "Root=1-%08x-%s;Parent=%s;Sampled=1" % (int(time.time()), uuid.uuid4().hex[:24],
                                                 uuid.uuid4().hex[:16]))
    t, c = time.perf_counter(), time.process_time()
    answer = mod.lambda_handler(event, Context({timeout_s}))
    cpu, wall = time.process_time() - c, time.perf_counter() - t
    sys.stdout.flush()
    out.write(json.dumps({{"answer": answer, "cpu_ms": cpu * 1000, "wall_ms": wall * 1000,
                          "rss_kb": hwm_kb()}}) + "\n")
    out.flush()
"""


class Container:
    """One function's warm container (a process of its own)."""

    def __init__(
        self,
        python: str,
        code: Path,
        layer: Path,
        group: str,
        env: dict,
        tmp: Path,
        ric: Path | None,
    ):
        self.group = group
        self.log_path = tmp / f"{group}.log"
        self.log = self.log_path.open("wb")
        read_fd, write_fd = os.pipe()
        timeout_s = 28 if group in ("jobs", "daemon") else 10
        source = WORKER.format(
            code=str(code),
            layer=str(layer),
            module=FUNCTIONS[group].rpartition(".")[0],
            function=f"payloadstore-{group}",
            timeout_s=timeout_s,
            fd=write_fd,
            ric=str(ric) if ric else "",
        )
        self.proc = subprocess.Popen(
            [python, "-I", "-S", "-B", "-c", source],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**env, "AWS_LAMBDA_FUNCTION_NAME": f"payloadstore-{group}"},
            pass_fds=(write_fd,),
            text=True,
        )
        os.close(write_fd)
        self.answers = os.fdopen(read_fd)
        first = self._read()
        self.import_cpu_ms = first["import_cpu_ms"]
        self.rss_import_kb = first["rss_kb"]
        self.rss_kb = first["rss_kb"]

    def _read(self) -> dict:
        line = self.answers.readline()
        if not line:
            self.log.flush()
            raise SystemExit(f"{self.group}: container died:\n{self.log_path.read_text()[-3000:]}")
        return json.loads(line)

    def invoke(self, event: dict) -> dict:
        before = self.log_path.stat().st_size
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(event) + "\n")
        self.proc.stdin.flush()
        got = self._read()
        got["log_bytes"] = self.log_path.stat().st_size - before
        self.rss_kb = max(self.rss_kb, got["rss_kb"])
        return got

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.log.close()


def fixture(name: str) -> dict:
    return json.loads((REPO / "events" / f"{name}.json").read_text())


def api_event(name: str, **changes: Any) -> dict:
    """An events/ fixture with the request changed: body (dict -> JSON, bytes -> base64),
    path (and pathParameters), query, role, headers."""
    event = fixture(name)
    if "body" in changes:
        body = changes.pop("body")
        if isinstance(body, bytes):
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
        elif body is None:
            event["body"], event["isBase64Encoded"] = None, False
        else:
            event["body"], event["isBase64Encoded"] = json.dumps(body), False
    if "job_id" in changes:
        job_id = changes.pop("job_id")
        event["pathParameters"]["job_id"] = job_id
        event["path"] = event["path"].replace("01KB7Z6Q3N4V8W2X5Y9Z0A1B2C", job_id)
    if "query" in changes:
        event["queryStringParameters"] = changes.pop("query")
        event["multiValueQueryStringParameters"] = {
            k: [v] for k, v in (event["queryStringParameters"] or {}).items()
        }
    if "role" in changes:
        event["requestContext"]["authorizer"]["role"] = changes.pop("role")
    for name_, value in changes.pop("headers", {}).items():
        event["headers"][name_] = value
        event["multiValueHeaders"][name_] = [value]
    assert not changes, changes
    event["requestContext"]["requestTimeEpoch"] = int(time.time() * 1000)
    event["requestContext"]["requestId"] = str(uuid.uuid4())
    return event


def status_of(got: dict) -> int:
    answer = got["answer"]
    if isinstance(answer, dict) and "policyDocument" in answer:
        return 0 if answer["policyDocument"]["Statement"][0]["Effect"] == "Allow" else -1
    return answer.get("statusCode", -2) if isinstance(answer, dict) else -2


def body_of(got: dict) -> dict:
    answer = got["answer"]
    text = answer.get("body") or "{}"
    if answer.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    return json.loads(text)


class Bench:
    def __init__(self, containers: dict[str, Container], services: LocalServices, wait_s: float):
        import httpx

        self.c = containers
        self.services = services
        self.wait_s = wait_s
        self.samples: dict[str, list[dict]] = {}
        self.http = httpx.Client(timeout=60)

    def call(self, route: str | None, group: str, event: dict, want: tuple[int, ...]) -> dict:
        got = self.c[group].invoke(event)
        status = status_of(got)
        if status not in want:
            raise SystemExit(f"{route or group}: answered {status}, wanted {want}: {got['answer']}")
        if route:
            self.samples.setdefault(route, []).append(
                {"group": group, **{k: got[k] for k in ("cpu_ms", "wall_ms", "log_bytes")}}
            )
        return got

    # -- one job through each tier -----------------------------------------------------------

    def enqueue_inline(self, route: str | None, data: bytes) -> str:
        event = api_event(
            "enqueue_inline",
            body=data,
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        return body_of(self.call(route, "jobs", event, (200, 201)))["job_id"]

    def upload(self, kind: str, data: bytes, route: str | None, **extra: Any) -> dict:
        import hashlib

        body = {"kind": kind, "sha256": hashlib.sha256(data).hexdigest(), **extra}
        event = api_event(
            "presign_put",
            body=body,
            query={"op": "put", "size": str(len(data))},
            role="daemon" if kind == "result" else "client",
        )
        grant = body_of(self.call(route, "payloads", event, (200,)))
        headers = {str(k): str(v) for k, v in (grant.get("headers") or {}).items()}
        response = self.http.request(
            grant.get("method", "PUT"), grant["url"], content=data, headers=headers
        )
        if response.status_code not in (200, 201, 204):
            raise SystemExit(f"upload to the emulator failed: {response.status_code}")
        return {"bucket": grant["bucket"], "key": grant["key"], "size": len(data)}

    def poll(self, route: str | None, wait_s: float, max_jobs: int | None = None) -> dict:
        body: dict[str, Any] = {
            "namespace": NS,
            "queues": [QUEUE],
            "wait_s": wait_s,
            "daemon_id": "bench-daemon",
        }
        if max_jobs is not None:
            body["max_jobs"] = max_jobs
        return self.call(route, "daemon", api_event("daemon_poll", body=body), (200, 204))

    def post_result(self, route: str | None, job_id: str, lease: str, body: dict) -> None:
        event = api_event("result_post", body={**body, "lease": lease}, job_id=job_id)
        self.call(route, "daemon", event, (200, 204))

    def result_get(self, route: str | None, job_id: str) -> dict:
        event = api_event("result_get", job_id=job_id, query={"wait": "0"})
        return body_of(self.call(route, "jobs", event, (200,)))

    def round(self) -> None:
        token = self.services.token
        event = fixture("authorizer_request")
        event["headers"]["Authorization"] = f"Bearer {token}"
        event["multiValueHeaders"] = {"Authorization": [f"Bearer {token}"]}
        self.call("authorizer (cached token)", "authorizer", event, (0,))
        self.call("config", "public", api_event("config"), (200,))

        # Inline: enqueue, poll, result, read back.
        job_id = self.enqueue_inline("enqueue inline", os.urandom(64))
        polled = body_of(self.poll("poll with job", self.wait_s))
        assert polled["job_id"] == job_id, polled
        self.post_result(
            "result post inline", job_id, polled["lease"], {"resultInline": "gqJvaw=="}
        )
        self.result_get("result get inline", job_id)

        # Result-and-next (issue 34): a result post that also takes the next job (`next`),
        # which the next job's own post then finishes.
        job_id = self.enqueue_inline(None, os.urandom(64))
        polled = body_of(self.poll(None, self.wait_s))
        waiting = self.enqueue_inline(None, os.urandom(64))
        nxt = {"queues": [QUEUE], "max_jobs": 1, "wait_s": 0, "daemon_id": "bench-daemon"}
        event = api_event(
            "result_post",
            body={"resultInline": "gqJvaw==", "lease": polled["lease"], "next": nxt},
            job_id=job_id,
        )
        (handed,) = body_of(self.call("result post inline next", "daemon", event, (200,)))["jobs"]
        assert handed["job_id"] == waiting, handed
        self.post_result(None, waiting, handed["lease"], {"resultInline": "gqJvaw=="})

        # S3 tier: presign, upload, enqueue the reference, poll (a presigned GET in the answer),
        # presign the result's upload, post its reference, read back (a presigned GET).
        ref = self.upload("args", os.urandom(S3_BYTES), "presign put")
        event = api_event("enqueue_ref", body={"payloadRef": ref})
        job_id = body_of(self.call("enqueue s3", "jobs", event, (200, 201)))["job_id"]
        polled = body_of(self.poll("poll with s3 job", self.wait_s))
        assert polled["job_id"] == job_id, polled
        result_ref = self.upload(
            "result",
            os.urandom(S3_BYTES),
            "presign put result",
            job_id=job_id,
            lease=polled["lease"],
        )
        self.post_result("result post s3", job_id, polled["lease"], {"resultRef": result_ref})
        self.result_get("result get s3", job_id)

        # An idle daemon's poll: nothing queued, the whole wait.
        got = self.poll("poll empty (wait)", self.wait_s)
        assert status_of(got) == 204
        self.call("metrics (schedule)", "metrics", fixture("metrics_schedule"), (0, -2, 200))
        # The blob renewer's run with no blob due (its every run but the few that copy): it
        # reads the namespaces and their renewal schedules from Redis (make cost's fixed cost).
        self.call("renewals (schedule)", "renewals", fixture("renewals_schedule"), (-2,))

    def largest(self) -> None:
        """The biggest requests and answers each function handles: its peak memory."""
        big = os.urandom(INLINE_MAX - 64)
        ids = [self.enqueue_inline("enqueue inline 256 KiB", big) for _ in range(16)]
        # One poll answers as many as fit Lambda's 6 MB answer (models/limits.py: 14 of these);
        # the rest come with the next poll.
        got = self.poll("poll max_jobs=16 x 256 KiB (14 fit)", self.wait_s, max_jobs=16)
        jobs = body_of(got)["jobs"]
        while len(jobs) < 16:
            more = body_of(self.poll(None, self.wait_s, max_jobs=16 - len(jobs)))["jobs"]
            assert more, len(jobs)
            jobs += more
        result = base64.b64encode(big).decode()
        for job in jobs:
            self.post_result(
                "result post 256 KiB", job["job_id"], job["lease"], {"resultInline": result}
            )
        for job_id in ids:
            self.result_get("result get 256 KiB", job_id)
        item = {"payloadInline": base64.b64encode(os.urandom(40 * 1024)).decode()}
        event = api_event("enqueue_batch", body={"jobs": [item] * 100})
        self.call("batch enqueue 100 x 40 KiB", "jobs", event, (200, 201, 207))
        drained = self.poll(None, 0, max_jobs=16)
        while status_of(drained) == 200:
            drained = self.poll(None, 0, max_jobs=16)


def install_ric(python: str, target: Path) -> Path | None:
    """Lambda's runtime interface client for the runtime's platform, so that its share of the
    process's memory is counted; None (and a warning) when pip cannot fetch it."""
    from infra.config import PIP_PLATFORM, PYTHON_VERSION

    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--platform", PIP_PLATFORM, "--implementation", "cp",
        "--python-version", PYTHON_VERSION, "--target", str(target), RIC,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"warning: no {RIC}: RSS without it\n{result.stderr[-500:]}", file=sys.stderr)
        return None
    return target


def run(rounds: int, wait_s: float, cdk_out: Path | None) -> dict:
    from infra.bundling import find_runtime_python

    python = find_runtime_python()
    if python is None:
        raise SystemExit("no python3.13 found (set PAYLOADSTORE_LAYER_PYTHON)")
    with tempfile.TemporaryDirectory(prefix="bench-fncpu-") as tmp_s:
        tmp = Path(tmp_s)
        code, layer = staged_dirs(cdk_out) if cdk_out else stage_assets(tmp / "staged")
        ric = install_ric(python, tmp / "ric")
        with LocalServices(tmp) as services:
            env = {
                **services.env,
                # As deployed: metrics flushed as EMF lines, tracing on (Tracing: Active).
                "POWERTOOLS_METRICS_DISABLED": "false",
                "POWERTOOLS_TRACE_DISABLED": "false",
                "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
                # Segments go to a UDP port on loopback where nothing listens.
                "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
                "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            containers: dict[str, Container] = {}
            try:
                for group in GROUPS:
                    containers[group] = Container(python, code, layer, group, env, tmp, ric)
                bench = Bench(containers, services, wait_s)
                bench.round()  # warm-up: first calls create clients and read the secret
                bench.samples.clear()
                for _ in range(rounds):
                    bench.round()
                after_rounds = {g: c.rss_kb for g, c in containers.items()}
                bench.largest()
                return {
                    "python": Path(python).name,
                    "rounds": rounds,
                    "wait_s": wait_s,
                    "runtime_client": RIC if ric else None,
                    "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                    "taken": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "routes": summarize(bench.samples),
                    "functions": {
                        g: {
                            "import_cpu_ms": round(c.import_cpu_ms, 1),
                            "rss_import_mb": round(c.rss_import_kb / 1024, 1),
                            "rss_calls_mb": round(after_rounds[g] / 1024, 1),
                            "rss_peak_mb": round(c.rss_kb / 1024, 1),
                        }
                        for g, c in containers.items()
                    },
                }
            finally:
                for c in containers.values():
                    c.close()


def summarize(samples: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for route, rows in samples.items():
        out[route] = {
            "function": rows[0]["group"],
            "calls": len(rows),
            "cpu_ms": round(statistics.median(r["cpu_ms"] for r in rows), 2),
            "cpu_ms_p90": round(sorted(r["cpu_ms"] for r in rows)[int(len(rows) * 0.9)], 2),
            "wall_ms": round(statistics.median(r["wall_ms"] for r in rows), 1),
            "log_bytes": int(statistics.median(r["log_bytes"] for r in rows)),
        }
    return out


def report(result: dict) -> str:
    lines = [
        (
            f"{result['python']} -I -S -B, staged code + layer, one warm container per function, "
            f"tracing on, EMF on, Redis AUTH; {result['rounds']} rounds, polls wait "
            f"{result['wait_s']:g} s; load {result['load']}; {result['taken']}"
        ),
        f"{'route':<26} {'function':<10} {'CPU ms':>7} {'p90':>6} {'wall ms':>8} {'log B':>6}",
    ]
    for route, r in result["routes"].items():
        lines.append(
            f"{route:<26} {r['function']:<10} {r['cpu_ms']:>7.2f} {r['cpu_ms_p90']:>6.2f} "
            f"{r['wall_ms']:>8.1f} {r['log_bytes']:>6}"
        )
    lines.append(
        f"{'function':<11} {'import CPU':>10} {'RSS import':>11} {'RSS calls':>10} "
        f"{'RSS peak':>9}  (MB; peak after the largest answers)"
    )
    for group, f in result["functions"].items():
        lines.append(
            f"{group:<11} {f['import_cpu_ms']:>8.0f}ms {f['rss_import_mb']:>11.1f} "
            f"{f['rss_calls_mb']:>10.1f} {f['rss_peak_mb']:>9.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--wait-s", type=float, default=2.0, help="the empty poll's wait")
    parser.add_argument("--cdk-out", type=Path, default=None, help="measure a synth output")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    result = run(args.rounds, args.wait_s, args.cdk_out)
    result["command"] = (
        f".venv/bin/python bench/bench_function_cpu.py --rounds {args.rounds} "
        f"--wait-s {args.wait_s:g}"
    )
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))


if __name__ == "__main__":
    main()
