"""The python3.13 Lambda base image `sam local invoke --invoke-image` runs.

AWS's own `public.ecr.aws/lambda/python:3.13` is used where the engine already has it or (on the
machine's own Docker only) can pull it. Otherwise an equivalent is built once from Debian
packages: `debootstrap --variant=minbase --include=python3 trixie` (Python 3.13, the runtime's
minor version, so the layer's compiled bytecode is used as is), `awslambdaric` from PyPI in
/var/runtime/lib, a /var/runtime/bootstrap that runs it, then `docker import`. A stamp file
under build/ records the image id per recipe, so later runs start at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.sam_local.dockerhost import DockerEngine, DockerError
from tools.sam_local.log import say

OFFICIAL_IMAGE = "public.ecr.aws/lambda/python:3.13"
DEBIAN_SUITE = "trixie"  # python3 is 3.13 there
AWSLAMBDARIC = "awslambdaric==4.2.2"
PIP_PLATFORM = "manylinux2014_x86_64"
IMAGE_REPO = "payloadstore/lambda-python"
BASE_IMAGE_ENV = "SAM_LOCAL_BASE_IMAGE"
MIRROR_ENV = "SAM_LOCAL_DEBIAN_MIRROR"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# Lambda's python runtime puts the function code first, then the layers, then the runtime's own
# packages (awslambdaric here; boto3 comes with the project's layer).
BOOTSTRAP = """#!/bin/sh
# Lambda's custom-runtime entry point: the runtime interface client serves $_HANDLER.
export LAMBDA_TASK_ROOT="${LAMBDA_TASK_ROOT:-/var/task}"
export PYTHONPATH="${LAMBDA_TASK_ROOT}:/opt/python:/var/runtime/lib${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
cd "${LAMBDA_TASK_ROOT}" || exit 1
exec /usr/bin/python3 -m awslambdaric "${_HANDLER:-$1}"
"""
IMAGE_CHANGES = [
    "ENV LANG=C.UTF-8",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LAMBDA_TASK_ROOT=/var/task",
    "ENV LAMBDA_RUNTIME_DIR=/var/runtime",
    "WORKDIR /var/task",
    'ENTRYPOINT ["/var/runtime/bootstrap"]',
]
# Left out of the image: nothing at run time reads them.
PRUNE = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "usr/share/info",
)


def recipe_hash() -> str:
    parts = [DEBIAN_SUITE, AWSLAMBDARIC, PIP_PLATFORM, BOOTSTRAP, *IMAGE_CHANGES, *PRUNE]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


# Debian's release names and aliases: an apt source for one of these suites (bare, -updates or
# -backports; never -security, a different archive) is a mirror of the Debian archive.
DEBIAN_SUITES = frozenset(
    {
        "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
        "oldoldstable", "oldstable", "stable", "testing", "unstable",
    }
)  # fmt: skip
APT_ROOT = Path("/")


@dataclass(frozen=True)
class AptSource:
    """One `deb` line of a .list file, or one stanza of a deb822 .sources file."""

    uris: tuple[str, ...]
    suites: tuple[str, ...]
    origin: str  # the file it came from, for messages


def _list_sources(path: Path) -> list[AptSource]:
    """One-line style (`deb [options] uri suite component...`); `deb-src` and comments skipped."""
    found = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        rest = line[4:].strip()
        if rest.startswith("["):  # [arch=amd64 signed-by=...]
            rest = rest.partition("]")[2].strip()
        fields = rest.split()
        if len(fields) >= 2:
            found.append(AptSource((fields[0],), (fields[1],), str(path)))
    return found


def _deb822_sources(path: Path) -> list[AptSource]:
    """deb822 style: stanzas of `Field: value` lines split by blank lines; continuation lines
    start with a space; `Enabled: no` stanzas and other Types are skipped."""
    found = []
    for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
        fields: dict[str, str] = {}
        current = None
        for raw in stanza.splitlines():
            if raw.lstrip().startswith("#"):
                continue
            if raw[:1] in (" ", "\t") and current:
                fields[current] += " " + raw.strip()
                continue
            name, sep, value = raw.partition(":")
            if sep:
                current = name.strip().lower()
                fields[current] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        uris, suites = fields.get("uris", "").split(), fields.get("suites", "").split()
        if uris and suites:
            found.append(AptSource(tuple(uris), tuple(suites), str(path)))
    return found


def apt_sources(root: Path | None = None) -> list[AptSource]:
    """Every enabled `deb` source of the machine, in apt's order: sources.list, then the files
    of sources.list.d (*.list and *.sources) by name."""
    etc = (root or APT_ROOT) / "etc" / "apt"
    found = []
    legacy = etc / "sources.list"
    if legacy.is_file():
        found += _list_sources(legacy)
    parts = etc / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list" and path.is_file():
                found += _list_sources(path)
            elif path.suffix == ".sources" and path.is_file():
                found += _deb822_sources(path)
    return found


def _is_debian_suite(suite: str) -> bool:
    base, _, variant = suite.partition("-")
    return base in DEBIAN_SUITES and variant in ("", "updates", "backports")


def debian_mirror(root: Path | None = None, environ: dict[str, str] | None = None) -> str:
    """The Debian archive this machine's apt already uses (a local mirror or a proxy's, say):
    SAM_LOCAL_DEBIAN_MIRROR when set, else the first URI of the first enabled `deb` source for
    a Debian suite. No host is assumed: a machine with no such source must name one."""
    env = os.environ if environ is None else environ
    if env.get(MIRROR_ENV):
        return env[MIRROR_ENV].rstrip("/")
    sources = apt_sources(root)
    for source in sources:
        if any(_is_debian_suite(s) for s in source.suites):
            return source.uris[0].rstrip("/")
    seen = ", ".join(sorted({s.origin for s in sources})) or "none"
    raise DockerError(
        "no Debian archive among this machine's apt sources (files read: "
        f"{seen}); set {MIRROR_ENV} to a Debian mirror's URL"
    )


def _image_id(engine: DockerEngine, ref: str) -> str | None:
    r = engine.docker("image", "inspect", "--format", "{{.Id}}", ref)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_base_image(engine: DockerEngine, workdir: Path) -> tuple[str, str]:
    """(image reference, one line saying which image and why)."""
    forced = os.environ.get(BASE_IMAGE_ENV)
    if forced:
        if _image_id(engine, forced) is None and engine.docker("pull", forced).returncode != 0:
            raise DockerError(f"{BASE_IMAGE_ENV}={forced}: not present and could not be pulled")
        return forced, f"{forced} (from {BASE_IMAGE_ENV})"
    if _image_id(engine, OFFICIAL_IMAGE):
        return OFFICIAL_IMAGE, f"{OFFICIAL_IMAGE} (AWS's image, already present)"
    if engine.kind == "machine":
        # A developer's own Docker normally reaches public registries; the private engine of a
        # registry-less machine never tries.
        say(f"pulling {OFFICIAL_IMAGE}")
        try:
            pulled = engine.docker("pull", OFFICIAL_IMAGE, timeout=600)
        except subprocess.TimeoutExpired:
            pulled = None
        if pulled is not None and pulled.returncode == 0:
            return OFFICIAL_IMAGE, f"{OFFICIAL_IMAGE} (AWS's image, pulled)"
        say(f"{OFFICIAL_IMAGE} could not be pulled; building one from Debian packages")
    return build_debian_image(engine, workdir)


def build_debian_image(engine: DockerEngine, workdir: Path) -> tuple[str, str]:
    tag = f"{IMAGE_REPO}:3.13-{DEBIAN_SUITE}-{recipe_hash()}"
    stamp = workdir / f"base-image-{recipe_hash()}.stamp"
    workdir.mkdir(parents=True, exist_ok=True)
    current = _image_id(engine, tag)
    if current and stamp.exists() and json.loads(stamp.read_text()).get("id") == current:
        return tag, f"{tag} (built from Debian {DEBIAN_SUITE} packages, reused: {stamp.name})"
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        raise DockerError(
            f"building the base image needs root and debootstrap; or provide {OFFICIAL_IMAGE} "
            f"or set {BASE_IMAGE_ENV}"
        )
    rootfs = workdir / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    mirror = debian_mirror()
    say(f"building {tag}: debootstrap {DEBIAN_SUITE} from {mirror} (once, about 2-3 min)")
    cmd = ["debootstrap", "--variant=minbase", "--include=python3", "--components=main"]
    if os.path.exists(KEYRING):
        cmd.append(f"--keyring={KEYRING}")
    log = workdir / "debootstrap.log"
    with open(log, "wb") as out:
        r = subprocess.run(
            [*cmd, DEBIAN_SUITE, str(rootfs), mirror],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if r.returncode != 0:
        raise DockerError(f"debootstrap failed (exit {r.returncode}); see {log}")
    runtime = rootfs / "var" / "runtime"
    say(f"installing {AWSLAMBDARIC} into /var/runtime/lib")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(runtime / "lib"),
            "--platform",
            PIP_PLATFORM,
            "--python-version",
            "3.13",
            "--implementation",
            "cp",
            "--only-binary=:all:",
            AWSLAMBDARIC,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise DockerError(f"pip install {AWSLAMBDARIC} failed: {r.stderr[-2000:]}")
    # Bytecode from the image's own interpreter (Lambda's file system is read-only).
    subprocess.run(
        ["chroot", str(rootfs), "/usr/bin/python3", "-m", "compileall", "-q", "/var/runtime/lib"],
        capture_output=True,
        check=False,
    )
    bootstrap = runtime / "bootstrap"
    bootstrap.write_text(BOOTSTRAP)
    bootstrap.chmod(0o755)
    for d in ("var/task", "opt"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    for rel in PRUNE:
        target = rootfs / rel
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir()
    say(f"importing {tag}")
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
    )
    changes = [a for c in IMAGE_CHANGES for a in ("--change", c)]
    imported = subprocess.run(
        ["docker", "import", *changes, "-", tag],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        env={**os.environ, **engine.env},
        check=False,
    )
    tar.stdout.close()
    tar.wait()
    if imported.returncode != 0 or tar.returncode != 0:
        raise DockerError(f"docker import failed: {imported.stderr.strip()}")
    shutil.rmtree(rootfs, ignore_errors=True)
    image_id = _image_id(engine, tag)
    stamp.write_text(json.dumps({"tag": tag, "id": image_id, "mirror": mirror}) + "\n")
    size = engine.docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
    mb = int(size) / 1e6 if size.isdigit() else 0
    return tag, f"{tag} (built from Debian {DEBIAN_SUITE} packages now, {mb:.0f} MB)"
