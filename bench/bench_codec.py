"""Codec speed and memory: payloadstore.codec against a naive msgpack ExtType codec.

Usage:  .venv/bin/python bench/bench_codec.py [--mib 64] [--repeat 5]

Each case runs in a fresh interpreter so peak-memory figures do not inherit earlier cases' pages.
Throughput is payload bytes / best-of-N wall time. "extra peak" is the peak of memory allocated
during the operation beyond what existed before it: tracemalloc for Python/numpy allocations, and
the growth of the process's peak RSS (which also sees torch's allocator).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _reset_peak_rss() -> None:
    # Linux: writing 5 resets the process's peak RSS (VmHWM) to its current RSS.
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _measure(operation, repeat: int) -> dict:
    """Best-of-`repeat` time, then one traced run for memory (the result is kept alive)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        result = operation()
        best = min(best, time.perf_counter() - started)
        del result
    rss_before = _rss_bytes()
    _reset_peak_rss()
    tracemalloc.start()
    baseline, _ = tracemalloc.get_traced_memory()
    result = operation()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = max(0, _peak_rss_bytes() - rss_before)
    del result
    return {"seconds": best, "traced_peak": peak - baseline, "rss_growth": rss_growth}


def _naive_numpy_codec():
    """What ExtType-based codecs do: tobytes() into the ext, ext_hook copies out again."""
    import msgpack
    import numpy as np

    def encode(array):
        header = json.dumps({"dtype": array.dtype.str, "shape": array.shape}).encode()
        payload = len(header).to_bytes(4, "big") + header + array.tobytes()
        return msgpack.packb({"w": msgpack.ExtType(1, payload)}, use_bin_type=True)

    def ext_hook(code, data):
        size = int.from_bytes(data[:4], "big")
        header = json.loads(data[4 : 4 + size])
        return np.frombuffer(data, dtype=header["dtype"], offset=4 + size).reshape(header["shape"])

    def decode(data):
        return msgpack.unpackb(data, ext_hook=ext_hook)

    return encode, decode


def run_case(name: str, mib: int, repeat: int) -> dict:
    import numpy as np

    from payloadstore import codec

    nbytes = mib * MIB
    if name.startswith(("numpy", "naive")):
        value = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    if name == "numpy.encode":
        figures = _measure(lambda: codec.encode({"w": value}), repeat)
    elif name == "numpy.encode+sha256":
        figures = _measure(lambda: codec.encode({"w": value}).sha256(), repeat)
    elif name == "numpy.encode+tobytes":
        figures = _measure(lambda: codec.encode({"w": value}).tobytes(), repeat)
    elif name == "numpy.decode":
        data = codec.encode({"w": value}).tobytes()
        figures = _measure(lambda: codec.decode(data), repeat)
    elif name == "numpy.decode(copy=True)":
        data = codec.encode({"w": value}).tobytes()
        figures = _measure(lambda: codec.decode(data, copy=True), repeat)
    elif name == "naive.encode":
        encode, _ = _naive_numpy_codec()
        figures = _measure(lambda: encode(value), repeat)
    elif name == "naive.decode":
        encode, decode = _naive_numpy_codec()
        data = encode(value)
        figures = _measure(lambda: decode(data), repeat)
    elif name.startswith("torch"):
        import torch

        tensor = torch.randn(nbytes // 2, generator=torch.Generator().manual_seed(0)).to(
            torch.bfloat16
        )
        data = codec.encode(tensor).tobytes()
        if name == "torch.bf16.encode":
            figures = _measure(lambda: codec.encode(tensor), repeat)
        elif name == "torch.bf16.decode(bytes)":
            figures = _measure(lambda: codec.decode(data), repeat)
        else:  # torch.bf16.decode(bytearray)
            buffer = bytearray(data)
            del data
            figures = _measure(lambda: codec.decode(buffer), repeat)
    elif name.startswith("small"):
        import msgpack

        # ~100k small elements and no arrays: the path most inline payloads take.
        value = {f"k{i}": [i, i * 0.5, "v" * (i % 16), None, True] for i in range(100_000)}
        data = msgpack.packb(value, use_bin_type=True)
        nbytes = len(data)
        figures = {
            "small.codec.encode": lambda: _measure(lambda: codec.encode(value), repeat),
            "small.msgpack.packb": lambda: _measure(lambda: msgpack.packb(value), repeat),
            "small.codec.decode": lambda: _measure(lambda: codec.decode(data), repeat),
            "small.msgpack.unpackb": lambda: _measure(lambda: msgpack.unpackb(data), repeat),
        }[name]()
    elif name.startswith("many_arrays"):
        # 1000 arrays of 16 KiB each in a list: per-value overhead of the ext hooks.
        arrays = [np.full(4096, i, dtype=np.float32) for i in range(1000)]
        nbytes = 1000 * 4096 * 4
        data = codec.encode(arrays).tobytes()
        if name == "many_arrays.encode":
            figures = _measure(lambda: codec.encode(arrays), repeat)
        else:
            figures = _measure(lambda: codec.decode(data), repeat)
    else:
        raise SystemExit(f"unknown case {name}")
    figures["name"] = name
    figures["nbytes"] = nbytes
    return figures


CASES = [
    "numpy.encode",
    "naive.encode",
    "numpy.encode+sha256",
    "numpy.encode+tobytes",
    "numpy.decode",
    "naive.decode",
    "numpy.decode(copy=True)",
    "torch.bf16.encode",
    "torch.bf16.decode(bytes)",
    "torch.bf16.decode(bytearray)",
    "many_arrays.encode",
    "many_arrays.decode",
    "small.codec.encode",
    "small.msgpack.packb",
    "small.codec.decode",
    "small.msgpack.unpackb",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the large array cases")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.case:
        print(json.dumps(run_case(options.case, options.mib, options.repeat)))
        return
    print("| case | payload | best time | throughput | extra peak (tracemalloc) | extra peak RSS |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--case",
                case,
                "--mib",
                str(options.mib),
                "--repeat",
                str(options.repeat),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(done.stdout)
        seconds = row["seconds"]
        print(
            f"| {case} | {row['nbytes'] / MIB:.1f} MiB | {seconds * 1e3:.2f} ms "
            f"| {row['nbytes'] / seconds / 1e9:.2f} GB/s | {row['traced_peak'] / MIB:.1f} MiB "
            f"| {row['rss_growth'] / MIB:.1f} MiB |"
        )


if __name__ == "__main__":
    main()
