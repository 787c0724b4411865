"""SDK transfers against curl, on the same presigned URLs, in the same run, by size.

For each size (default 8, 64 and 100 MiB) one object is uploaded and downloaded through the local
S3 emulator (moto behind the presigned-URL rules, loopback HTTP), alternately by the SDK's
transfer functions and by curl, `--repeat` times each; the figures are medians and the ratio is
SDK / curl:

- upload: `payloadstore._transfer.upload` (streamed memoryview slices, the signed headers,
  CRC64NVME signed in as the SDK's presigns sign it) vs `curl -T <file in /dev/shm>` with the
  same headers;
- download: `payloadstore._transfer.download` (readinto one buffer, CRC64NVME verified as the
  slices land) vs `curl -o /dev/null`.

    .venv/bin/python bench/bench_sdk_transfer.py [--mib 8 64 100] [--repeat 3] [--json out.json]
        [--stub-hash]

--stub-hash is a diagnostic: download() skips checking (it reports the CRC it was asked to
verify), which shows what the download costs without its check. Never a figure against a goal.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Payload bytes: a random 1 MiB block repeated (nothing on the path compresses), fast to make
# (os.urandom crawls on a loaded VM).
_BLOCK = random.Random(12).randbytes(1 << 20)


def random_bytes(n: int) -> bytes:
    return (_BLOCK * (n // len(_BLOCK) + 1))[:n]


sys.path[:0] = [str(REPO), str(REPO / "functions")]

BUCKET = "bench-transfer"
CONTENT_TYPE = "application/msgpack"


def presigner(endpoint: str):
    """Presigned URLs as the control plane makes them (the same signer, same headers)."""
    from payloadstore_controlplane.store.s3_objects import S3Objects

    return S3Objects.for_region("us-east-1", endpoint, BUCKET, 900)


def curl(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sS", "--fail", "-H", "Expect:", *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def measure_size(http, objects, size: int, repeat: int, scratch: Path) -> dict:
    from payloadstore import _checksum
    from payloadstore._http import RetryPolicy
    from payloadstore._transfer import download, upload

    data = random_bytes(size)
    crc = _checksum.to_b64(_checksum.of(data))
    path = scratch / f"payload-{size}"
    path.write_bytes(data)
    retry = RetryPolicy()
    key = f"payloads/bench/{size}/args"
    rows: dict[str, list[float]] = {"sdk_up": [], "curl_up": [], "sdk_down": [], "curl_down": []}

    def put_grant() -> dict:
        signed = objects.presign_put(key, size, CONTENT_TYPE, None, crc)
        return {"url": signed.url, "method": "PUT", "headers": signed.headers, "key": key}

    def get_grant() -> dict:
        return {"url": objects.presign_get(key), "method": "GET"}

    for _ in range(repeat):
        grant = put_grant()
        header_args = [a for k, v in grant["headers"].items() for a in ("-H", f"{k}: {v}")]
        rows["curl_up"].append(curl("-T", str(path), *header_args, grant["url"]))
        grant = put_grant()
        started = time.perf_counter()
        upload(
            http,
            grant,
            [memoryview(data)],
            size,
            presign_again=put_grant,
            retry=retry,
            progress=False,
        )
        rows["sdk_up"].append(time.perf_counter() - started)

        rows["curl_down"].append(curl("-o", "/dev/null", get_grant()["url"]))
        grant = get_grant()
        started = time.perf_counter()
        got = download(
            http,
            grant,
            size=size,
            sha256=None,
            crc64nvme=crc,
            presign_again=get_grant,
            retry=retry,
            progress=False,
        )
        rows["sdk_down"].append(time.perf_counter() - started)
        if len(got) != size:
            raise SystemExit(f"download returned {len(got)} bytes, expected {size}")
        del got
    path.unlink()
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "mib": size / 2**20,
        "samples": rows,
        "sdk_up_s": med["sdk_up"],
        "curl_up_s": med["curl_up"],
        "up_ratio": med["sdk_up"] / med["curl_up"],
        "sdk_down_s": med["sdk_down"],
        "curl_down_s": med["curl_down"],
        "down_ratio": med["sdk_down"] / med["curl_down"],
    }


def collect(endpoint: str, sizes_mib: list[int], repeat: int) -> list[dict]:
    """Against a running S3 emulator at `endpoint` (bucket created here)."""
    import boto3
    import httpx

    from payloadstore_devstack.services import create_payload_bucket

    if shutil.which("curl") is None:
        raise SystemExit("curl is needed for the baseline (apt-get install curl)")
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "local"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "local-secret"),
    )
    create_payload_bucket(s3, BUCKET)
    objects = presigner(endpoint)
    scratch = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    scratch = Path(tempfile.mkdtemp(prefix="bench-transfer-", dir=scratch))
    try:
        # The SDK's own kind of client: what Client() creates when none is injected.
        with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as http:
            return [measure_size(http, objects, mib * 2**20, repeat, scratch) for mib in sizes_mib]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(rows: list[dict]) -> str:
    lines = [
        "size      SDK up   curl -T  ratio   SDK down  curl GET  ratio   (medians, s)",
    ]
    for r in rows:
        lines.append(
            f"{r['mib']:>5.0f} MiB {r['sdk_up_s']:>7.3f} {r['curl_up_s']:>8.3f} "
            f"{r['up_ratio']:>6.2f}x {r['sdk_down_s']:>8.3f} {r['curl_down_s']:>9.3f} "
            f"{r['down_ratio']:>6.2f}x"
        )
    return "\n".join(lines)


class _StubHasher:
    """Stands in for _transfer.SliceHasher under --stub-hash: hashes nothing, reports a match."""

    expected = ""

    def __init__(self, view, threaded: bool = False):
        pass

    def advance(self, filled: int) -> None:
        pass

    def finish(self, filled: int) -> str:
        return _StubHasher.expected


def stub_hashing() -> None:
    from payloadstore import _transfer

    real_download = _transfer.download

    def download(*args, **kwargs):
        _StubHasher.expected = kwargs.get("crc64nvme") or (kwargs.get("sha256") or "").lower()
        return real_download(*args, **kwargs)

    _transfer.SliceHasher = _StubHasher  # type: ignore[assignment,misc]
    _transfer.CrcHasher = _StubHasher  # type: ignore[assignment,misc]
    _transfer.download = download


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[8, 64, 100])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--stub-hash", action="store_true", help="diagnostic: download() without its sha256"
    )
    args = parser.parse_args()
    if args.stub_hash:
        stub_hashing()

    from payloadstore_devstack.services import MotoServer, local_aws_env

    with tempfile.TemporaryDirectory() as tmp:
        moto = MotoServer(log_path=Path(tmp) / "moto.log").start()
        try:
            os.environ.update(local_aws_env(moto.endpoint))
            rows = collect(moto.endpoint, args.mib, args.repeat)
        finally:
            moto.stop()
    print(report(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
