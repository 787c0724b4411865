"""Lambda REQUEST authorizer: `Authorization: Bearer <token>` -> namespace and role.

API Gateway caches the answer per Authorization header, so an Allow covers every route; the
handlers then refuse another namespace or a route outside the role with 403."""

from __future__ import annotations

import os
from functools import lru_cache

import boto3
from aws_lambda_powertools.utilities.data_classes import event_source
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
    APIGatewayAuthorizerResponse,
)

from ..observability import lambda_entry, logger
from ..store.tokens import TokenStore


@lru_cache(maxsize=1)
def token_store() -> TokenStore:
    return TokenStore(
        boto3.client("ssm"),
        os.environ.get("TOKEN_PARAMETER_PATH", "/payloadstore/tokens"),
        cache_s=int(os.environ.get("TOKEN_CACHE_S", "60")),
    )


def bearer(headers: dict[str, str]) -> str | None:
    value = next((v for k, v in (headers or {}).items() if k.lower() == "authorization"), None)
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@lambda_entry
@event_source(data_class=APIGatewayAuthorizerRequestEvent)
def lambda_handler(event: APIGatewayAuthorizerRequestEvent, context):
    token = bearer(event.headers)
    info = token_store().lookup(token) if token else None
    if info is None:
        logger.info("token refused", extra={"path": event.path})
        # API Gateway answers 401 for exactly this message.
        raise Exception("Unauthorized")
    arn = event.parsed_arn
    policy = APIGatewayAuthorizerResponse(
        principal_id=f"{info.namespace}/{info.role}/{info.token_id}",
        context={"namespace": info.namespace, "role": info.role, "token_id": info.token_id},
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
    )
    policy.allow_all_routes()
    return policy.asdict()
