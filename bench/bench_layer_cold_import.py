"""Cold start of every API function, as Lambda's python3.13 runtime would see it.

Each sample is a fresh python3.13 process with only the staged code asset (/var/task) and the
staged dependency layer (/opt/python) on sys.path (`-I -S -B`: nothing from this machine's
site-packages, no bytecode written), which imports one handler module and answers one request
(the function's sample event from events/, against a private redis-server and the local
S3/SSM/Secrets Manager emulator; Redis asks for the password the functions read from a secret, as
a deployed stack does, unless --no-redis-auth). Figures per function, median of N:

- import: importing the handler module;
- first request: the first `lambda_handler(event, context)` (clients created on first use);
- cold start = import + first request, the part of Lambda's Init + first Duration that is ours;
  CPU time of the process (time.process_time) is the judged figure: the machine is shared, and
  its wall clock is not comparable between runs;
- process: exec to exit of the whole process, wall and CPU, so the interpreter's own start
  (baseline: `python3.13 -I -S -B -c pass`) and its teardown (which Lambda never runs on the
  request path) are in it.

The assets are staged by infra/bundling.py (the code CDK synth uses, bytecode included) unless
--cdk-out points at a synth output. Also checks that no ColdStart metric line is printed when
POWERTOOLS_METRICS_DISABLED=true.

    .venv/bin/python bench/bench_layer_cold_import.py [-n 10] [--cdk-out cdk.out] [--source-only] [--only authorizer,...]
        [--no-redis-auth] [--baseline-ref COMMIT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from payloadstore_controlplane.routes import FUNCTIONS

# The functions behind the API, each with the sample event of its first request and the status
# that request must answer (admin is invoked by hand, never cold on a request path).
FIRST_REQUEST: dict[str, tuple[str, tuple[int, ...]]] = {
    "payloads": ("presign_put", (200,)),
    "jobs": ("enqueue_inline", (201, 200)),
    "daemon": ("daemon_poll", (200, 204)),
    "public": ("config", (200,)),
    "authorizer": ("authorizer_request", (0,)),  # 0: an Allow policy (not an HTTP answer)
}
GOAL_MS = {"authorizer": 200.0}
DEFAULT_GOAL_MS = 300.0

PROBE = r"""
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
sys.path[:0] = [{code!r}, {layer!r}]
import importlib, json
mod = importlib.import_module({module!r})
t1, c1 = time.perf_counter(), time.process_time()

class Context:
    function_name = {function!r}
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + {function!r}
    memory_limit_in_mb = 512
    aws_request_id = "00000000-0000-0000-0000-0000000000aa"
    log_group_name = "/aws/lambda/bench"
    log_stream_name = "bench"
    def get_remaining_time_in_millis(self):
        return 10000

event = json.loads({event!r})
out = mod.lambda_handler(event, Context())
t2, c2 = time.perf_counter(), time.process_time()
status = out.get("statusCode", 0) if isinstance(out, dict) else -1
if "policyDocument" in out:
    status = 0 if out["policyDocument"]["Statement"][0]["Effect"] == "Allow" else -2
print("\n@@" + json.dumps({{"import": t1 - t0, "first": t2 - t1, "status": status,
                           "import_cpu": c1 - c0, "first_cpu": c2 - c1, "cpu_at_start": c0,
                           "modules": len(sys.modules),
                           "heavy": sorted(m.split(".")[0] for m in ("boto3", "aws_xray_sdk", "pydantic",
                                                        "redis", "botocore.client")
                                           if m in sys.modules)}}))
