"""Where the handlers' CPU goes, from a py-spy recording of bench_hot_path.py: the samples under
a `lambda_handler` frame, each counted once by the first library it enters (redis-py, logging,
Powertools, pydantic, json) or, when it enters none, by the control plane's package its own
code runs in; then the control plane's largest single lines.

    .venv/bin/pip install py-spy     # not a project dependency: a profiler, run by hand
    .venv/bin/py-spy record -r 2000 -f raw -o /tmp/hot.txt -- \\
        .venv/bin/python bench/bench_hot_path.py --n 8000
    .venv/bin/python bench/pyspy_groups.py /tmp/hot.txt
"""

from __future__ import annotations

import collections
import re
import sys

LIBRARIES = (
    ("redis/", "redis-py (and its socket calls)"),
    ("aws_lambda_powertools/logging", "logging"),
    ("logging/", "logging"),
    ("aws_lambda_powertools", "Powertools (not logging)"),
    ("pydantic", "pydantic"),
    ("json/", "json"),
)


def _path(frame: str) -> str:
    found = re.search(r"\((.*?)\)", frame)
    return found.group(1) if found else ""


def groups(lines) -> tuple[int, collections.Counter, collections.Counter]:
    by_group: collections.Counter = collections.Counter()
    own_lines: collections.Counter = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        start = next((i for i, f in enumerate(frames) if f.startswith("lambda_handler ")), None)
        if start is None:
            continue
        n = int(count)
        total += n
        group = None
        for frame in frames[start:]:
            path = _path(frame)
            group = next((name for prefix, name in LIBRARIES if path.startswith(prefix)), None)
            if group:
                break
        if group is None:
            path = _path(frames[-1])
            if path.startswith("payloadstore_controlplane/"):
                group = "control plane: " + path.split("/")[1].split(":")[0].removesuffix(".py")
                own_lines[frames[-1]] += n
            else:
                group = "other (stdlib, generated __init__s)"
        by_group[group] += n
    return total, by_group, own_lines


def main() -> None:
    with open(sys.argv[1]) as f:
        total, by_group, own_lines = groups(f)
    if not total:
        raise SystemExit("no samples under a lambda_handler frame")
    print(f"{total:,} samples under lambda_handler")
    for name, n in by_group.most_common():
        print(f"{n / total * 100:5.1f}%  {name}")
    print("largest single lines of the control plane's own code:")
    for frame, n in own_lines.most_common(5):
        print(f"{n / total * 100:5.2f}%  {frame}")


if __name__ == "__main__":
    main()
