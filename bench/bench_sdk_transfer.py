"""SDK transfer path: time and peak Python heap of moving one large encoded array to and from S3
(moto's server over loopback HTTP) through presigned URLs.

Compares the SDK's streamed upload (memoryview slices, explicit Content-Length) with joining the
payload into one bytes object first, to show the upload adds no full copy of the payload.

    .venv/bin/python bench/bench_sdk_transfer.py [--mib 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
import httpx
import numpy as np
from botocore.config import Config

from payloadstore import codec
from payloadstore._http import RetryPolicy
from payloadstore._transfer import download, upload
from payloadstore.devstack.services import MotoServer, create_payload_bucket, local_aws_env

BUCKET = "bench-sdk"


def measure(fn):
    tracemalloc.start()
    started = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        moto = MotoServer(log_path=Path(tmp) / "moto.log").start()
        try:
            import os

            os.environ.update(local_aws_env(moto.endpoint))
            s3 = boto3.client(
                "s3",
                endpoint_url=moto.endpoint,
                region_name="us-east-1",
                config=Config(signature_version="s3v4"),
            )
            create_payload_bucket(s3, BUCKET)
            run(s3, args.mib, args.repeat)
        finally:
            moto.stop()


def run(s3, mib: int, repeat: int) -> None:
    array = np.random.default_rng(1).standard_normal(mib * 2**20 // 4).astype(np.float32)
    t_encode, peak_encode, encoded = measure(lambda: codec.encode(array))
    t_sha, _, sha = measure(encoded.sha256)
    size = encoded.nbytes
    checksum = base64.b64encode(bytes.fromhex(sha)).decode()
    http = httpx.Client(timeout=300)
    retry = RetryPolicy()

    def grant(key: str, method: str) -> dict:
        if method == "PUT":
            url = s3.generate_presigned_url(
                "put_object",
                Params={
                    "Bucket": BUCKET,
                    "Key": key,
                    "ContentType": codec.CONTENT_TYPE,
                    "ContentLength": size,
                    "ChecksumSHA256": checksum,
                },
                ExpiresIn=900,
            )
            return {
                "url": url,
                "method": "PUT",
                "key": key,
                "headers": {
                    "content-length": str(size),
                    "content-type": codec.CONTENT_TYPE,
                    "x-amz-checksum-sha256": checksum,
                    "x-amz-sdk-checksum-algorithm": "SHA256",
                },
            }
        return {
            "url": s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}),
            "method": "GET",
        }

    rows: dict[str, list[tuple[float, int]]] = {
        "upload (sdk, streamed)": [],
        "upload (joined bytes)": [],
        "download + verify (sdk)": [],
    }
    t_decode = 0.0
    for i in range(repeat):
        key = f"payloads/bench/{i}/args"
        put, put_joined, get = grant(key, "PUT"), grant(key + "-joined", "PUT"), grant(key, "GET")

        def streamed(put=put, key=key):
            return upload(
                http,
                put,
                list(encoded.chunks),
                size,
                presign_again=lambda: grant(key, "PUT"),
                retry=retry,
                progress=False,
            )

        def joined(put=put_joined):
            http.put(
                put["url"], content=encoded.tobytes(), headers=put["headers"]
            ).raise_for_status()

        def fetched(get=get, key=key):
            return download(
                http,
                get,
                size=size,
                sha256=sha,
                presign_again=lambda: grant(key, "GET"),
                retry=retry,
                progress=False,
            )

        t, peak, _ = measure(streamed)
        rows["upload (sdk, streamed)"].append((t, peak))
        t, peak, _ = measure(joined)
        rows["upload (joined bytes)"].append((t, peak))
        t, peak, data = measure(fetched)
        rows["download + verify (sdk)"].append((t, peak))
        assert hashlib.sha256(data).hexdigest() == sha
        t_decode, _, decoded = measure(lambda data=data: codec.decode(data))
        assert np.array_equal(decoded, array)
        del data, decoded

    print(f"payload: float32 array, {size / 2**20:.1f} MiB encoded, repeat={repeat} (medians)")
    print(
        f"encode: {t_encode * 1e3:.1f} ms, peak heap {peak_encode / 2**20:.2f} MiB; sha256: {t_sha * 1e3:.1f} ms "
        f"({size / t_sha / 1e9:.2f} GB/s)"
    )
    for name, samples in rows.items():
        t = statistics.median(s[0] for s in samples)
        peak = statistics.median(s[1] for s in samples)
        print(
            f"{name}: {t * 1e3:.0f} ms ({size / t / 1e9:.2f} GB/s), peak heap {peak / 2**20:.2f} MiB "
            f"({peak / size:.2f}x payload)"
        )
    print(f"decode (zero-copy view): {t_decode * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
