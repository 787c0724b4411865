"""Lambda REQUEST authorizer: `Authorization: Bearer <token>` -> namespace and role.

API Gateway caches the answer per Authorization header, so an Allow covers every route; the
handlers then refuse another namespace or a route outside the role with 403.

Cold start: the event is read and the policy written as plain dicts (Powertools' data classes
package imports every event source it knows), and SSM is called through a botocore client
(boto3 adds nothing here but ~0.1 s of imports)."""

from __future__ import annotations

import os
import time
from functools import lru_cache

from ..observability import lambda_entry, logger, metrics_count
from ..store.tokens import (
    DEFAULT_STALE_MAX_S,
    REQUEST_BUDGET_S,
    TokenStore,
    TokenStoreUnavailable,
    process_token_store,
)


def _listing_stale(age_s: float, why: str) -> None:
    # The TokenListingStale alarm (infra/alarms.py); docs/operations.md, "When SSM fails".
    metrics_count("TokenListingStale")
    logger.warning(
        "token listing served stale: SSM failed or was slow",
        extra={"listing_age_s": round(age_s, 1), "why": why},
    )


@lru_cache(maxsize=1)
def token_store() -> TokenStore:
    # The store (its SSM client and cache) lives in store/tokens.py, below the handler module:
    # the local gateway runs many instances of this module at once and they share it there.
    store = process_token_store(
        os.environ.get("TOKEN_PARAMETER_PATH", "/payloadstore/tokens"),
        int(os.environ.get("TOKEN_CACHE_S", "60")),
        float(os.environ.get("TOKEN_STALE_MAX_S", str(DEFAULT_STALE_MAX_S))),
    )
    store.on_stale = _listing_stale
    return store


def bearer(headers: dict[str, str]) -> str | None:
    value = next((v for k, v in (headers or {}).items() if k.lower() == "authorization"), None)
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def all_routes_arn(method_arn: str) -> str:
    """`arn:aws:execute-api:region:account:api/stage/GET/<resource>` -> `.../api/stage/*/*`: API
    Gateway caches one answer per token, so the Allow must cover every route."""
    prefix, _, resource = method_arn.partition("/")
    stage = resource.split("/", 1)[0]
    if not prefix.startswith("arn:") or prefix.count(":") != 5 or not stage:
        raise ValueError(f"not an execute-api method ARN: {method_arn!r}")
    return f"{prefix}/{stage}/*/*"


@lambda_entry
def lambda_handler(event: dict, context):
    token = bearer(event.get("headers") or {})
    # Every SSM wait of this request ends by then (store/tokens.py): an answer within 1 s.
    deadline = time.monotonic() + REQUEST_BUDGET_S
    try:
        info = token_store().lookup(token, deadline) if token else None
        policy = token_store().policy(info.namespace) if info is not None else None
    except TokenStoreUnavailable as e:
        # Nothing answers for this token (no usable listing, or a token the listing does not
        # hold): an authorizer error, which API Gateway does not cache, within SSM_WAIT_S.
        logger.error("token store unavailable", extra={"error": str(e)})
        raise
    if info is None or policy is None:
        logger.info("token refused", extra={"path": event.get("path")})
        # API Gateway answers 401 for exactly this message.
        raise Exception("Unauthorized")  # noqa: TRY002 - the Lambda authorizer contract
    return {
        "principalId": f"{info.namespace}/{info.role}/{info.token_id}",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Action": "execute-api:Invoke",
                    "Effect": "Allow",
                    "Resource": [all_routes_arn(event["methodArn"])],
                }
            ],
        },
        # The namespace's policy rides along (flat scalars): the handlers read it from here, so it
        # is cached with the token (TOKEN_CACHE_S, then API Gateway's authorizer cache).
        "context": {
            "namespace": info.namespace,
            "role": info.role,
            "token_id": info.token_id,
            **policy.to_context(),
        },
    }
