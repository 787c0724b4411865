"""Token administration, invoked directly (never behind the API):

    {"action": "mint", "namespace": "ns", "role": "client"|"daemon"} -> {"token", "token_id", ...}
    {"action": "revoke", "token": "pst_..."} or {"action": "revoke", "token_id": "ab12..."}
    {"action": "list"}
    {"action": "set_policy", "namespace": "ns", "retention": R, "kms_key": K, "inline": I}
        -> {"namespace", "policy": {"retention", "kms_key", "inline"}} (a field left out keeps
        its current value; a bad value is {"error": ...} and nothing is written)
    {"action": "get_policy", "namespace": "ns"} -> {"namespace", "policy": {...}}

The plain token appears only in the mint answer; the store keeps its sha256."""

from __future__ import annotations

import os

from ..models.policy import PolicyError, parse_key_list, stack_key_arn
from ..observability import lambda_entry, logger
from ..store.tokens import TokenStoreError
from .authorizer import token_store

ACTIONS = ("mint", "revoke", "list", "set_policy", "get_policy")


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
        if action == "set_policy":
            namespace = event.get("namespace") or ""
            policy = store.set_policy(
                namespace,
                retention=event.get("retention"),
                kms_key=event.get("kms_key"),
                inline=event.get("inline"),
                stack_key_arn=stack_key_arn(
                    os.environ.get("KMS_KEY_ARN"), os.environ.get("S3_ENDPOINT_URL")
                ),
                granted_keys=parse_key_list(os.environ.get("KMS_KEY_ARNS")),
            )
            logger.info("policy set", extra={"namespace": namespace, **policy.as_dict()})
            return {"namespace": namespace, "policy": policy.as_dict()}
        if action == "get_policy":
            namespace = event.get("namespace") or ""
            return {"namespace": namespace, "policy": store.read_policy(namespace).as_dict()}
    except (TokenStoreError, PolicyError) as e:
        return {"error": str(e)}
    return {"error": f"action must be one of {', '.join(ACTIONS)}"}
