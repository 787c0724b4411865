"""The control plane's token store, for the local stack and the CLI's token commands: the one
place the SDK's package reaches into the control plane (`payloadstore-controlplane`, which the
`[stack]` extra installs). A client that only enqueues and waits never imports this."""

from __future__ import annotations

from payloadstore_controlplane.store.tokens import TokenStore, hash_token

__all__ = ["TokenStore", "hash_token"]
