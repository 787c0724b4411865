"""The race explorer in `make test`: every sequence it ever found, replayed
(tests/races/found/*.json: the shrunk sequences of FOUND.md, one per defect; the short
exploration is test_explore.py).

Given the real handlers on our own redis-server (single node: the sequences were found there)
and the S3 emulator, when a found sequence is replayed step by step, then no invariant breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.races.explore import Runner
from tests.races.sched import install_hooks
from tests.races.world import race_stack

FOUND = sorted((Path(__file__).parent / "found").glob("*.json"))


@pytest.fixture(scope="module")
def found_world():
    """Single node: a found sequence replays on the topology it was found on (its steps are
    that client's calls; a cluster client's differ)."""
    install_hooks()
    with race_stack(cluster=False) as w:
        yield w


_runs = iter(range(10**6))


def _namespace() -> str:
    return f"t{next(_runs)}"


@pytest.mark.parametrize("path", FOUND, ids=[p.stem for p in FOUND])
def test_a_found_sequence_replays_without_a_violation(found_world, path):
    saved = json.loads(path.read_text())
    # Given the shrunk sequence that once broke an invariant (its defect: saved["defect"])
    # When it is replayed step by step
    out = Runner(found_world, _namespace()).run(saved["decisions"])
    # Then every invariant holds after every step
    assert out.violation is None, "\n".join([*out.log, f"violation: {out.violation}"])
