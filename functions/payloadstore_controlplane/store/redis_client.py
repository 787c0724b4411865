"""The Redis client of this container: created once, reused by every invocation.

Timeouts. A hung Redis node must give the caller a 503 inside the function's Lambda timeout (10 s
for the short functions, 28 s for the long-poll ones), never a Lambda timeout and a 502. So the
container holds two clients behind one object (`RoutedRedis`):

- the *fast* client, for every non-blocking command: FAST_SOCKET_TIMEOUT_S per reply,
  CONNECT_TIMEOUT_S per connect, FAST_RETRIES retry (a failover moves the primary);
  worst case about 3 x (connect + reply) = 7.5 s, under the shortest function timeout;
- the *blocking* client, only for commands that wait on the server (BLMOVE, BLPOP, XREADGROUP or
  XREAD with BLOCK, ...): a reply timeout of the longest configured wait plus BLOCKING_MARGIN_S,
  and no retry, so a long poll on a hung node fails after at most 25 + 2 s, under 28 s.
  It is created on first use: functions that never long-poll never open it.

Cluster mode. The client is built from host, port and `ssl=True`-equivalent options, not from a
URL: `RedisCluster.from_url("rediss://...")` replaces the connection class with redis-py's plain
SSLConnection, so the packer measured in bench/ (redis-py's own, with hiredis's reply parser)
would not be what runs on AWS.

TLS. Certificates are verified (`ssl_cert_reqs="required"`) and so are host names
(`ssl_check_hostname=True`). ElastiCache's certificate is a wildcard for the cluster's DNS
domain, and a TLS-enabled cluster-mode group announces its nodes by DNS name in CLUSTER SLOTS
(e.g. `payloadstore-prod-0001-001.payloadstore-prod.abc123.euw1.cache.amazonaws.com`), so every
node connection checks the name it dialled. tests/integration/test_redis_client.py proves both
sides on a TLS cluster-mode redis-server: nodes announced by name connect, nodes announced by a
name the certificate does not carry are refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import Connection, PythonRespSerializer, SSLConnection
from redis.driver_info import DriverInfo
from redis.retry import Retry

from ..runtime.once import built_once

try:
    import hiredis
except ImportError:  # redis[hiredis] is what the layer pins; without it, redis-py's packer
    hiredis = None  # type: ignore[assignment]

FAST_SOCKET_TIMEOUT_S = 1.5
CONNECT_TIMEOUT_S = 1.0
FAST_RETRIES = 1
BLOCKING_MARGIN_S = 2.0
HEALTH_CHECK_INTERVAL_S = 30
# Blocking long-polls hold a connection each; bound the pool so a flood cannot exhaust Redis.
MAX_CONNECTIONS = 64

DRIVER_INFO = DriverInfo(lib_version=redis.__version__)

# Commands that wait on the server for up to their own timeout argument.
BLOCKING_COMMANDS = frozenset(
    {
        "blmove",
        "blmpop",
        "blpop",
        "brpop",
        "brpoplpush",
        "bzmpop",
        "bzpopmax",
        "bzpopmin",
        "wait",
        "waitaof",
    }
)
# Commands that block only with a BLOCK argument: name -> position of `block` in the signature.
BLOCK_ARGUMENT = {"xread": 2, "xreadgroup": 4}


class SizedPacker:
    """hiredis packs a small command ~10x faster than redis-py's Python packer (a 1 KiB EVALSHA
    of ~20 arguments: 2 us against 30 us; bench/RESULTS.md, "hot path"), but copies every value
    into one fresh buffer: a 256 KiB XADD took ~3x longer (page faults), where redis-py's packer
    sends a large value as its own buffer. So: hiredis for a command whose arguments are all
    str, bytes or int, none longer than the Python packer's own cutoff, and whose name is one
    word; redis-py's packer for anything else (large values, floats, memoryviews, the types it
    refuses with DataError), so what is sent, and what is raised, is what it gives."""

    def __init__(self, python: PythonRespSerializer, cutoff: int):
        self.python = python
        self.cutoff = cutoff

    def pack(self, *args):
        cutoff = self.cutoff
        for arg in args:
            kind = type(arg)
            if kind is int:
                continue
            if (kind is not bytes and kind is not str) or len(arg) > cutoff:
                return self.python.pack(*args)
        name = args[0]
        # "CONFIG GET": redis-py's packers send a name of several words as separate arguments.
        if (" " if type(name) is str else b" ") in name:
            return self.python.pack(*args)
        try:
            return [hiredis.pack_command(args)]
        except Exception:  # noqa: BLE001 - e.g. a str that is not UTF-8: redis-py's own error
            return self.python.pack(*args)


class _PythonPackerMixin:
    """hiredis parses replies 3-6x faster; commands are packed by SizedPacker (hiredis for small
    ones, redis-py's Python packer, which does not copy large values, for the rest)."""

    def _construct_command_packer(self, packer):
        if packer is not None:
            return packer
        python = PythonRespSerializer(self._buffer_cutoff, self.encoder.encode)
        return python if hiredis is None else SizedPacker(python, self._buffer_cutoff)


class PayloadConnection(_PythonPackerMixin, Connection):
    pass


class PayloadSSLConnection(_PythonPackerMixin, SSLConnection):
    pass


def _endpoint(url: str) -> dict[str, Any]:
    """host, port, db, password and TLS of a redis:// or rediss:// URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("redis", "rediss"):
        raise ValueError(f"REDIS_URL must be redis:// or rediss://, got {parsed.scheme!r}")
    db = (parsed.path or "/0").lstrip("/") or "0"
    return {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 6379,
        "db": int(db),
        "password": unquote(parsed.password) if parsed.password else None,
        "username": unquote(parsed.username) if parsed.username else None,
        "tls": parsed.scheme == "rediss",
    }


def make_redis(
    url: str,
    *,
    cluster: bool = False,
    password: str | None = None,
    socket_timeout_s: float = FAST_SOCKET_TIMEOUT_S,
    retries: int = FAST_RETRIES,
    ssl_ca_certs: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
    credential_provider: Any = None,
):
    """One client (single node or cluster) with the given reply timeout and retry count.

    `max_connections` bounds this container's pool: a Lambda container serves one invocation at
    a time, so MAX_CONNECTIONS is ample; the local gateway serves every container from one process
    and sizes it to its concurrency (REDIS_MAX_CONNECTIONS). A full pool is 503 "busy"."""
    ep = _endpoint(url)
    tls = ep["tls"]
    connection_kwargs: dict[str, Any] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": min(CONNECT_TIMEOUT_S, socket_timeout_s),
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "decode_responses": False,
        "password": password or ep["password"],
        "username": ep["username"],
        # What CLIENT SETINFO sends, as redis-py would: left to itself it looks its own version
        # up in the installed package metadata on every new connection (the first one imports
        # the email parser to read it, ~5-10 ms of a cold start).
        "driver_info": DRIVER_INFO,
    }
    if credential_provider is not None:
        # IAM auth (store/elasticache_iam.py): a fresh (user, token) at every connect; no
        # password or user name of the URL's.
        connection_kwargs.update(password=None, username=None)
        connection_kwargs["credential_provider"] = credential_provider
    if tls:
        connection_kwargs.update(
            ssl_cert_reqs="required", ssl_check_hostname=True, ssl_ca_certs=ssl_ca_certs
        )
    connection_class = PayloadSSLConnection if tls else PayloadConnection
    retry = Retry(
        ExponentialBackoff(cap=0.5, base=0.05) if retries else NoBackoff(), retries=retries
    )
    if cluster:
        from redis.cluster import RedisCluster

        if ep["db"] != 0:
            raise ValueError("a cluster-mode REDIS_URL must use database 0")
        # Node pools are built as from a URL (so `connection_class` is honoured), but the URL
        # handed over has no scheme to parse: nothing can swap the class back to SSLConnection.
        client = RedisCluster(
            url=f"redis://{ep['host']}:{ep['port']}/0",
            connection_class=connection_class,
            max_connections=max_connections,
            retry=retry,
            **connection_kwargs,
        )
        return client
    # The retry goes to the pool's connections: redis.Redis ignores `retry=` when it is handed
    # a pool, and its connections would then not retry at all.
    pool = redis.ConnectionPool(
        host=ep["host"],
        port=ep["port"],
        db=ep["db"],
        connection_class=connection_class,
        max_connections=max_connections,
        retry=retry,
        **connection_kwargs,
    )
    return redis.Redis(connection_pool=pool)


class RoutedRedis:
    """The container's client: blocking commands go to a client whose reply timeout outlasts
    the wait, everything else to one that gives up fast. Looks like a redis client otherwise
    (attributes are the fast client's)."""

    def __init__(self, fast, make_blocking):
        self.fast = fast
        self._make_blocking = make_blocking
        self._blocking = None

    @property
    def blocking(self):
        if self._blocking is None:
            self._blocking = self._make_blocking()
        return self._blocking

    def __getattr__(self, name: str):
        if name in BLOCKING_COMMANDS:
            return getattr(self.blocking, name)
        if name in BLOCK_ARGUMENT:
            position = BLOCK_ARGUMENT[name]

            def call(*args, **kwargs):
                block = kwargs.get("block", args[position] if len(args) > position else None)
                client = self.fast if block is None else self.blocking
                return getattr(client, name)(*args, **kwargs)

            return call
        return getattr(self.fast, name)

    def close(self) -> None:
        self.fast.close()
        if self._blocking is not None:
            self._blocking.close()


def make_routed_redis(
    url: str,
    *,
    cluster: bool = False,
    password: str | None = None,
    max_block_s: float = 25.0,
    ssl_ca_certs: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
    credential_provider: Any = None,
) -> RoutedRedis:
    fast = make_redis(
        url,
        cluster=cluster,
        password=password,
        ssl_ca_certs=ssl_ca_certs,
        max_connections=max_connections,
        credential_provider=credential_provider,
    )
    return RoutedRedis(
        fast,
        lambda: make_redis(
            url,
            cluster=cluster,
            password=password,
            socket_timeout_s=max_block_s + BLOCKING_MARGIN_S,
            retries=0,
            ssl_ca_certs=ssl_ca_certs,
            max_connections=max_connections,
            credential_provider=credential_provider,
        ),
    )


@built_once(maxsize=4)
def cached_redis(
    url: str,
    cluster: bool,
    password: str | None,
    max_block_s: float,
    max_connections: int = MAX_CONNECTIONS,
    iam: tuple[str, str, str, bool] | None = None,
) -> RoutedRedis:
    """`iam`: (cache name, ElastiCache user id, region, serverless) to authenticate with IAM
    tokens (store/elasticache_iam.py) instead of a password."""
    provider = None
    if iam is not None:
        from .elasticache_iam import IamCredentialProvider

        cache_name, user_id, region, serverless = iam
        provider = IamCredentialProvider(cache_name, user_id, region, serverless=serverless)
    return make_routed_redis(
        url,
        cluster=cluster,
        password=password,
        max_block_s=max_block_s,
        max_connections=max_connections,
        credential_provider=provider,
    )
