"""python -m tests.races: explore races of the control plane's operations (tests/races/explore.py).

    python -m tests.races --seed 7 --steps 20000                 # single node
    python -m tests.races --topology both --time-s 240           # single node, then a cluster
    python -m tests.races --weight finish-multipart=5 --seed 3   # dwell on multipart results
    python -m tests.races --replay tests/races/found/defect-1-retry-twice.json   # replay one

The last line is `races: N steps, M forced interleavings, V violations`; a violation prints
the seed, the run, and the shrunk sequence of decisions (also appended, as a JSON line, to the
--out file; a line, or a file of one, replays with --replay). Exit status 1 on a violation.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.races", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="default: from the time (printed)")
    ap.add_argument("--steps", type=int, default=2000, help="stop after this many steps")
    ap.add_argument("--time-s", type=float, default=None, help="or after this long (in all)")
    ap.add_argument("--run-length", type=int, default=60, help="decisions chosen per run")
    ap.add_argument(
        "--topology",
        choices=["single", "cluster", "both"],
        default="single",
        help="one redis-server, a local Redis Cluster (3 primaries), or both in turn "
        "(the steps and the time split evenly)",
    )
    ap.add_argument("--cluster", action="store_const", const="cluster", dest="topology")
    ap.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="KEY=W",
        help="an operation's weight factor in every run (also a tier, finish-<how>)",
    )
    ap.add_argument("--replay", type=Path, help="replay the decisions saved in this JSON file")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-s", type=float, default=120.0, help="time for shrinking")
    ap.add_argument(
        "--keep-going",
        action="store_true",
        help="after a violation, go on exploring (each kind is shrunk once)",
    )
    ap.add_argument("--out", type=Path, help="append each failure (JSON lines) here")
    a = ap.parse_args(argv)
    # A time limit's SIGTERM still stops the redis-server and emulator this run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = a.seed if a.seed is not None else int(time.time()) % 100_000
    weights = {k: float(v) for k, v in (w.split("=", 1) for w in a.weight)}

    from tests.races.sched import install_hooks

    install_hooks()
    if a.replay:
        return replay(a.replay, a.topology == "cluster")
    topologies = ["single", "cluster"] if a.topology == "both" else [a.topology]
    share = len(topologies)
    total_steps = total_inter = 0
    found: list[tuple] = []
    for topology in topologies:
        steps, inter, f = explore(
            topology == "cluster",
            seed,
            a.steps // share,
            a.time_s / share if a.time_s else None,
            a,
            weights,
        )
        total_steps, total_inter = total_steps + steps, total_inter + inter
        found += f
        if f and not a.keep_going:
            break
    print(
        f"races: {total_steps} steps, {total_inter} forced interleavings, {len(found)} violations"
    )
    return 1 if found else 0


def replay(path: Path, cluster: bool) -> int:
    from tests.races.explore import Runner
    from tests.races.world import race_stack

    text = path.read_text().strip()
    saved = json.loads(text.splitlines()[0] if text.startswith('{"kind"') else text)
    decisions = saved["decisions"] if isinstance(saved, dict) else saved
    with race_stack(cluster=cluster) as world:
        out = Runner(world, "replay").run(decisions)
    print("\n".join(out.log))
    print(f"violation: {out.violation[0]}: {out.violation[1]}" if out.violation else "no violation")
    return 1 if out.violation else 0


def explore(cluster: bool, seed: int, max_steps: int, time_s: float | None, a, weights):
    from tests.races.explore import Runner, shrink
    from tests.races.world import race_stack

    where = "cluster" if cluster else "single node"
    found: list[tuple] = []
    steps = inter = run = 0
    print(
        f"races: seed {seed}, {where}, up to {max_steps} steps"
        + (f" or {time_s:.0f} s" if time_s else ""),
        flush=True,
    )
    with race_stack(cluster=cluster) as world:
        counter = [0]

        def namespace() -> str:
            counter[0] += 1
            return f"r{counter[0]}"

        started = time.monotonic()
        while steps < max_steps and (time_s is None or time.monotonic() - started < time_s):
            rng = random.Random(f"{seed}:{run}")
            out = Runner(world, namespace(), rng, length=a.run_length, weights=weights).run()
            steps += out.steps
            inter += out.interleavings
            if out.violation:
                kind, detail = out.violation
                if a.keep_going and kind in {f[0] for f in found}:
                    print(f"again {kind} (seed {seed}, run {run})", flush=True)
                    found.append((kind, seed, run, out.decisions))
                    run += 1
                    continue
                headline = (
                    f"VIOLATION {kind} ({where}, seed {seed}, run {run}, after decision "
                    f"{out.at}): {detail}"
                )
                print(headline, flush=True)
                decisions = out.decisions
                if not a.no_shrink:
                    decisions = shrink(world, decisions, kind, namespace, a.shrink_s)
                again = Runner(world, namespace()).run(decisions)
                replays = again.violation is not None and again.violation[0] == kind
                if replays:
                    print(
                        f"shortest sequence found: {len(decisions)} decisions (JSON below; "
                        f"python -m tests.races{' --cluster' if cluster else ''} --replay FILE)"
                    )
                    print(json.dumps(decisions))
                    print("\n".join(again.log))
                else:
                    # The decisions alone did not bring it back: something they do not fix
                    # (the machine's time, a timeout) took part. The run as it happened is all
                    # there is to go on: its own log, and its decisions.
                    print(
                        f"not replayed from its {len(out.decisions)} decisions (replay: "
                        f"{again.violation}); the run as it happened:"
                    )
                    decisions = out.decisions
                    print(json.dumps(decisions))
                    print("\n".join(out.log))
                # Last, so the tail of a CI log says what broke.
                print(f"replayed: {again.violation}", flush=True)
                print(headline, flush=True)
                found.append((kind, seed, run, decisions))
                if a.out:
                    with a.out.open("a") as f:
                        f.write(
                            json.dumps(
                                {
                                    "kind": kind,
                                    "detail": detail,
                                    "seed": seed,
                                    "run": run,
                                    "cluster": cluster,
                                    "replayed": again.violation,
                                    "log": None if replays else out.log,
                                    "decisions": decisions,
                                }
                            )
                            + "\n"
                        )
                if not a.keep_going:
                    break
            run += 1
        print(
            f"({where}, seed {seed}, {run} runs, {time.monotonic() - started:.0f} s: "
            f"{steps} steps, {inter} forced interleavings, {len(found)} violations)",
            flush=True,
        )
    return steps, inter, found


if __name__ == "__main__":
    sys.exit(main())
