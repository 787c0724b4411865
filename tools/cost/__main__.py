"""`make cost`: measure calls on a local stack, read the stack's shape from its synthesized
template and CPU/memory per call from bench/function_cpu.json, write docs/cost.md, and print
its last line: `cost: idle daemon (concurrency 8) $X/month, 1M inline jobs $Y, ...`.

    .venv/bin/python -m tools.cost [--idle-s 60] [--jobs 20] [--s3-jobs 3] [--out docs/cost.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "docs" / "cost.md"
DEFAULT_BENCH = REPO / "bench" / "function_cpu.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--idle-s", type=float, default=60.0, help="idle daemon window (s)")
    parser.add_argument("--jobs", type=int, default=20, help="inline jobs measured")
    parser.add_argument("--s3-jobs", type=int, default=3, help="100 MiB jobs measured")
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--keep-log",
        action="store_true",
        help="keep the local stack's log in build/cost-measure.log",
    )
    parser.add_argument(
        "--measured-json", type=Path, default=None, help="also write the measured usage"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The control plane comes installed (`make cost` installs [test], which has it).
    sys.path[:0] = [str(REPO)]

    from tools.cost import report
    from tools.cost.measure import measure
    from tools.cost.shape import PROD_CONTEXT, shape_of, synthesize

    started = time.monotonic()
    bench = json.loads(args.bench.read_text())
    shape = shape_of(synthesize())
    prod_shape = shape_of(synthesize(PROD_CONTEXT))
    # The local stack's processes log every call to the stdout they inherit: into a file, so
    # that this command prints its result and nothing else.
    log_path = REPO / "build" / "cost-measure.log" if args.keep_log else Path(os.devnull)
    if args.keep_log:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    saved = os.dup(1)
    with open(log_path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            measured = dataclasses.asdict(measure(args.idle_s, args.jobs, args.s3_jobs))
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
    if args.measured_json:
        args.measured_json.write_text(json.dumps(measured, indent=1) + "\n")
    usage = report.usage_from(measured)
    figures = report.figures(shape, usage, bench, prod_shape)
    args.out.write_text(report.render(shape, usage, bench, measured, figures))
    print(f"wrote {args.out} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(figures.line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
