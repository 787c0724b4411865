"""The race explorer in `make test`: a short seeded exploration, and every sequence it ever
found replayed (tests/races/found/*.json: the shrunk sequences of FOUND.md, one per defect).

Given the real handlers on our own redis-server and the S3 emulator,
when the explorer interleaves clients, daemons and an operator (or replays a found sequence),
then no invariant breaks at any step (RELIABILITY.md, "The race explorer")."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tests.races.explore import Runner
from tests.races.sched import install_hooks
from tests.races.world import race_stack

FOUND = sorted((Path(__file__).parent / "found").glob("*.json"))
# Defects of issue 33 whose fix has not landed yet: their replays are expected to fail, each
# for the named defect (the lead's list; remove an entry when its fix lands).
NOT_FIXED_YET: dict[str, str] = {
    "new-a-payload-lost-racing-a-redelivery": "race A of tests/races/FOUND.md (not fixed yet): a "
    "lapsed delivery's payload_lost report racing the redelivery of the same entry",
    "new-d-retry-between-complete-and-settle": "race D of tests/races/FOUND.md (not fixed yet): a "
    "retry between a result post's complete and settle, and a poll taking the old entry back",
}


@pytest.fixture(scope="module")
def world():
    install_hooks()
    # PAYLOADSTORE_REDIS=cluster (as for the rest of the suite): a local cluster of its own.
    with race_stack(cluster=os.environ.get("PAYLOADSTORE_REDIS") == "cluster") as w:
        yield w


_runs = iter(range(10**6))


def _namespace() -> str:
    return f"t{next(_runs)}"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=NOT_FIXED_YET[p.stem], strict=False))
        if p.stem in NOT_FIXED_YET
        else p
        for p in FOUND
    ],
    ids=[p.stem for p in FOUND],
)
def test_a_found_sequence_replays_without_a_violation(world, path):
    saved = json.loads(path.read_text())
    # Given the shrunk sequence that once broke an invariant (its defect: saved["defect"])
    # When it is replayed step by step
    out = Runner(world, _namespace()).run(saved["decisions"])
    # Then every invariant holds after every step
    assert out.violation is None, "\n".join([*out.log, f"violation: {out.violation}"])


def test_a_short_exploration_finds_no_violation(world):
    # Given seeded runs of 60 decisions each (about 400 steps)
    steps = interleavings = 0
    for run in range(7):
        runner = Runner(world, _namespace(), random.Random(f"make-test:{run}"), length=60)
        # When the explorer chooses and checks every step
        out = runner.run()
        steps += out.steps
        interleavings += out.interleavings
        # Then nothing breaks
        assert out.violation is None, "\n".join([*out.log, f"violation: {out.violation}"])
    assert steps >= 300 and interleavings > 0
