"""What the local gateway adds per request, so local latency figures can be read correctly.

Measures, sequentially over one keep-alive HTTP connection:
- a trivial handler through the gateway (HTTP + event build + thread hand-off + JSON round trip),
- the same handler called directly (the floor),
- a protected trivial route (adds the REQUEST authorizer call),
- and, with --stack, GET /v1/config and GET /v1/health on a full local stack (real handlers,
  real authorizer reading SSM from the emulator, token cache on, authorizer cache 0 / 5 s).

Run: .venv/bin/python bench/bench_gateway.py [--n 2000] [--stack]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from payloadstore_devstack.gateway import LocalGateway, ensure_functions_on_path, serve_in_thread

ensure_functions_on_path()
from payloadstore_controlplane.routes import Route


def trivial(event, context):
    return {"statusCode": 200, "body": "{}"}


def allow_all(event, context):
    return {
        "principalId": "bench",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Action": "execute-api:Invoke",
                    "Effect": "Allow",
                    "Resource": event["methodArn"].split("/", 1)[0] + "/*",
                }
            ],
        },
        "context": {"namespace": "dev", "role": "client", "token_id": "bench"},
    }


def timed(fn, n: int) -> list[float]:
    for _ in range(min(100, n)):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def summary(name: str, samples_us: list[float]) -> str:
    s = sorted(samples_us)
    p99 = s[int(len(s) * 0.99) - 1]
    return f"{name:<46} median {statistics.median(s):8.0f} us   p99 {p99:8.0f} us"


def bench_translation(n: int) -> list[str]:
    routes = (
        Route("GET", "/v1/trivial", "t", None, "-"),
        Route("GET", "/v1/namespaces/{ns}/p", "t", ("client",), "-"),
    )
    lines = [summary("direct handler call", timed(lambda: trivial({}, None), n))]
    for cache_s in (0.0, 300.0):
        running = serve_in_thread(
            LocalGateway(
                routes=routes,
                functions={"t": trivial},
                authorizer=allow_all,
                authorizer_cache_s=cache_s,
            ),
            "127.0.0.1",
            0,
        )
        with httpx.Client(base_url=running.url) as http:
            if cache_s == 0:
                lines.append(
                    summary("gateway, public route", timed(lambda: http.get("/v1/trivial"), n))
                )
            lines.append(
                summary(
                    f"gateway, authorizer (cache {cache_s:g} s)",
                    timed(
                        lambda: http.get(
                            "/v1/namespaces/dev/p", headers={"Authorization": "Bearer x"}
                        ),
                        n,
                    ),
                )
            )
        running.stop()
    return lines


def bench_stack(n: int) -> list[str]:
    lines = []
    for cache_s in ("0", "5"):
        tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
        from payloadstore_devstack.services import free_port

        env = {
            "PAYLOADSTORE_PORT": str(free_port()),
            "PAYLOADSTORE_STATE_DIR": str(tmp / "state"),
            "PAYLOADSTORE_STATE_FILE": str(tmp / "devstack.json"),
            "PAYLOADSTORE_AUTHORIZER_CACHE_S": cache_s,
            "PAYLOADSTORE_GATEWAY_LOG_LEVEL": "WARNING",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        import os

        proc = subprocess.Popen(
            [sys.executable, "-m", "payloadstore_devstack"],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not (tmp / "devstack.json").exists():
                time.sleep(0.1)
            state = json.loads((tmp / "devstack.json").read_text())
            auth = {"Authorization": f"Bearer {state['namespaces']['dev']['client_token']}"}
            with httpx.Client(base_url=state["endpoint"]) as http:
                lines.append(
                    summary(
                        f"stack GET /v1/config (authorizer cache {cache_s} s)",
                        timed(lambda auth=auth: http.get("/v1/config", headers=auth), n),
                    )
                )
                if cache_s == "0":
                    lines.append(
                        summary(
                            "stack GET /v1/health (redis + 4 S3 calls)",
                            timed(lambda: http.get("/v1/health"), max(50, n // 10)),
                        )
                    )
        finally:
            proc.send_signal(2)
            proc.wait(30)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--stack", action="store_true")
    args = parser.parse_args()
    print(f"sequential requests, one keep-alive connection, N={args.n}")
    for line in bench_translation(args.n):
        print(line)
    if args.stack:
        for line in bench_stack(max(200, args.n // 4)):
            print(line)


if __name__ == "__main__":
    main()
