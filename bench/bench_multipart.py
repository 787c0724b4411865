"""Multipart transfers (issue 24) on a local stack of its own, each against its baseline in the
same run:

- SDK `queue.add()` of a numpy array of 64 MiB, 256 MiB and 1 GiB (multipart: each part's
  CRC64NVME taken as it is handed to an uploader, several in flight, the first part URLs from
  the presign answer, then the enqueue that completes the upload and has S3 check it whole) vs
  `curl -T` of the same encoded bytes as one presigned PUT (CRC64NVME signed in, as a single-PUT
  presign signs it) to the same emulator;
- SDK `job.result()` of that array (parallel part-aligned ranges read into one buffer, each
  range's CRC taken as it lands and the CRCs combined, decoded to a zero-copy array) vs `curl`
  GET of the same object in one stream (`-o /dev/null`);
- SDK `job.result_into(path)` of the same result into a file (each worker's range through a
  part-sized buffer of its own, written at its offset) vs `curl` GET of the object into a file
  in the same directory;
- peak RSS of an SDK process reading a 1 GiB result into a file (`job.result_into(path)`),
  above its baseline (the process with the client made and the job found, before the read).

    .venv/bin/python bench/bench_multipart.py [--mib 64 256 1024] [--repeat 2] [--json out.json]

The stack takes payloads up to 2 GiB here (MAX_PAYLOAD_BYTES); MULTIPART_THRESHOLD and
MULTIPART_PART_BYTES are the defaults (64 MiB, 16 MiB). curl's URLs are signed with the local
operator key for a key of their own under payloads/, so both sides go through the same emulator
checks (signature, checksum).
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
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

NS = "dev"
MiB = 1 << 20
MAX_PAYLOAD = 2 << 30
_BLOCK = random.Random(24).randbytes(64 * MiB)


def payload_bytes(size: int) -> bytes:
    """`size` bytes made of windows of 64 random MiB (every 16 MiB part differs)."""
    step = 3 * MiB // 4
    pieces, total, i = [], 0, 0
    while total < size:
        start = (i * step) % (48 * MiB)
        piece = _BLOCK[start : start + min(16 * MiB, size - total)]
        pieces.append(piece)
        total += len(piece)
        i += 1
    return b"".join(pieces)


def curl(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sS", "--fail", "-H", "Expect:", *args], check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def operator_urls(stack, key: str, body_path: Path, size: int) -> tuple[str, list[str], str]:
    """A single presigned PUT (content-length, content-type and CRC64NVME signed, as a
    single-PUT presign signs them: the emulator checks the same checksum for both sides) and a
    GET of `key`, signed with the local operator key."""
    from payloadstore import _checksum
    from payloadstore_controlplane.store import sigv4
    from payloadstore_controlplane.store.s3.signer import SigV4Presigner
    from payloadstore_devstack.s3_credentials import LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY

    crc = _checksum.EMPTY
    with open(body_path, "rb") as f:
        while chunk := f.read(16 * MiB):
            crc = _checksum.update(chunk, crc)
    headers = {
        "Content-Length": str(size),
        "Content-Type": "application/msgpack",
        "x-amz-checksum-crc64nvme": _checksum.to_b64(crc),
        "x-amz-sdk-checksum-algorithm": "CRC64NVME",
    }
    signer = SigV4Presigner(stack.region, stack.moto.endpoint)
    creds = (LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY, None)
    with sigv4.invocation_running_as(creds):
        put = signer.url("PUT", stack.bucket, key, 900, headers)
        get = signer.url("GET", stack.bucket, key, 900)
    curl_headers = [a for k, v in headers.items() for a in ("-H", f"{k}: {v}")]
    return put, curl_headers, get


def identity(x):
    return x


def transfers(stack, sizes_mib: list[int], repeat: int, scratch: Path) -> list[dict]:
    import numpy as np

    from payloadstore import Client, codec
    from payloadstore.daemon import Daemon

    tokens = stack.tokens[NS]
    client = Client(stack.endpoint, tokens["client_token"], NS, progress=False)
    daemon_client = Client(stack.endpoint, tokens["daemon_token"], NS, progress=False)
    queue_name = "bench-mp"
    daemon = Daemon(
        daemon_client,
        queue_name,
        wait_s=1.0,
        check_health=False,
        progress=False,
        install_signal_handlers=False,
    )
    queue = client.queue(queue_name)
    rows = []
    try:
        queue.add(b"warm-up")
        message = daemon.poll()
        if message is not None:
            daemon.process(message, identity)
        for mib in sizes_mib:
            # A numpy array (what the goal names): encoded as a header and a view of
            # its memory, decoded to a zero-copy array over the downloaded buffer.
            payload = np.frombuffer(payload_bytes(mib * MiB), dtype=np.uint8)
            body = codec.encode(payload).tobytes()
            path = scratch / "body"
            path.write_bytes(body)
            del body
            into = scratch / "result.bin"
            curl_into = scratch / "curl.bin"
            samples: dict[str, list[float]] = {
                "sdk_add": [],
                "curl_put": [],
                "sdk_result": [],
                "curl_get": [],
                "sdk_result_into": [],
                "curl_get_file": [],
            }
            job_id = ""
            for _ in range(repeat):
                key = f"payloads/bench-curl/{uuid.uuid4().hex}"
                put, headers, get = operator_urls(stack, key, path, path.stat().st_size)
                samples["curl_put"].append(curl("-T", str(path), *headers, put))
                samples["curl_get"].append(curl("-o", "/dev/null", get))
                samples["curl_get_file"].append(curl("-o", str(curl_into), get))
                curl_into.unlink()
                started = time.perf_counter()
                job = queue.add(payload)
                samples["sdk_add"].append(time.perf_counter() - started)
                message = daemon.poll()
                if message is None:
                    raise SystemExit("the daemon polled nothing")
                daemon.process(message, identity)
                started = time.perf_counter()
                value = job.result(timeout=600)
                samples["sdk_result"].append(time.perf_counter() - started)
                if value.nbytes != payload.nbytes or value[-1] != payload[-1]:
                    raise SystemExit("result differs from the payload")
                del value
                started = time.perf_counter()
                job.result_into(into, timeout=600)
                samples["sdk_result_into"].append(time.perf_counter() - started)
                into.unlink()
                job_id = job.job_id
            path.unlink()
            med = {k: statistics.median(v) for k, v in samples.items()}
            rows.append(
                {
                    "mib": mib,
                    "samples": samples,
                    **{f"{k}_s": v for k, v in med.items()},
                    "add_ratio": med["sdk_add"] / med["curl_put"],
                    "result_ratio": med["sdk_result"] / med["curl_get"],
                    "result_into_ratio": med["sdk_result_into"] / med["curl_get_file"],
                    "job_id": job_id,
                }
            )
            del payload
    finally:
        client.close()
        daemon_client.close()
    return rows


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status")


def rss_child(endpoint: str, token: str, job_id: str, out: str) -> None:
    """In a process of its own: peak RSS above the baseline while reading a result to a file.
    The baseline is the resident set once the client exists and the job was looked up; the
    peak is the kernel's high-water mark (VmHWM), reset to the baseline first (clear_refs 5),
    so nothing the process did before counts."""
    from payloadstore import Client

    client = Client(endpoint, token, NS, progress=False)
    job = client.job(job_id)
    job.status()
    client.config  # noqa: B018 - fetched before the baseline
    Path("/proc/self/clear_refs").write_text("5")
    baseline = _status_kib("VmRSS") * 1024
    started = time.perf_counter()
    written = job.result_into(out, timeout=60)
    elapsed = time.perf_counter() - started
    peak = _status_kib("VmHWM") * 1024
    print(json.dumps({"baseline": baseline, "peak": peak, "bytes": written, "s": elapsed}))


def result_rss(stack, job_id: str, scratch: Path) -> dict:
    out = scratch / "result.bin"
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--rss-child",
            stack.endpoint,
            stack.tokens[NS]["client_token"],
            job_id,
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    got = json.loads(child.stdout.strip().splitlines()[-1])
    got["above_baseline"] = got["peak"] - got["baseline"]
    out.unlink(missing_ok=True)
    return got


def collect(sizes_mib: list[int], repeat: int) -> dict:
    if shutil.which("curl") is None:
        raise SystemExit("curl is needed for the baseline (apt-get install curl)")
    from payloadstore_devstack.services import free_port
    from payloadstore_devstack.stack import DevStack

    os.environ["MAX_PAYLOAD_BYTES"] = str(MAX_PAYLOAD)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mp-"))
    scratch_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    scratch = Path(tempfile.mkdtemp(prefix="bench-mp-", dir=scratch_root))
    stack = DevStack(
        state_dir=tmp / "stack", state_file=tmp / "stack.json", port=free_port()
    ).start()
    try:
        rows = transfers(stack, sizes_mib, repeat, scratch)
        largest = max(rows, key=lambda r: r["mib"])
        rss = result_rss(stack, largest["job_id"], scratch)
        rss["mib"] = largest["mib"]
        return {"by_size": rows, "rss": rss}
    finally:
        stack.stop(snapshot=False)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def report(out: dict) -> str:
    header = (
        "numpy array  queue.add  curl -T  ratio   result()  curl GET  ratio  result_into  "
        "curl -o file  ratio  (medians, s)"
    )
    lines = [header]
    for r in out["by_size"]:
        into = (
            f" {r['sdk_result_into_s']:>11.3f} {r['curl_get_file_s']:>13.3f} "
            f"{r['result_into_ratio']:>5.2f}x"
            if "sdk_result_into_s" in r
            else ""
        )
        lines.append(
            f"{r['mib']:>8} MiB {r['sdk_add_s']:>8.3f} {r['curl_put_s']:>8.3f} "
            f"{r['add_ratio']:>5.2f}x {r['sdk_result_s']:>9.3f} {r['curl_get_s']:>9.3f} "
            f"{r['result_ratio']:>5.2f}x{into}"
        )
    rss = out.get("rss")
    if rss:
        lines.append(
            f"peak RSS of result_into(file) of {rss['mib']} MiB: {rss['above_baseline'] / MiB:.0f} "
            f"MiB above the baseline ({rss['baseline'] / MiB:.0f} MiB before, "
            f"{rss['peak'] / MiB:.0f} MiB peak; {rss['s']:.2f} s)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--rss-child", nargs=4, metavar=("ENDPOINT", "TOKEN", "JOB", "OUT"))
    args = parser.parse_args()
    if args.rss_child:
        rss_child(*args.rss_child)
        return
    out = collect(args.mib, args.repeat)
    print(report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
