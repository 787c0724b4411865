"""Docker-free asset builds: the dependency layer and the function code, both with bytecode.

`Code.from_asset(..., bundling=BundlingOptions(local=...))` runs these in the synth process.
The Docker image named in BundlingOptions is only CDK's fallback when local bundling declines;
ours never declines: it builds or raises, so synth never reaches for Docker.

Bytecode: importing every handler from the staged assets took ~0.7 s with .pyc and ~2 s
without (bench/bench_layer_cold_import.py), and
Lambda's file system is read-only, so the runtime cannot cache what it compiles. We compile with
an interpreter of the runtime's exact minor version in `unchecked-hash` mode: asset zips carry a
fixed timestamp, which would make ordinary (timestamp) .pyc files look stale, while
unchecked-hash .pyc files are trusted as they are. The asset hash covers every input, so a
changed source always produces a new asset with fresh bytecode.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import jsii

from infra.config import PIP_PLATFORM, PYTHON_VERSION, REPO_ROOT

log = logging.getLogger(__name__)

# Bump when the build steps below change, so cached layer builds are not reused.
BUILD_RECIPE_VERSION = "2"
LAYER_PYTHON_ENV = "PAYLOADSTORE_LAYER_PYTHON"
# Finished layer builds, by asset hash, shared by every synth output directory (cdk.out, test
# runs): a second synth with the same requirements copies instead of running pip again.
LAYER_CACHE_ENV = "PAYLOADSTORE_LAYER_CACHE"
DEFAULT_LAYER_CACHE = REPO_ROOT / "build" / "layer-cache"
# Never part of a function asset: tests, local caches, the layer's own input.
CODE_EXCLUDES = (
    "tests",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    "requirements.txt",
    "requirements.lock",
    "*.egg-info",
)


class BundlingError(RuntimeError):
    """An asset could not be built locally."""


def _reports_version(python: str, version: str) -> bool:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_runtime_python(version: str = PYTHON_VERSION) -> str | None:
    """An interpreter of the Lambda runtime's minor version, to compile matching bytecode.

    Looks at $PAYLOADSTORE_LAYER_PYTHON, this interpreter, pyenv's versions, then PATH; each
    candidate is asked for its version (a pyenv shim on PATH may point nowhere).
    """
    candidates: list[str] = []
    if os.environ.get(LAYER_PYTHON_ENV):
        candidates.append(os.environ[LAYER_PYTHON_ENV])
    candidates.append(sys.executable)
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(
        glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin", f"python{version}")),
        reverse=True,
    )
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for python in candidates:
        if _reports_version(python, version):
            return python
    return None


def compile_bytecode(python: str, tree: Path, runtime_dir: str) -> None:
    """Compile every .py under `tree` as the runtime will see it (paths under `runtime_dir`)."""
    cmd = [
        python,
        "-m",
        "compileall",
        "-q",
        "-j",
        "0",
        "--invalidation-mode",
        "unchecked-hash",
        "-s",
        str(tree),
        "-p",
        runtime_dir,
        str(tree),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(
            f"compileall failed in {tree}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        )


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@jsii.implements(cdk.ILocalBundling)
class LayerBundling:
    """pip-installs the lock file (functions/requirements.lock: every distribution pinned, with
    its hashes) for the Lambda platform into `<out>/python`, then compiles it. --require-hashes:
    a file whose hash is not in the lock, or a dependency the lock does not pin, fails the build
    instead of entering the layer (issue 32: boto3's range once let pip pick another botocore)."""

    def __init__(
        self, requirements: Path, python_version: str = PYTHON_VERSION, platform: str = PIP_PLATFORM
    ):
        self.requirements = requirements
        self.python_version = python_version
        self.platform = platform
        self.compiler = find_runtime_python(python_version)

    def asset_hash(self) -> str:
        """Hash of every input: same requirements, platform and recipe -> the cached build is reused."""
        return _digest(
            self.requirements.read_bytes(),
            self.python_version.encode(),
            self.platform.encode(),
            BUILD_RECIPE_VERSION.encode(),
            b"bytecode" if self.compiler else b"source-only",
        )

    def try_bundle(self, output_dir: str, *args, **kwargs) -> bool:
        cache_root = Path(os.environ.get(LAYER_CACHE_ENV) or DEFAULT_LAYER_CACHE)
        cached = cache_root / self.asset_hash()
        if not cached.is_dir():
            building = cache_root / f"{cached.name}.{os.getpid()}.building"
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir(parents=True)
            self.build(building)
            try:
                building.rename(cached)
            except OSError:  # another synth finished the same build first
                shutil.rmtree(building, ignore_errors=True)
        else:
            log.info("reusing cached lambda layer build=%s", cached)
        _link_or_copy_tree(cached, Path(output_dir))
        return True

    def build(self, out: Path) -> None:
        target = out / "python"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--require-hashes",
            "--requirement",
            str(self.requirements),
            "--platform",
            self.platform,
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
            "--target",
            str(target),
        ]
        log.info("building lambda layer python=%s platform=%s", self.python_version, self.platform)
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BundlingError(
                f"pip could not build the layer for python {self.python_version} on {self.platform}:\n"
                f"{result.stderr[-4000:]}"
            )
        # Console scripts are useless in a layer and carry the build machine's interpreter path.
        shutil.rmtree(target / "bin", ignore_errors=True)
        if self.compiler:
            compile_bytecode(self.compiler, target, "/opt/python")
        else:
            print(
                f"warning: no python{self.python_version} found to compile layer bytecode; "
                f"set {LAYER_PYTHON_ENV} (cold starts will be slower)",
                file=sys.stderr,
            )


def _link_or_copy_tree(src: Path, dst: Path) -> None:
    """Hard links when the cache and the output share a file system (instant), copies otherwise.
    Nothing writes into staged assets, so sharing inodes with the cache is safe."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, dirs_exist_ok=True, copy_function=link_or_copy)


@jsii.implements(cdk.ILocalBundling)
class CodeBundling:
    """Copies the `functions/` tree (minus tests and caches) and compiles it for /var/task."""

    def __init__(self, source: Path, python_version: str = PYTHON_VERSION):
        self.source = source
        self.compiler = find_runtime_python(python_version)

    def try_bundle(self, output_dir: str, *args, **kwargs) -> bool:
        out = Path(output_dir)
        shutil.copytree(
            self.source, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*CODE_EXCLUDES)
        )
        if self.compiler:
            compile_bytecode(self.compiler, out, "/var/task")
        return True


def bundling_image() -> cdk.DockerImage:
    # Required by BundlingOptions; never pulled because local bundling always succeeds or raises.
    return cdk.DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}")
