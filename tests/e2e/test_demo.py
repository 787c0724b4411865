"""`make demo`: both tiers through a daemon, and the bytes each one moved (`make smoke`, every S3
path, is tests/e2e/test_smoke.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from payloadstore_devstack.demo import LARGE_BYTES, run_round_trip

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_large_payload_goes_straight_to_s3_and_never_through_the_cp(local_gateway):
    gw = local_gateway
    # When the demo's two jobs run through a daemon against the local gateway
    small, large = run_round_trip(
        gw.url, gw.token("dev", "client"), gw.token("dev", "daemon"), "dev"
    )
    # Then the small one stays inline both ways and touches no S3 URL
    assert (small.args_tier, small.result_tier, small.s3_bytes) == ("inline", "inline", 0)
    assert small.cp_bytes < 32 * 1024
    # And the 8 MiB one travels up and down S3 twice (args, result) ...
    assert (large.args_tier, large.result_tier) == ("s3", "s3")
    assert large.s3_bytes >= 4 * LARGE_BYTES
    # ... while the control plane saw only a few KiB of JSON for it
    assert large.cp_bytes < 64 * 1024


def test_demo_without_a_running_stack_starts_and_stops_its_own(tmp_path):
    # Given no stack described at the state-file path
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "payloadstore_devstack.demo",
            "--state-file",
            str(tmp_path / "none.json"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Then it starts one, shows both tiers, and exits cleanly
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting one for the demo" in done.stdout
    assert " inline " in done.stdout and " s3 " in done.stdout
