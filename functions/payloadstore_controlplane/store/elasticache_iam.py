"""ElastiCache IAM authentication: the short-lived token a connection presents as its password.

ElastiCache Serverless takes no AUTH token; a connection authenticates as an ElastiCache user
whose authentication mode is IAM, with a SigV4-presigned `connect` request as the password
(https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/auth-iam.html): host = the cache's
name, `Action=connect&User=<user id>` (`&ResourceType=ServerlessCache` for a serverless cache),
signed for the service `elasticache` with the function role's credentials, valid 15 minutes; the
token is that URL without its `http://`. The role needs `elasticache:Connect` on the cache and
the user.

Signed in-process with store/sigv4.py (no botocore import on the cold path); a unit test holds
the result equal to botocore's SigV4QueryAuth, which AWS's own example uses. A token is made
per new connection (redis-py asks its credential provider at each connect), so a connection
that ElastiCache closes after its 12 hours reconnects with a fresh one.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from redis.credentials import CredentialProvider

from . import sigv4

SERVICE = "elasticache"
TOKEN_TTL_S = 900  # AWS: an IAM auth token is valid for 15 minutes
_UNRESERVED = "-_.~"


def iam_auth_token(
    cache_name: str,
    user_id: str,
    region: str,
    credentials: sigv4.Credentials,
    *,
    serverless: bool = True,
    now: float | None = None,
) -> str:
    """The password of an IAM-authenticated connection to `cache_name` as `user_id`."""
    access_key, secret, session_token = credentials
    stamp = sigv4.amz_date(now)
    params = [("Action", "connect"), ("User", user_id)]
    if serverless:
        params.append(("ResourceType", "ServerlessCache"))
    params += [
        ("X-Amz-Algorithm", sigv4.ALGORITHM),
        ("X-Amz-Credential", f"{access_key}/{sigv4.scope(stamp, region, SERVICE)}"),
        ("X-Amz-Date", stamp),
        ("X-Amz-Expires", str(TOKEN_TTL_S)),
        ("X-Amz-SignedHeaders", "host"),
    ]
    if session_token:
        params.append(("X-Amz-Security-Token", session_token))
    encoded = [(quote(k, safe=_UNRESERVED), quote(v, safe=_UNRESERVED)) for k, v in params]
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(encoded))
    host = cache_name.lower()
    # The request is an http:// one (never sent): SigV4 signs its empty body's hash.
    canonical_request = f"GET\n/\n{canonical_query}\nhost:{host}\n\nhost\n{sigv4.EMPTY_SHA256}"
    signature = sigv4.signature(secret, stamp, region, SERVICE, canonical_request)
    return f"{host}/?{canonical_query}&X-Amz-Signature={signature}"


class IamCredentialProvider(CredentialProvider):
    """redis-py's CredentialProvider: (user, a fresh token) for every new connection, signed with
    the process's current role credentials (Lambda rotates them in the environment)."""

    def __init__(self, cache_name: str, user_id: str, region: str, *, serverless: bool = True):
        self.cache_name = cache_name
        self.user_id = user_id
        self.region = region
        self.serverless = serverless
        self._token: tuple[float, str] | None = None

    def get_credentials(self) -> tuple[str, str]:
        credentials = sigv4.environment_credentials()
        if credentials is None:
            raise RuntimeError(
                "REDIS_IAM_USER is set but no AWS credentials are in the environment "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): cannot sign an ElastiCache IAM token"
            )
        # One signature serves the connections opened in the same minute (a cold start opens
        # a few); well inside the token's 15 minutes.
        now = time.time()
        if self._token is None or now - self._token[0] > 60:
            token = iam_auth_token(
                self.cache_name,
                self.user_id,
                self.region,
                credentials,
                serverless=self.serverless,
                now=now,
            )
            self._token = (now, token)
        return self.user_id, self._token[1]
