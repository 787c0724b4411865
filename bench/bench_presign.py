"""Presign, warm, in-process: the control plane's presign (S3Objects.presign_put / presign_get,
signed in-process) against botocore's SigV4 query signer alone on a prepared request (the
baseline), and botocore's full client path (`generate_presigned_url`, what the control plane
used before) for reference. Medians of N, after a warm-up.

    .venv/bin/python bench/bench_presign.py [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]

KEY = "payloads/2026/11/29/01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args"
SHA = "ab" * 32


def timed(fn, n: int) -> float:
    for _ in range(50):
        fn()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def collect(n: int) -> dict:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    import botocore.session
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials

    from payloadstore_controlplane.store.records import sha256_hex_to_b64
    from payloadstore_controlplane.store.s3_objects import S3Objects

    region, bucket = "us-east-1", "payloadstore-payloads"
    ours = S3Objects.for_region(region, None, bucket, 900)
    client = botocore.session.get_session().create_client(
        "s3", region_name=region, config=Config(signature_version="s3v4")
    )
    via_client = S3Objects(client, bucket, 900)
    creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    url = f"https://{bucket}.s3.amazonaws.com/{KEY}"
    b64 = sha256_hex_to_b64(SHA)
    put_headers = {
        "Content-Length": "8388608",
        "Content-Type": "application/msgpack",
        "x-amz-checksum-sha256": b64,
        "x-amz-sdk-checksum-algorithm": "SHA256",
    }

    def signer_alone_put():
        request = AWSRequest(method="PUT", url=url, headers=dict(put_headers))
        S3SigV4QueryAuth(creds, "s3", region, expires=900).add_auth(request)
        return request.url

    def signer_alone_get():
        request = AWSRequest(method="GET", url=url)
        S3SigV4QueryAuth(creds, "s3", region, expires=900).add_auth(request)
        return request.url

    figures = {
        "put_ours_us": timed(
            lambda: ours.presign_put(KEY, 8_388_608, "application/msgpack", SHA), n
        ),
        "put_signer_us": timed(signer_alone_put, n),
        "put_client_us": timed(
            lambda: via_client.presign_put(KEY, 8_388_608, "application/msgpack", SHA), n
        ),
        "get_ours_us": timed(lambda: ours.presign_get(KEY), n),
        "get_signer_us": timed(signer_alone_get, n),
        "get_client_us": timed(lambda: via_client.presign_get(KEY), n),
    }
    figures["put_ratio"] = figures["put_ours_us"] / figures["put_signer_us"]
    figures["get_ratio"] = figures["get_ours_us"] / figures["get_signer_us"]
    figures["n"] = n
    return figures


def report(f: dict) -> str:
    head = f"presign, warm, median of {f['n']}:   ours   signer alone   ratio   botocore client"
    put = (
        f"  PUT (size, type, sha256 signed) {f['put_ours_us']:>6.0f} us "
        f"{f['put_signer_us']:>8.0f} us {f['put_ratio']:>7.2f}x {f['put_client_us']:>9.0f} us"
    )
    get = (
        f"  GET                             {f['get_ours_us']:>6.0f} us "
        f"{f['get_signer_us']:>8.0f} us {f['get_ratio']:>7.2f}x {f['get_client_us']:>9.0f} us"
    )
    return f"{head}\n{put}\n{get}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    f = collect(args.n)
    print(report(f))
    if args.json:
        args.json.write_text(json.dumps(f, indent=2))


if __name__ == "__main__":
    main()
