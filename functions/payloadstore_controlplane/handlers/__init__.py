"""The Lambda handlers, one module per function (routes.FUNCTIONS)."""

from ..runtime import gcpause
from ..runtime.lazyimport import defer_reexporting_packages

# In Lambda, no garbage collection until the handler module is imported (see runtime/gcpause.py).
gcpause.pause()

# Before any handler imports Powertools' resolver (not in payloadstore_controlplane/__init__: CDK synth imports
# payloadstore_controlplane.routes and must not import Powertools).
defer_reexporting_packages()
