"""End-to-end fixtures: the local gateway over real HTTP, in front of the real handlers.

`local_gateway` runs `payloadstore_devstack.gateway` in a process of its own (as a Lambda
container would be), against the session's redis-server and moto server, with tokens minted
for the namespaces `dev` and `sandbox`. Its Redis database is 1, so jobs left in db 0 by the
integration tests never reach an e2e daemon, and its token path is private to the session.

    def test_something(local_gateway):
        r = requests.get(f"{local_gateway.url}/v1/config",
                         headers=local_gateway.auth("dev", "client"))

`start_local_gateway(**settings_env)` starts one more gateway with other settings (e.g.
VISIBILITY_TIMEOUT_S="1"), sharing the same services, tokens and Redis database; it is stopped
at the end of the test.

With PAYLOADSTORE_REDIS=cluster the gateways' handlers use the session's local cluster
(`redis_target`, database 0: run the e2e suite alone so that no integration test's jobs share
it), and `local_gateway.redis_client()` is a cluster client; tests that need a Redis database of
their own keep a single server (`single_server_env`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from payloadstore_devstack.gateway import GatewayProcess
from payloadstore_devstack.stack import handler_env, mint_tokens

E2E_REGION = "us-east-1"
E2E_REDIS_DB = 1


@dataclass
class LocalGatewayInfo:
    url: str
    redis_url: str
    s3_endpoint: str
    bucket: str
    token_path: str
    tokens: dict[str, dict[str, str]]  # {ns: {"client_token": ..., "daemon_token": ...}}
    log_path: Path
    env: dict[str, str] = field(repr=False, default_factory=dict)
    redis_cluster: bool = False

    def redis_client(self):
        """A client on what the handlers wrote: a cluster client on a cluster (it finds each
        key's node), else one on the gateway's database."""
        import redis

        if self.redis_cluster:
            return redis.RedisCluster.from_url(self.redis_url)
        return redis.Redis.from_url(self.redis_url)

    def token(self, namespace: str, role: str) -> str:
        return self.tokens[namespace][f"{role}_token"]

    def auth(self, namespace: str, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(namespace, role)}"}

    def devstack_json(self) -> dict:
        """The same shape `make dev` writes to .devstack.json (for SDK helpers that read it)."""
        return {
            "endpoint": self.url,
            "s3_endpoint": self.s3_endpoint,
            "bucket": self.bucket,
            "redis_url": self.redis_url,
            "namespaces": self.tokens,
        }


def _redis_db_url(base_url: str, db: int) -> str:
    return base_url.rsplit("/", 1)[0] + f"/{db}"


@pytest.fixture(scope="session")
def _gateway_services(
    redis_server, redis_target, moto_server, payload_bucket, ssm_client, tmp_path_factory
):
    token_path = f"/payloadstore-e2e/{uuid.uuid4().hex[:8]}/tokens"
    tokens = mint_tokens(ssm_client, token_path)
    cluster = redis_target.get("REDIS_CLUSTER") == "true"
    redis_url = (
        redis_target["REDIS_URL"] if cluster else _redis_db_url(redis_server.url, E2E_REDIS_DB)
    )
    env = handler_env(
        redis_url=redis_url,
        s3_endpoint=moto_server.endpoint,
        bucket=payload_bucket,
        region=E2E_REGION,
        token_path=token_path,
        # Revocation must be visible at once in tests (deployed default: 60 s).
        extra={"TOKEN_CACHE_S": "0", "POWERTOOLS_LOG_LEVEL": "WARNING"},
    )
    if cluster:
        env.update(redis_target)
    return {
        "env": env,
        "redis_cluster": cluster,
        "tokens": tokens,
        "token_path": token_path,
        "redis_url": redis_url,
        "s3_endpoint": moto_server.endpoint,
        "bucket": payload_bucket,
        "log_dir": Path(tmp_path_factory.mktemp("gateway")),
    }


def _start(
    services: dict, name: str, settings_env: dict[str, str], **gateway_kwargs
) -> tuple[GatewayProcess, LocalGatewayInfo]:
    env = {**services["env"], **settings_env}
    log_path = services["log_dir"] / f"{name}.log"
    proc = GatewayProcess(env=env, log_path=log_path, **gateway_kwargs).start()
    info = LocalGatewayInfo(
        url=proc.url,
        redis_url=env["REDIS_URL"],
        s3_endpoint=services["s3_endpoint"],
        bucket=services["bucket"],
        token_path=services["token_path"],
        tokens=services["tokens"],
        log_path=log_path,
        env=env,
        redis_cluster=env.get("REDIS_CLUSTER") == "true",
    )
    return proc, info


@pytest.fixture(scope="session")
def local_gateway(_gateway_services) -> LocalGatewayInfo:
    proc, info = _start(_gateway_services, "local-gateway", {})
    yield info
    proc.stop()


@pytest.fixture(scope="module")
def small_parts_gateway(_gateway_services):
    """A gateway that uploads above 6 MiB in parts of 5 MiB (S3's smallest): payloads and
    blobs (test_sdk_multipart.py, test_sdk_blobs.py)."""
    mib = 1 << 20
    proc, info = _start(
        _gateway_services,
        "gateway-multipart",
        {"MULTIPART_THRESHOLD": str(6 * mib), "MULTIPART_PART_BYTES": str(5 * mib)},
    )
    yield info
    proc.stop()


@pytest.fixture
def start_local_gateway(_gateway_services):
    started: list[GatewayProcess] = []

    def start(
        authorizer_cache_s: float = 0.0, timeout_s: float | None = None, **settings_env: str
    ) -> LocalGatewayInfo:
        proc, info = _start(
            _gateway_services,
            f"gateway-{uuid.uuid4().hex[:6]}",
            settings_env,
            authorizer_cache_s=authorizer_cache_s,
            timeout_s=timeout_s,
        )
        started.append(proc)
        return info

    yield start
    for proc in started:
        proc.stop()
