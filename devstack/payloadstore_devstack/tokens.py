"""The control plane's token store, for the local stack (`payloadstore-controlplane`, which this
distribution requires). The CLI's token commands import it from the control plane itself, so a
deployed stage's store needs `payloadstore[controlplane]` alone, not the local stack."""

from __future__ import annotations

from payloadstore_controlplane.store.tokens import TokenStore, hash_token

__all__ = ["TokenStore", "hash_token"]
