"""Token administration, invoked directly (never behind the API):

    {"action": "mint", "namespace": "ns", "role": "client"|"daemon"} -> {"token", "token_id", ...}
    {"action": "revoke", "token": "pst_..."} or {"action": "revoke", "token_id": "ab12..."}
    {"action": "list"}

The plain token appears only in the mint answer; the store keeps its sha256."""

from __future__ import annotations

from ..observability import lambda_entry, logger
from ..store.tokens import TokenStoreError
from .authorizer import token_store


@lambda_entry
def lambda_handler(event, context):
    action = (event or {}).get("action")
    store = token_store()
    try:
        if action == "mint":
            token, info = store.mint(event.get("namespace", ""), event.get("role", ""))
            logger.info(
                "token minted", extra={"token_id": info.token_id, "namespace": info.namespace}
            )
            return {
                "token": token,
                "token_id": info.token_id,
                "namespace": info.namespace,
                "role": info.role,
            }
        if action == "revoke":
            removed = store.revoke(event.get("token") or event.get("token_id") or "")
            logger.info("token revoked", extra={"removed": removed})
            return {"revoked": removed}
        if action == "list":
            return {"tokens": [vars(t) for t in store.list()]}
    except TokenStoreError as e:
        return {"error": str(e)}
    return {"error": "action must be one of mint, revoke, list"}
