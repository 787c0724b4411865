"""A reproducible layer (issue 32): every distribution of the Lambda layer is pinned, with its
hashes, in functions/requirements.lock (`make lock`), the build installs from it with
--require-hashes, and the built layer holds exactly what the lock says, on x86_64 and arm64."""

from __future__ import annotations

import re
import tomllib
from email.parser import HeaderParser
from pathlib import Path

import pytest

from infra.bundling import LayerBundling
from infra.config import ARCHITECTURES, LOCK_FILE, REQUIREMENTS_FILE

pytestmark = pytest.mark.infra


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name[extras]==version` line (comments and hashes skipped)."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            found[canonical(m.group(1))] = m.group(3)
    return found


def lock_entries() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of the lock file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in LOCK_FILE.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            current = canonical(m.group(1))
            entries[current] = (m.group(2), [])
        elif current and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            entries[current][1].append(h.group(1))
    return entries


def installed(site: Path) -> dict[str, str]:
    """name -> version of every distribution installed in a layer's python/ directory."""
    dists = {}
    for meta in site.glob("*.dist-info/METADATA"):
        headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        dists[canonical(headers["Name"])] = headers["Version"]
    return dists


def test_the_lock_pins_every_requirement_with_hashes_and_botocore_explicitly():
    wanted = pins(REQUIREMENTS_FILE.read_text())
    locked = lock_entries()
    # Every top-level requirement is in the lock at the version requirements.txt pins (a
    # requirements.txt edited without `make lock` fails here)
    for name, version in wanted.items():
        assert locked.get(name, ("missing",))[0] == version, name
    # botocore is pinned by us, not left to boto3's range (which once let pip pick another)
    assert "botocore" in wanted
    # And every locked distribution, transitive ones included, carries hashes
    assert len(locked) > len(wanted)
    for name, (_, hashes) in locked.items():
        assert hashes, f"{name} has no hash"
    # And the control plane's own distribution (what the local stack runs) pins the same
    project = tomllib.loads((REQUIREMENTS_FILE.parent / "pyproject.toml").read_text())["project"]
    assert pins("\n".join(project["dependencies"])) == wanted


def test_the_layer_is_installed_from_the_lock_with_require_hashes(monkeypatch, tmp_path):
    import subprocess

    from infra import bundling

    seen: list[list[str]] = []
    monkeypatch.setattr(
        bundling.subprocess,
        "run",
        lambda cmd, **kw: seen.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""),
    )
    layer = LayerBundling(LOCK_FILE)
    layer.compiler = None
    layer.build(tmp_path)
    (pip,) = [c for c in seen if "pip" in c]
    assert "--require-hashes" in pip
    assert pip[pip.index("--requirement") + 1] == str(LOCK_FILE)
    # And a changed lock is a new layer asset (never a cached build of the old one)
    other = tmp_path / "requirements.lock"
    other.write_text(LOCK_FILE.read_text() + "\n")
    assert LayerBundling(other).asset_hash() != layer.asset_hash()


def assert_matches_lock(site: Path) -> None:
    got = installed(site)
    want = {name: version for name, (version, _) in lock_entries().items()}
    # Every installed distribution at the lock's version, and nothing the lock does not name
    assert got == want


def test_the_built_x86_64_layer_matches_the_lock(cli_synth):
    # Given the layer `npx cdk synth` built (pip, --require-hashes, for manylinux x86_64)
    layers = [
        cli_synth.outdir / res["Metadata"]["aws:asset:path"]
        for res in cli_synth.template["Resources"].values()
        if res["Type"] == "AWS::Lambda::LayerVersion"
    ]
    (layer,) = layers
    # Then it holds exactly the lock's distributions at the lock's versions
    assert_matches_lock(layer / "python")


@pytest.mark.slow  # ~20 s the first time (pip fetches the aarch64 wheels), cached after
def test_the_lock_builds_the_arm64_layer_too(tmp_path):
    # Given the arm64 layer build (pip --platform manylinux2014_aarch64, --require-hashes)
    layer = LayerBundling(LOCK_FILE, platform=ARCHITECTURES["arm64"])
    layer.try_bundle(str(tmp_path / "out"))
    # Then the lock's hashes cover the aarch64 wheels and the layer matches it as well
    assert_matches_lock(tmp_path / "out" / "python")