"""


@dataclass
class Sample:
    import_s: float
    first_s: float
    import_cpu_s: float
    first_cpu_s: float
    process_s: float
    process_cpu_s: float
    status: int
    heavy: list[str]
    stdout: str


def stage_assets(out: Path) -> tuple[Path, Path]:
    """The code asset and the layer exactly as synth stages them (infra/bundling.py)."""
    from infra.bundling import CodeBundling, LayerBundling
    from infra.config import FUNCTIONS_DIR, LOCK_FILE

    code, layer = out / "task", out / "opt"
    CodeBundling(FUNCTIONS_DIR).try_bundle(str(code))
    LayerBundling(LOCK_FILE).try_bundle(str(layer))
    return code, layer / "python"


def staged_dirs(cdk_out: Path) -> tuple[Path, Path]:
    template = json.loads((cdk_out / "PayloadStore-dev.template.json").read_text())
    code = layer = None
    for res in template["Resources"].values():
        path = res.get("Metadata", {}).get("aws:asset:path")
        if res["Type"] == "AWS::Lambda::Function":
            code = cdk_out / path
        elif res["Type"] == "AWS::Lambda::LayerVersion":
            layer = cdk_out / path / "python"
    if code is None or layer is None:
        raise SystemExit(f"no staged function/layer assets in {cdk_out}: run `npx cdk synth` first")
    return code, layer


def first_event(name: str, token: str, ref: str | None = None) -> dict:
    """The function's sample event from events/, of this tree or (ref) of a git commit: a
    baseline's code is asked what that commit's wire said (presign_put's checksum kind, say)."""
    path = f"events/{name}.json"
    if ref is None:
        text = (REPO / path).read_text()
    else:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:{path}"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    event = json.loads(text)
    if name == "daemon_poll":
        body = json.loads(event["body"])
        body["wait_s"] = 0
        event["body"] = json.dumps(body)
    text = json.dumps(event).replace("pst_replace_with_a_minted_token", token)
    return json.loads(text)


def run_probe(python: str, code: Path, layer: Path, group: str, event: dict, env: dict) -> Sample:
    module = FUNCTIONS[group].rpartition(".")[0]
    probe = PROBE.format(
        code=str(code),
        layer=str(layer),
        module=module,
        function=f"payloadstore-{group}",
        event=json.dumps(event),
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # -I -S: nothing from this machine's site-packages; -B: never write bytecode (Lambda's disk
    # is read-only), so a tree without .pyc files compiles on every sample.
    result = subprocess.run(
        [python, "-I", "-S", "-B", "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    process_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0 or "\n@@" not in result.stdout:
        raise SystemExit(
            f"{group}: cold start failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
    head, _, tail = result.stdout.rpartition("\n@@")
    data = json.loads(tail)
    return Sample(
        data["import"],
        data["first"],
        data["import_cpu"],
        data["first_cpu"],
        process_s,
        process_cpu_s,
        data["status"],
        data["heavy"],
        head,
    )


def interpreter_start(python: str, runs: int) -> tuple[float, float]:
    """(wall, cpu) of `python -I -S -B -c pass`, medians."""
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-B", "-c", "pass"], check=True)
        wall.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(wall), statistics.median(cpu)


class LocalServices:
    """redis-server + the S3/SSM/Secrets Manager emulator, a bucket, and one client token.

    redis_auth (the default): Redis asks for a password that the functions read from a Secrets
    Manager secret named by REDIS_AUTH_SECRET, as in a deployed stack (ElastiCache AUTH); a cold
    start there reads that secret on its first request."""

    def __init__(self, tmp: Path, redis_auth: bool = True):
        self.tmp = tmp
        self.redis_auth = redis_auth

    def __enter__(self) -> Self:
        import boto3

        from payloadstore_controlplane.store.tokens import TokenStore
        from payloadstore_devstack.services import (
            MotoServer,
            RedisServer,
            create_payload_bucket,
            local_aws_env,
        )
        from payloadstore_devstack.stack import handler_env

        self.redis = RedisServer(data_dir=self.tmp / "redis", appendonly=False).start()
        self.moto = MotoServer(log_path=self.tmp / "moto.log").start()
        aws = local_aws_env(self.moto.endpoint)
        bucket, token_path = "bench-cold-payloads", "/payloadstore/bench/tokens"
        s3 = boto3.client(
            "s3", endpoint_url=self.moto.endpoint, region_name="us-east-1", **_keys(aws)
        )
        ssm = boto3.client(
            "ssm", endpoint_url=self.moto.endpoint, region_name="us-east-1", **_keys(aws)
        )
        create_payload_bucket(s3, bucket)
        self.token = TokenStore(ssm, token_path).mint("dev", "client")[0]
        env = handler_env(
            redis_url=self.redis.url,
            s3_endpoint=self.moto.endpoint,
            bucket=bucket,
            token_path=token_path,
        )
        env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
        if self.redis_auth:
            import redis

            password = "bench-" + os.urandom(12).hex()
            secrets = boto3.client(
                "secretsmanager",
                endpoint_url=self.moto.endpoint,
                region_name="us-east-1",
                **_keys(aws),
            )
            arn = secrets.create_secret(Name="payloadstore/bench/redis-auth", SecretString=password)
            redis.Redis.from_url(self.redis.url).config_set("requirepass", password)
            env["REDIS_AUTH_SECRET"] = arn["ARN"]
            env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = self.moto.endpoint
        self.env = {
            **env,
            "PATH": os.environ.get("PATH", ""),
            "POWERTOOLS_LOG_LEVEL": "INFO",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "LANG": "C.UTF-8",
            # What Lambda's python3.13 runtime sets (the functions pause garbage collection
            # while their handler imports only there: payloadstore_controlplane/runtime/gcpause.py).
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        }
        return self

    def __exit__(self, *exc) -> None:
        self.moto.stop()
        self.redis.stop()


def _keys(env: dict) -> dict:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


def measure(
    python: str,
    code: Path,
    layer: Path,
    runs: int,
    services: LocalServices,
    only: tuple[str, ...] = (),
) -> dict[str, list[Sample]]:
    return measure_many(python, [code], layer, runs, services, only)[0]


def measure_many(
    python: str,
    codes: list[Path],
    layer: Path,
    runs: int,
    services: LocalServices,
    only: tuple[str, ...] = (),
    refs: list[str | None] | None = None,
) -> list[dict[str, list[Sample]]]:
    """Samples per code asset, per function. Interleaved (function by function, asset by asset),
    so a burst of load on the shared machine hits every function and asset alike. `refs`: the
    git commit each asset was staged from (None: this tree), whose events/ its requests come
    from."""
    refs = refs if refs is not None else [None] * len(codes)
    out: list[dict[str, list[Sample]]] = [
        {g: [] for g in FIRST_REQUEST if not only or g in only} for _ in codes
    ]
    for _ in range(runs):
        for group, (event_name, statuses) in FIRST_REQUEST.items():
            if group not in out[0]:
                continue
            env = dict(services.env)
            env["AWS_LAMBDA_FUNCTION_NAME"] = f"payloadstore-{group}"
            for code, ref, samples in zip(codes, refs, out, strict=True):
                sample = run_probe(
                    python, code, layer, group, first_event(event_name, services.token, ref), env
                )
                if sample.status not in statuses:
                    raise SystemExit(
                        f"{group} ({code}): first request answered {sample.status}:\n"
                        f"{sample.stdout[-2000:]}"
                    )
                samples[group].append(sample)
    return out


def stage_code_at(ref: str, out: Path) -> Path:
    """The code asset of `functions/` as of git `ref`, staged as synth stages it."""
    from infra.bundling import CodeBundling

    src = out / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "functions"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    code = out / "task"
    CodeBundling(src / "functions").try_bundle(str(code))
    return code


def summarize(samples: dict[str, list[Sample]], baseline: tuple[float, float]) -> list[dict]:
    rows = []
    for group, runs in samples.items():

        def ms(values) -> float:
            return statistics.median(values) * 1000

        rows.append(
            {
                "function": group,
                "import_ms": ms(s.import_s for s in runs),
                "first_ms": ms(s.first_s for s in runs),
                "cold_ms": ms(s.import_s + s.first_s for s in runs),
                "import_cpu_ms": ms(s.import_cpu_s for s in runs),
                "first_cpu_ms": ms(s.first_cpu_s for s in runs),
                "cold_cpu_ms": ms(s.import_cpu_s + s.first_cpu_s for s in runs),
                "cold_cpu_range_ms": (
                    min(s.import_cpu_s + s.first_cpu_s for s in runs) * 1000,
                    max(s.import_cpu_s + s.first_cpu_s for s in runs) * 1000,
                ),
                "process_ms": ms(s.process_s for s in runs),
                "process_cpu_ms": ms(s.process_cpu_s for s in runs),
                "goal_ms": GOAL_MS.get(group, DEFAULT_GOAL_MS),
                "baseline_ms": baseline[0] * 1000,
                "baseline_cpu_ms": baseline[1] * 1000,
                "heavy": runs[0].heavy,
                "cold_start_metric_printed": any("ColdStart" in s.stdout for s in runs),
            }
        )
    return rows


def run(
    runs: int,
    cdk_out: Path | None,
    source_only: bool = False,
    only: tuple[str, ...] = (),
    redis_auth: bool = True,
    baseline_ref: str | None = None,
) -> dict:
    from infra.bundling import find_runtime_python

    python = find_runtime_python()
    if python is None:
        raise SystemExit("no python3.13 found (set PAYLOADSTORE_LAYER_PYTHON)")
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp_s:
        tmp = Path(tmp_s)
        code, layer = staged_dirs(cdk_out) if cdk_out else stage_assets(tmp / "staged")
        with LocalServices(tmp, redis_auth) as services:
            baseline = interpreter_start(python, runs)
            codes, refs = [code], [None]
            if baseline_ref:
                codes.append(stage_code_at(baseline_ref, tmp / "baseline"))
                refs.append(baseline_ref)
            measured = measure_many(python, codes, layer, runs, services, only, refs)
            rows = summarize(measured[0], baseline)
            result = {
                "python": Path(python).name,
                "runs": runs,
                "rows": rows,
                "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                "redis_auth": redis_auth,
            }
            if baseline_ref:
                result["baseline_ref"] = baseline_ref
                result["baseline_rows"] = summarize(measured[1], baseline)
            if source_only:
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                bare_code, bare_layer = tmp / "bare" / "task", tmp / "bare" / "opt" / "python"
                shutil.copytree(code, bare_code, ignore=ignore)
                shutil.copytree(layer, bare_layer, ignore=ignore)
                bare = summarize(
                    measure(python, bare_code, bare_layer, max(runs // 3, 1), services, only),
                    baseline,
                )
                result["source_only"] = bare
    return result


def report(result: dict) -> str:
    rows = result["rows"]
    lines = [
        (
            f"{result['python']} -I -S -B, staged code asset + layer with bytecode, median of "
            f"{result['runs']} fresh processes per function (interleaved); load average "
            f"{result.get('load', '?')}; `-c pass` {rows[0]['baseline_ms']:.0f} ms wall, "
            f"{rows[0]['baseline_cpu_ms']:.0f} ms CPU; "
            + (
                "Redis AUTH from a Secrets Manager secret (as deployed)"
                if result.get("redis_auth", True)
                else "Redis without AUTH (as the local stack)"
            )
        ),
        (
            "CPU time of the process (the judged figure: the machine is shared, wall clock is not"
            " comparable between runs): import, first request, and cold = import + first request"
            " (median of the sums, min-max beside it); wall clock of the same; process = exec to"
            " exit, interpreter start and teardown included."
        ),
        (
            f"{'function':<11} {'import':>7} {'1st req':>8} {'cold CPU':>9} {'min-max':>10} "
            f"{'goal':>6} | {'wall':>7} {'process':>8} {'proc CPU':>9}  heavy modules loaded"
        ),
    ]
    for r in rows:
        mark = "ok" if r["cold_cpu_ms"] <= r["goal_ms"] else "MISSED"
        low, high = r.get("cold_cpu_range_ms", (r["cold_cpu_ms"], r["cold_cpu_ms"]))
        lines.append(
            f"{r['function']:<11} {r.get('import_cpu_ms', 0):>5.0f}ms "
            f"{r.get('first_cpu_ms', 0):>6.0f}ms {r['cold_cpu_ms']:>7.0f}ms "
            f"{low:>4.0f}-{high:<4.0f}ms {r['goal_ms']:>4.0f}ms | {r['cold_ms']:>5.0f}ms "
            f"{r['process_ms']:>6.0f}ms {r['process_cpu_ms']:>7.0f}ms  "
            f"{','.join(r['heavy']) or '-'} [{mark}]"
        )
    for before in result.get("baseline_rows", []):
        now = next(r for r in rows if r["function"] == before["function"])
        lines.append(
            f"{before['function']:<11} at {result['baseline_ref']} (same run, same layer): import "
            f"{before['import_cpu_ms']:.0f} ms, 1st req {before['first_cpu_ms']:.0f} ms, cold CPU "
            f"{before['cold_cpu_ms']:.0f} ms -> now {now['cold_cpu_ms']:.0f} ms "
            f"({now['cold_cpu_ms'] / before['cold_cpu_ms']:.2f}x)"
        )
    printed = [r["function"] for r in rows if r["cold_start_metric_printed"]]
    lines.append(
        "ColdStart metric with POWERTOOLS_METRICS_DISABLED=true: "
        + (f"PRINTED by {', '.join(printed)}" if printed else "not printed")
    )
    for r in result.get("source_only", []):
        lines.append(
            f"source only (no .pyc) {r['function']:<11} cold start {r['cold_ms']:.0f} ms, "
            f"CPU {r['cold_cpu_ms']:.0f} ms"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cdk-out", type=Path, default=None, help="measure a synth output instead")
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--source-only", action="store_true", help="also measure without .pyc")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated functions (default all: {','.join(FIRST_REQUEST)})",
    )
    parser.add_argument(
        "--no-redis-auth",
        action="store_true",
        help="Redis without a password (the local stack) instead of AUTH from a secret (deployed)",
    )
    parser.add_argument(
        "--baseline-ref",
        default=None,
        help="also measure the code asset of this git commit, interleaved in the same run",
    )
    args = parser.parse_args()
    only = tuple(x for x in args.only.split(",") if x)
    unknown = set(only) - set(FIRST_REQUEST)
    if unknown:
        parser.error(f"unknown function(s): {', '.join(sorted(unknown))}")
    result = run(
        args.n, args.cdk_out, args.source_only, only, not args.no_redis_auth, args.baseline_ref
    )
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
