"""`make smoke` (issue 32): every S3 path once against an endpoint, one line per path and a
closing `smoke: N passed, N failed`. Here against the local gateway; the full run (the 65 MiB
multipart path included) is `.ci/run`'s `make smoke` on a local stack of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from payloadstore_devstack.smoke import PATHS, ref_shape

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
FAST = ("inline", "single", "blob", "cancelled", "retry", "tampered")


def test_make_smoke_passes_every_path_but_multipart_against_an_endpoint(local_gateway):
    gw = local_gateway
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    # When `make smoke` runs against the gateway's endpoint with its tokens
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "smoke",
            f"ENDPOINT={gw.url}",
            f"TOKEN={gw.token('dev', 'client')}",
            f"DAEMON_TOKEN={gw.token('dev', 'daemon')}",
            "NAMESPACE=dev",
            f"SMOKE_ARGS=--only {','.join(FAST)}",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    # Then each path has one `ok` line, in order, saying what it proved, and the summary closes
    lines = [line for line in out.splitlines() if re.match(r"^(ok  |FAIL) ", line)]
    assert [line[5:21].strip() for line in lines] == [PATHS[k] for k in FAST]
    assert all(line.startswith("ok") for line in lines)
    by_path = {line[5:21].strip(): line for line in lines}
    assert "result inline" in by_path["inline"]
    assert "in one presigned PUT each" in by_path["s3 single PUT"]
    assert "one upload of 2.0 MiB, read by both jobs" in by_path["blob, two jobs"]
    assert "JobCancelled" in by_path["cancelled"]
    assert "409 not_uploaded" in by_path["tampered upload"]
    assert out.splitlines()[-1] == f"smoke: {len(FAST)} passed, 0 failed"
    # And the tokens were not echoed into the (CI) log
    assert gw.token("dev", "client") not in out + done.stderr


def test_smoke_with_a_wrong_token_fails_loudly_and_at_once(local_gateway):
    gw = local_gateway
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "payloadstore_devstack.smoke",
            "--endpoint",
            gw.url,
            "--token",
            "pst_wrong",
            "--daemon-token",
            gw.token("dev", "daemon"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("smoke failed: AuthError")
    assert "passed" not in done.stdout


def test_make_smoke_with_an_endpoint_and_no_tokens_prints_its_usage():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "smoke", "ENDPOINT=https://example.invalid/dev"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "usage: make smoke" in done.stderr


def test_a_reference_s_shape_names_its_path():
    assert ref_shape(None) == "inline"
    assert ref_shape({"kind": "inline"}) == "inline"
    assert ref_shape({"kind": "s3", "key": "k"}) == "s3, one PUT"
    assert ref_shape({"key": "k", "multipart": {"part_count": 5}}) == "s3 in 5 parts"
