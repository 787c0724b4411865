"""The README is a front door: short, its links lead somewhere, its code is the examples' code."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
EXAMPLES = ("worker.py", "client.py", "tasks.py")


def quoted_blocks() -> dict[str, str]:
    """README python blocks that start with `# examples/<name>`, by name."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    quoted = {}
    for block in blocks:
        match = re.match(r"# examples/(\S+)", block)
        if match:
            quoted[match.group(1)] = block
    return quoted


def test_the_readme_quotes_each_example_exactly_as_the_file_is():
    # Given the README's python blocks headed `# examples/<file>`
    quoted = quoted_blocks()
    # Then each example is quoted, byte for byte as the file runs
    assert set(quoted) == set(EXAMPLES)
    for name, block in quoted.items():
        assert block == (REPO / "examples" / name).read_text(), f"README quote of {name} drifted"


def test_the_readme_stays_a_front_door():
    # 12 KB: what it is, quick start, two commands, deploying, links; the reference is in docs/
    assert len(README.read_bytes()) <= 12 * 1024


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links no docs"
    missing = [link for link in local if not (REPO / link).exists()]
    assert missing == []
