"""Cold import time of the deployed code, as Lambda's python3.13 runtime would see it.

Runs a fresh python3.13 per sample with only the staged code asset (/var/task) and the staged
layer (/opt/python) on sys.path, importing every handler module, once with the bytecode the
build ships and once from a copy without it (and with bytecode writing off, as on Lambda's
read-only disk, so every sample compiles again).

    npx cdk synth && .venv/bin/python bench/bench_layer_cold_import.py [--cdk-out cdk.out] [-n 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "functions")]
os.environ.setdefault(
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20"
)  # infra imports aws_cdk

from controlplane.routes import FUNCTIONS

from infra.bundling import find_runtime_python

PROBE = """
import sys, time
sys.path[:0] = [{code!r}, {layer!r}]
t = time.perf_counter()
for m in {modules!r}:
    __import__(m)
print(time.perf_counter() - t)
"""


def staged_dirs(cdk_out: Path) -> tuple[Path, Path]:
    template = json.loads((cdk_out / "PayloadStore.template.json").read_text())
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


def sample(python: str, code: Path, layer: Path, modules: list[str], runs: int) -> list[float]:
    # Environment the handlers read at import, as deployed.
    env = {
        "PATH": os.environ.get("PATH", ""),
        "POWERTOOLS_SERVICE_NAME": "payloadstore",
        "POWERTOOLS_METRICS_NAMESPACE": "PayloadStore",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    probe = PROBE.format(code=str(code), layer=str(layer), modules=modules)
    out = []
    for _ in range(runs):
        # -I -S: nothing from this machine's site-packages; -B: never write bytecode (Lambda's
        # disk is read-only), so a tree without .pyc files compiles on every sample.
        result = subprocess.run(
            [python, "-I", "-S", "-B", "-c", probe],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(f"import failed:\n{result.stderr[-3000:]}")
        out.append(float(result.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cdk-out", type=Path, default=REPO / "cdk.out")
    parser.add_argument("-n", type=int, default=7)
    args = parser.parse_args()
    python = find_runtime_python()
    if python is None:
        raise SystemExit("no python3.13 found (set PAYLOADSTORE_LAYER_PYTHON)")
    code, layer = staged_dirs(args.cdk_out)
    modules = [h.rpartition(".")[0] for h in FUNCTIONS.values()]

    with_pyc = sample(python, code, layer, modules, args.n)
    with tempfile.TemporaryDirectory() as tmp:
        bare_code, bare_layer = Path(tmp) / "task", Path(tmp) / "opt" / "python"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(code, bare_code, ignore=ignore)
        shutil.copytree(layer, bare_layer, ignore=ignore)
        without_pyc = sample(python, bare_code, bare_layer, modules, args.n)

    print(
        f"{Path(python).name} {sys.platform}, handlers: {', '.join(modules)}; median of {args.n} fresh processes"
    )
    print(
        f"cold import, shipped unchecked-hash bytecode: {statistics.median(with_pyc) * 1000:.0f} ms"
    )
    print(
        f"cold import, source only (read-only disk):   {statistics.median(without_pyc) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
