"""`make docs` in a test: mkdocs builds docs/ in strict mode, so a broken link fails `make test`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # material's banner about its successor


def test_the_docs_build_strict(tmp_path):
    # Given the docs and mkdocs.yml (strict: true, link and anchor validation as warnings)
    # When mkdocs builds them
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        env=ENV,
        text=True,
        timeout=300,
        check=False,
    )
    # Then the build succeeds, and every page is there
    assert build.returncode == 0, build.stderr
    for page in sorted((REPO / "docs").glob("*.md")):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / name).exists(), name


def test_a_broken_link_fails_the_build(tmp_path):
    # Given a copy of the docs with one link to a page that does not exist
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in (REPO / "docs").glob("*.md"):
        (docs / page.name).write_text(page.read_text())
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](nowhere.md)\n")
    config = (REPO / "mkdocs.yml").read_text()
    (tmp_path / "mkdocs.yml").write_text(config)
    # When mkdocs builds them
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        env=ENV,
        text=True,
        timeout=300,
        check=False,
    )
    # Then the build fails, naming the link
    assert build.returncode != 0
    assert "nowhere.md" in build.stderr
