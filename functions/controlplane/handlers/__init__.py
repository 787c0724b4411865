"""The Lambda handlers, one module per function (routes.FUNCTIONS)."""

from ..lazyimport import defer_reexporting_packages

# Before any handler imports Powertools' resolver (not in controlplane/__init__: CDK synth imports
# controlplane.routes and must not import Powertools).
defer_reexporting_packages()
