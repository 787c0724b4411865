"""No garbage collection while a Lambda function imports its handler.

Importing an API function's handler allocates ~70,000 objects that all stay alive (modules,
classes, pydantic schemas); the cyclic collector runs ~35 times meanwhile, each time scanning
a growing heap to find nearly nothing: ~30 ms, a tenth of the import. In a Lambda execution
environment (AWS_EXECUTION_ENV=AWS_Lambda_*) collection is switched off when the handlers
package is imported (`pause`) and back on when the handler module defines its `lambda_handler`
(`resume`, from `observability.lambda_entry`, the last statement of every handler module),
after `gc.freeze()`: what the import built is moved to the permanent generation, so no later
collection scans it again either (Python's documented use of freeze). Elsewhere (tests, the
local stack, CDK synth) nothing changes.
"""

from __future__ import annotations

import gc
import os

_paused = False


def in_lambda() -> bool:
    return os.environ.get("AWS_EXECUTION_ENV", "").startswith("AWS_Lambda_")


def pause() -> None:
    global _paused
    if _paused or not in_lambda() or not gc.isenabled():
        return
    gc.disable()
    _paused = True


def resume() -> None:
    """Freeze what was imported and collect as usual from here on (once; no-op unless paused)."""
    global _paused
    if not _paused:
        return
    _paused = False
    gc.freeze()
    gc.enable()
