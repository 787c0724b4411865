"""`make sam-local`'s Debian mirror comes from the machine's apt sources, never a host of ours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.sam_local import image
from tools.sam_local.dockerhost import DockerError

DEB822 = """\
Types: deb
# http://archive.example/snapshot/20250520T000000Z
URIs: http://mirror.internal.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.internal.example/debian-security
Suites: bookworm-security
Components: main
"""


def write(root: Path, rel: str, text: str) -> None:
    path = root / "etc" / "apt" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_mirror_is_read_from_a_deb822_sources_file(tmp_path):
    write(tmp_path, "sources.list.d/debian.sources", DEB822)
    assert image.debian_mirror(tmp_path, environ={}) == "http://mirror.internal.example/debian"


def test_the_mirror_is_read_from_a_one_line_sources_list_with_options(tmp_path):
    write(
        tmp_path,
        "sources.list",
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb http://proxy.example:3142/debian-security trixie-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://proxy.example:3142/debian trixie main\n",
    )
    assert image.debian_mirror(tmp_path, environ={}) == "http://proxy.example:3142/debian"


def test_other_archives_disabled_stanzas_and_disabled_files_are_skipped(tmp_path):
    # A third-party repository first by name, a disabled Debian stanza, a renamed-away file
    write(
        tmp_path, "sources.list.d/a-vendor.list", "deb https://vendor.example/apt stable-x main\n"
    )
    write(
        tmp_path,
        "sources.list.d/b-node.sources",
        "Types: deb\nURIs: https://node.example/node_20.x\nSuites: nodistro\nComponents: main\n",
    )
    write(
        tmp_path,
        "sources.list.d/c-off.sources",
        "Types: deb\nEnabled: no\nURIs: http://off.example/debian\nSuites: bookworm\n",
    )
    write(tmp_path, "sources.list.d/d.list.disabled", "deb http://gone.example/debian sid main\n")
    write(tmp_path, "sources.list.d/e-debian.sources", DEB822)
    assert image.debian_mirror(tmp_path, environ={}) == "http://mirror.internal.example/debian"


def test_the_environment_wins_and_no_source_is_an_error_naming_the_variable(tmp_path):
    assert image.debian_mirror(tmp_path, environ={image.MIRROR_ENV: "http://m.example/d/"}) == (
        "http://m.example/d"
    )
    write(tmp_path, "sources.list", "deb http://archive.example/ubuntu noble main\n")
    with pytest.raises(DockerError, match=image.MIRROR_ENV):
        image.debian_mirror(tmp_path, environ={})


def test_the_code_names_no_mirror_host():
    source = Path(image.__file__).read_text()
    assert not re.search(r"https?://[^\s\"'/]*debian", source)
    assert "deb.debian.org" not in source
