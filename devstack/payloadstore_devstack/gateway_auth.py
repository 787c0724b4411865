"""Authorizer emulation of the local gateway: a Lambda REQUEST authorizer as API Gateway runs it.

No `Authorization` header is 401 without calling the authorizer; `Exception("Unauthorized")` is
401; an explicit Deny (or no matching Allow) is 403. Results are cached per header value for
`cache_s`, and the cached policy is evaluated against each new method ARN, as API Gateway does.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from payloadstore_devstack.gateway_events import (
    ACCOUNT_ID,
    API_ID,
    STAGE,
    authorizer_failure,
    explicit_deny,
    not_allowed,
    unauthorized,
)

log = logging.getLogger("devstack.gateway")


def method_arn(region: str, method: str, path: str) -> str:
    return f"arn:aws:execute-api:{region}:{ACCOUNT_ID}:{API_ID}/{STAGE}/{method}{path}"


def _arn_matches(pattern: str, arn: str) -> bool:
    # IAM wildcards: `*` any run of characters (including `/`), `?` exactly one.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn) is not None


def evaluate_policy(policy: dict, arn: str) -> str:
    """'allow', 'deny' (explicit), or 'none' (no statement matched), as IAM decides."""
    statements = policy.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    allowed = False
    for st in statements:
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if not any(_arn_matches(a, "execute-api:Invoke") for a in actions):
            continue
        resources = st.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        if not any(_arn_matches(r, arn) for r in resources):
            continue
        effect = str(st.get("Effect", "")).lower()
        if effect == "deny":
            return "deny"
        if effect == "allow":
            allowed = True
    return "allow" if allowed else "none"


@dataclass
class AuthorizerResult:
    policy: dict
    context: dict
    principal_id: str
    expires_at: float


# invoke(event) -> the authorizer's return value; raises TimeoutError or the handler's exception.
Invoke = Callable[[dict], Any]


class AuthorizerEmulator:
    def __init__(self, region: str, cache_s: float = 0.0):
        self.region = region
        self.cache_s = cache_s
        self._cache: dict[str, AuthorizerResult] = {}
        self._lock = threading.Lock()

    def authorize(
        self,
        invoke: Invoke,
        *,
        method: str,
        resource: str,
        path: str,
        path_params: dict[str, str],
        headers: dict[str, str],
        multi_headers: dict[str, list[str]],
        query: dict[str, str] | None,
        multi_query: dict[str, list[str]] | None,
        request_context: dict,
    ) -> dict:
        """The `requestContext.authorizer` the handler gets, or a GatewayError (401/403/500)."""
        token_header = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        if not token_header:
            raise unauthorized()
        arn = method_arn(self.region, method, path)
        cached = self._cached(token_header)
        if cached is None:
            event = {
                "type": "REQUEST",
                "methodArn": arn,
                "resource": resource,
                "path": path,
                "httpMethod": method,
                "headers": headers,
                "multiValueHeaders": multi_headers,
                "queryStringParameters": query or {},
                "multiValueQueryStringParameters": multi_query or {},
                "pathParameters": path_params,
                "stageVariables": {},
                "requestContext": dict(request_context),
            }
            try:
                result = invoke(event)
            except TimeoutError as e:
                raise authorizer_failure() from e
            except Exception as e:
                if str(e) == "Unauthorized":
                    raise unauthorized() from e
                log.error("authorizer raised error=%r", e, exc_info=e)
                raise authorizer_failure() from e
            cached = self._parse(result)
            if self.cache_s > 0:
                with self._lock:
                    self._cache[token_header] = cached
        decision = evaluate_policy(cached.policy, arn)
        if decision == "deny":
            raise explicit_deny()
        if decision != "allow":
            raise not_allowed()
        return {**cached.context, "principalId": cached.principal_id}

    def _cached(self, token_header: str) -> AuthorizerResult | None:
        if self.cache_s <= 0:
            return None
        with self._lock:
            hit = self._cache.get(token_header)
            if hit and hit.expires_at > time.monotonic():
                return hit
            self._cache.pop(token_header, None)
            return None

    def _parse(self, result: Any) -> AuthorizerResult:
        if (
            not isinstance(result, dict)
            or "policyDocument" not in result
            or "principalId" not in result
        ):
            log.error("authorizer returned no principalId/policyDocument")
            raise authorizer_failure()
        context = result.get("context") or {}
        # API Gateway only passes flat string/number/boolean context values.
        if not isinstance(context, dict) or any(
            not isinstance(v, (str, int, float, bool)) for v in context.values()
        ):
            log.error("authorizer context must be flat scalars context=%r", context)
            raise authorizer_failure()
        return AuthorizerResult(
            policy=result["policyDocument"],
            context=dict(context),
            principal_id=str(result["principalId"]),
            expires_at=time.monotonic() + self.cache_s,
        )
