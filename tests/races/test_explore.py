"""The race explorer in `make test`: a short seeded exploration (about 400 steps, seconds).

Given the real handlers on our own redis-server (PAYLOADSTORE_REDIS=cluster: a local cluster)
and the S3 emulator, when the explorer interleaves clients, daemons and an operator, then no
invariant breaks at any step (RELIABILITY.md, "The race explorer")."""

from __future__ import annotations

import os
import random

import pytest

from tests.races.explore import Runner
from tests.races.sched import install_hooks
from tests.races.world import race_stack


@pytest.fixture(scope="module")
def world():
    install_hooks()
    with race_stack(cluster=os.environ.get("PAYLOADSTORE_REDIS") == "cluster") as w:
        yield w


def test_a_short_exploration_finds_no_violation(world):
    # Given seeded runs of 60 decisions each (about 400 steps)
    steps = interleavings = 0
    for run in range(7):
        runner = Runner(world, f"x{run}", random.Random(f"make-test:{run}"), length=60)
        # When the explorer chooses and checks every step
        out = runner.run()
        steps += out.steps
        interleavings += out.interleavings
        # Then nothing breaks
        assert out.violation is None, "\n".join([*out.log, f"violation: {out.violation}"])
    assert steps >= 300 and interleavings > 0
