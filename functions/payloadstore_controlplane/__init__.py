"""The control plane's Lambda code (see ARCHITECTURE in docs/design.md)."""

from .runtime.lazyimport import defer_unused

defer_unused()
