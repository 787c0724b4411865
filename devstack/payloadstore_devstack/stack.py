"""`make dev`: the whole control plane on this machine, in the foreground.

A redis-server of our own (append-only file under the state dir, so queued jobs survive a
restart), moto's server for S3 and SSM on loopback, the bucket created as the CDK stack creates
it, tokens for the `dev` and `sandbox` namespaces, and the local gateway serving the deployed
handlers. Ctrl-C (SIGINT) or SIGTERM stops every child and keeps the data.

What survives a restart: Redis data (AOF), the tokens (kept in `<state dir>/tokens.json` and
registered again at start), and the bucket's objects (copied to `<state dir>/s3/` on a clean stop
and put back at start, since moto keeps everything in memory). The ports of Redis and S3 are
reused when still free, so presigned URLs minted before a restart keep working.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from payloadstore_devstack.gateway import (
    DEFAULT_PORT,
    LocalGateway,
    PortInUseError,
    RunningGateway,
    configure_logging,
    ensure_functions_on_path,
    serve_in_thread,
)
from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
from payloadstore_devstack.services import (
    BLOB_PREFIX,
    LOOPBACK,
    PAYLOAD_EXPIRATION_DAYS,
    PAYLOAD_PREFIX,
    LocalRedisCluster,
    MotoServer,
    RedisServer,
    ServiceError,
    create_payload_bucket,
    engine,
    find_redis_server,
    free_port,
    local_aws_env,
    port_is_open,
)

log = logging.getLogger("devstack.stack")

DEV_BUCKET = "payloadstore-dev-payloads"
DEV_REGION = "us-east-1"
DEV_TOKEN_PATH = "/payloadstore/dev/tokens"
NAMESPACES = ("dev", "sandbox")
# Concurrent invocations the local stack's handlers can hold Redis connections for.
LOCAL_REDIS_MAX_CONNECTIONS = 1024
ROLES = ("client", "daemon")


def handler_env(
    *,
    redis_url: str,
    s3_endpoint: str,
    bucket: str,
    region: str = DEV_REGION,
    token_path: str = DEV_TOKEN_PATH,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """What the Lambda functions' environment holds in the CDK stack, pointed at local services."""
    env = {
        **local_aws_env(s3_endpoint, region),
        "PAYLOAD_BUCKET": bucket,
        "REDIS_URL": redis_url,
        "S3_ENDPOINT_URL": s3_endpoint,
        "AWS_REGION": region,
        "TOKEN_PARAMETER_PATH": token_path,
        # A namespace policy (or a token) set a moment ago applies within a second here
        # (deployed: TOKEN_CACHE_S, 60 s, plus API Gateway's authorizer cache).
        "TOKEN_CACHE_S": "1",
        # The stack's own KMS key (kms_key `stack`), as the emulator's KMS grants know it.
        "KMS_KEY_ARN": LOCAL_KMS_KEY_ARN,
        "POWERTOOLS_SERVICE_NAME": "payloadstore",
        "POWERTOOLS_METRICS_NAMESPACE": "PayloadStore",
        "POWERTOOLS_TRACE_DISABLED": "true",
        # As the CDK stack: should tracing be switched on, no answer or error body is traced.
        "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
        "POWERTOOLS_TRACER_CAPTURE_ERROR": "false",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
        "AWS_LAMBDA_FUNCTION_NAME": "payloadstore-local",
        # One process serves every container here, so one pool serves every concurrent
        # invocation (long-polls hold a connection each): size it to the gateway's concurrency.
        "REDIS_MAX_CONNECTIONS": str(LOCAL_REDIS_MAX_CONNECTIONS),
    }
    env.update(extra or {})
    return env


def mint_tokens(ssm: Any, token_path: str, namespaces=NAMESPACES) -> dict[str, dict[str, str]]:
    """A client and a daemon token per namespace: {ns: {client_token, daemon_token}}."""
    ensure_functions_on_path()
    from payloadstore_devstack.tokens import TokenStore

    store = TokenStore(ssm, token_path)
    return {ns: {f"{role}_token": store.mint(ns, role)[0] for role in ROLES} for ns in namespaces}


def register_tokens(ssm: Any, token_path: str, tokens: dict[str, dict[str, str]]) -> None:
    """Put known plain tokens back into a fresh token store (same layout TokenStore.mint writes)."""
    ensure_functions_on_path()
    from payloadstore_devstack.tokens import hash_token

    for ns, pair in tokens.items():
        for role in ROLES:
            token = pair[f"{role}_token"]
            ssm.put_parameter(
                Name=f"{token_path.rstrip('/')}/{hash_token(token)}",
                Value=json.dumps(
                    {"namespace": ns, "role": role, "created_at": int(time.time())},
                    separators=(",", ":"),
                ),
                Type="String",
                Overwrite=True,
                Description=f"payloadstore {role} token for namespace {ns}",
            )


def write_private(target: Path, text: str) -> None:
    """Replace `target` atomically with a file only its owner can read (0600 from the start):
    for every file that holds tokens or token hashes."""
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)  # a leftover .tmp keeps its old mode through O_CREAT
    tmp.replace(target)


def save_parameters(ssm: Any, path: str, target: Path) -> int:
    """The token store as it is (hashes and their namespace/role, no secrets), so tokens minted
    with `payloadstore token create` survive a restart and revoked ones stay revoked."""
    params: list[dict[str, Any]] = []
    for page in ssm.get_paginator("get_parameters_by_path").paginate(
        Path=path.rstrip("/"), Recursive=True
    ):
        params.extend({"Name": p["Name"], "Value": p["Value"]} for p in page["Parameters"])
    write_private(target, json.dumps(params, indent=1))
    return len(params)


def restore_parameters(ssm: Any, source: Path) -> int:
    params = json.loads(source.read_text())
    for p in params:
        ssm.put_parameter(Name=p["Name"], Value=p["Value"], Type="String", Overwrite=True)
    return len(params)


def _port_of(url: str | None) -> int | None:
    try:
        return urlsplit(url).port if url else None
    except ValueError:
        return None


def _reusable_port(previous: int | None) -> int:
    if previous and not port_is_open(previous):
        return previous
    return free_port()


def _read_manifest(directory: Path) -> dict[str, dict]:
    try:
        return json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def snapshot_bucket(s3: Any, bucket: str, target: Path) -> int:
    """Copy every object to `target` with a manifest (moto keeps objects only in memory).

    Each object keeps the time it was first written, across any number of restarts, so the
    bucket's lifecycle still applies to it (see restore_bucket), and its tags (a namespace
    policy's retention class) and encryption (its KMS key)."""
    target.mkdir(parents=True, exist_ok=True)
    previous = _read_manifest(target)
    manifest: dict[str, dict] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            name = hashlib.sha256(key.encode()).hexdigest()
            (target / name).write_bytes(got["Body"].read())
            tags = s3.get_object_tagging(Bucket=bucket, Key=key).get("TagSet", [])
            manifest[key] = {
                "file": name,
                "content_type": got.get("ContentType"),
                "checksum_sha256": got.get("ChecksumSHA256"),
                "tags": {t["Key"]: t["Value"] for t in tags},
                "sse": got.get("ServerSideEncryption"),
                "kms_key": got.get("SSEKMSKeyId"),
                "written_at": previous.get(key, {}).get("written_at")
                or obj["LastModified"].timestamp(),
            }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1))
    kept = {m["file"] for m in manifest.values()} | {"manifest.json"}
    for stale in target.iterdir():
        if stale.name not in kept:
            stale.unlink()
    return len(manifest)


def restore_bucket(s3: Any, bucket: str, source: Path, now: float | None = None) -> int:
    """Put saved objects back, except those the lifecycle rule would have expired by now (the
    rule of their retention class, by their tag; else the prefix backstop), with their tags
    and encryption."""
    from urllib.parse import urlencode

    from payloadstore_controlplane.models.policy import RETENTION_DAYS, RETENTION_TAG

    manifest = _read_manifest(source)
    restored = 0
    for key, meta in manifest.items():
        path = source / meta["file"]
        written_at = meta.get("written_at")
        tags = meta.get("tags") or {}
        days = RETENTION_DAYS.get(tags.get(RETENTION_TAG, ""), PAYLOAD_EXPIRATION_DAYS)
        expired = (
            key.startswith((PAYLOAD_PREFIX, BLOB_PREFIX))
            and written_at is not None
            and written_at < (now or time.time()) - days * 86400
        )
        if expired or not path.exists():
            continue
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": path.read_bytes()}
        if meta.get("content_type"):
            kwargs["ContentType"] = meta["content_type"]
        if meta.get("checksum_sha256"):
            kwargs["ChecksumSHA256"] = meta["checksum_sha256"]
        if tags:
            kwargs["Tagging"] = urlencode(tags)
        if meta.get("sse") == "aws:kms" and meta.get("kms_key"):
            kwargs["ServerSideEncryption"] = "aws:kms"
            kwargs["SSEKMSKeyId"] = meta["kms_key"]
        s3.put_object(**kwargs)
        restored += 1
    return restored


@dataclass
class DevStack:
    state_dir: Path
    state_file: Path
    port: int = DEFAULT_PORT
    host: str = LOOPBACK
    bucket: str = DEV_BUCKET
    region: str = DEV_REGION
    token_path: str = DEV_TOKEN_PATH
    authorizer_cache_s: float = 5.0
    redis: RedisServer | LocalRedisCluster | None = None
    # "single" (one redis-server, AOF) or "cluster" (PAYLOADSTORE_REDIS=cluster: 3 primaries
    # with a replica each, the control plane in cluster mode with REDIS_MIN_REPLICA_ACKS=1).
    redis_mode: str = "single"
    # Replicas per primary in cluster mode (PAYLOADSTORE_REDIS_REPLICAS): 1, or 2 for the
    # production shape, where a failover leaves the promoted primary a replica to wait for.
    redis_replicas: int = 1
    moto: MotoServer | None = None
    gateway: RunningGateway | None = None
    scheduler: Any = None
    # 1.0: scheduled functions run every `every_minutes` (tests shrink the period).
    schedule_scale: float = 1.0
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)
    _s3: Any = None
    _ssm: Any = None
    _lock_handle: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _previous_state(self) -> dict:
        try:
            return json.loads((self.state_dir / "ports.json").read_text())
        except (OSError, ValueError):
            return {}

    def start(self) -> DevStack:
        if port_is_open(self.port, self.host):
            raise PortInUseError(
                f"port {self.port} on {self.host} is taken; stop what uses it or set PAYLOADSTORE_PORT"
            )
        find_redis_server()  # fails with one clear line before anything starts
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock_state_dir()
        previous = self._previous_state()
        try:
            redis_env: dict[str, str] = {}
            if self.redis_mode == "cluster":
                # A fresh cluster per start (no AOF, as ElastiCache): queued jobs do not
                # survive a restart of `make dev` in this mode.
                shutil.rmtree(self.state_dir / "redis-cluster", ignore_errors=True)
                self.redis = LocalRedisCluster(
                    data_dir=self.state_dir / "redis-cluster",
                    detach=True,
                    replicas=self.redis_replicas,
                ).start()
                redis_env = {"REDIS_CLUSTER": "true", "REDIS_MIN_REPLICA_ACKS": "1"}
            else:
                self.redis = RedisServer(
                    data_dir=self.state_dir / "redis",
                    port=_reusable_port(previous.get("redis_port")),
                    appendonly=True,
                    detach=True,
                ).start()
            self.moto = MotoServer(
                port=_reusable_port(previous.get("s3_port")),
                log_path=self.state_dir / "moto.log",
                detach=True,
            ).start()
            (self.state_dir / "ports.json").write_text(
                json.dumps(
                    {
                        "redis_port": getattr(self.redis, "port", previous.get("redis_port")),
                        "s3_port": self.moto.port,
                    }
                )
            )
            env = handler_env(
                redis_url=self.redis.url,
                s3_endpoint=self.moto.endpoint,
                bucket=self.bucket,
                region=self.region,
                token_path=self.token_path,
                # EMF metric lines would be half of the stack's output: off unless asked for
                # (POWERTOOLS_METRICS_DISABLED=false make dev).
                extra={"POWERTOOLS_METRICS_DISABLED": "true", **redis_env},
            )
            # The handlers read settings once per process (lru_cache): set them before any import.
            # POWERTOOLS_* the user already set (log level, say) are kept.
            for name, value in env.items():
                if name.startswith("POWERTOOLS_"):
                    os.environ.setdefault(name, value)
                else:
                    os.environ[name] = value
            self._prepare_aws(self.moto.endpoint)
            self.gateway = serve_in_thread(
                LocalGateway(region=self.region, authorizer_cache_s=self.authorizer_cache_s),
                self.host,
                self.port,
            )
            handler_class: Any = self.gateway.server.RequestHandlerClass  # carries .gateway
            failed = handler_class.gateway.warm()
            if failed:
                log.warning("some handlers could not be imported groups=%s", ",".join(failed))
            from payloadstore_devstack.scheduler import Scheduler

            self.scheduler = Scheduler(self.region, period_scale=self.schedule_scale).start()
            self.write_state_file()
        except BaseException:
            self.stop(snapshot=False)
            raise
        return self

    def _prepare_aws(self, moto_endpoint: str) -> None:
        import boto3
        from botocore.config import Config

        self._s3 = boto3.client(
            "s3",
            endpoint_url=moto_endpoint,
            region_name=self.region,
            config=Config(signature_version="s3v4"),
        )
        ssm = boto3.client("ssm", endpoint_url=moto_endpoint, region_name=self.region)
        create_payload_bucket(self._s3, self.bucket)
        restored = restore_bucket(self._s3, self.bucket, self.state_dir / "s3")
        if restored:
            log.info("restored objects count=%d bucket=%s", restored, self.bucket)
        self._ssm = ssm
        tokens_file = self.state_dir / "tokens.json"
        parameters_file = self.state_dir / "token-store.json"
        if tokens_file.exists():
            self.tokens = json.loads(tokens_file.read_text())
            if parameters_file.exists():
                restore_parameters(ssm, parameters_file)
            else:
                register_tokens(ssm, self.token_path, self.tokens)
        else:
            self.tokens = mint_tokens(ssm, self.token_path)
            write_private(tokens_file, json.dumps(self.tokens, indent=2))
        save_parameters(ssm, self.token_path, parameters_file)

    def state(self) -> dict:
        # Written only by start(), once both servers run.
        assert self.moto is not None and self.redis is not None
        state: dict[str, Any] = {
            "endpoint": self.endpoint,
            "s3_endpoint": self.moto.endpoint,
            "bucket": self.bucket,
            "redis_url": self.redis.url,
            "namespaces": self.tokens,
        }
        if isinstance(self.redis, LocalRedisCluster):
            # [{"port", "role": "primary"|"replica", "primary_port"}]
            state["redis_nodes"] = self.redis.redis_nodes()
        return state

    def write_state_file(self) -> None:
        write_private(self.state_file, json.dumps(self.state(), indent=2) + "\n")

    def _lock_state_dir(self) -> None:
        """One stack per state dir: two redis-servers appending to one AOF would corrupt it."""
        import fcntl

        handle = open(self.state_dir / "stack.lock", "a+")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise ServiceError(
                f"another local stack (pid {holder}) is using {self.state_dir}; stop it, "
                "or give this one its own PAYLOADSTORE_STATE_DIR"
            ) from e
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle = handle

    def stop(self, snapshot: bool = True) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        if (
            snapshot
            and self._s3 is not None
            and self.moto is not None
            and self.moto.proc is not None
        ):
            try:
                saved = snapshot_bucket(self._s3, self.bucket, self.state_dir / "s3")
                log.info("saved objects count=%d dir=%s", saved, self.state_dir / "s3")
                tokens = save_parameters(
                    self._ssm, self.token_path, self.state_dir / "token-store.json"
                )
                log.info("saved token store count=%d", tokens)
            except Exception as e:  # noqa: BLE001 - stopping must go on
                log.warning("could not save bucket objects or tokens error=%s", e)
        if self.moto is not None:
            self.moto.stop()
        if self.redis is not None:
            self.redis.stop()
        try:
            self.state_file.unlink()
        except FileNotFoundError:
            pass
        if self._lock_handle is not None:
            self._lock_handle.close()  # releases the flock
            self._lock_handle = None


def banner(stack: DevStack) -> str:
    """What the terminal (and any log it is piped to) shows: where things are, never a token."""
    # Shown once start() returned: both servers run.
    assert stack.moto is not None and stack.redis is not None
    state_file = stack.state_file
    redis_line = f"{stack.redis.url}  data={stack.state_dir / 'redis'}"
    if isinstance(stack.redis, LocalRedisCluster):
        redis_line = (
            f"cluster of {len(stack.redis.servers)} nodes (3 primaries + "
            f"{stack.redis.replicas} replica{'s' if stack.redis.replicas > 1 else ''} each), "
            f"seed {stack.redis.url}; nodes in {state_file} (redis_nodes)"
        )
    token = (
        f'$(.venv/bin/python -c \'import json; print(json.load(open("{state_file}"))'
        '["namespaces"]["dev"]["client_token"])\')'
    )
    return f"""
payloadstore local stack is up
  endpoint     {stack.endpoint}
  s3           {stack.moto.endpoint}  bucket={stack.bucket}
  redis        {redis_line}  engine={engine()}
  tokens       {state_file}  (mode 0600; namespaces: {", ".join(stack.tokens)})

  curl {stack.endpoint}/v1/health
  curl -H "Authorization: Bearer {token}" {stack.endpoint}/v1/config

  .venv/bin/python -c 'from payloadstore import Client; print(Client.from_devstack().config)'
  make demo      # a small and an 8 MiB job through a daemon, with the bytes each moved

Ctrl-C stops everything (data stays in {stack.state_dir}).
"""


def _defaults_from_env() -> dict:
    return {
        "port": int(os.environ.get("PAYLOADSTORE_PORT", DEFAULT_PORT)),
        "state_dir": Path(os.environ.get("PAYLOADSTORE_STATE_DIR", ".devstack")),
        "state_file": Path(os.environ.get("PAYLOADSTORE_STATE_FILE", ".devstack.json")),
        "authorizer_cache_s": float(os.environ.get("PAYLOADSTORE_AUTHORIZER_CACHE_S", "5")),
        "redis_mode": os.environ.get("PAYLOADSTORE_REDIS", "single") or "single",
        "redis_replicas": int(os.environ.get("PAYLOADSTORE_REDIS_REPLICAS", "1") or "1"),
    }


def main(argv: list[str] | None = None) -> int:
    defaults = _defaults_from_env()
    parser = argparse.ArgumentParser(
        prog="payloadstore dev", description="run the control plane locally"
    )
    parser.add_argument(
        "--port", type=int, default=defaults["port"], help="gateway port (PAYLOADSTORE_PORT)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=defaults["state_dir"],
        help="redis data, tokens, saved objects (PAYLOADSTORE_STATE_DIR)",
    )
    parser.add_argument(
        "--state-file",
        type=Path,
        default=defaults["state_file"],
        help="where the endpoint and tokens are written (PAYLOADSTORE_STATE_FILE)",
    )
    parser.add_argument(
        "--authorizer-cache-s",
        type=float,
        default=defaults["authorizer_cache_s"],
        help="authorizer result cache TTL (PAYLOADSTORE_AUTHORIZER_CACHE_S)",
    )
    parser.add_argument(
        "--redis",
        choices=("single", "cluster"),
        default=defaults["redis_mode"],
        help="one redis-server, or a local cluster of 3 primaries with a replica each "
        "(PAYLOADSTORE_REDIS)",
    )
    parser.add_argument(
        "--redis-replicas",
        type=int,
        choices=(1, 2),
        default=defaults["redis_replicas"],
        help="replicas per primary with --redis cluster: 1, or 2 for the production shape "
        "(PAYLOADSTORE_REDIS_REPLICAS)",
    )
    args = parser.parse_args(argv)
    configure_logging()

    stop_requested = threading.Event()

    def request_stop(signum, _frame) -> None:
        log.info("stopping signal=%s", signal.Signals(signum).name)
        stop_requested.set()

    # SIGHUP too: a closed terminal should save the bucket and stop Redis cleanly like Ctrl-C.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, request_stop)

    stack = DevStack(
        state_dir=args.state_dir.resolve(),
        state_file=args.state_file.resolve(),
        port=args.port,
        authorizer_cache_s=args.authorizer_cache_s,
        redis_mode=args.redis,
        redis_replicas=args.redis_replicas,
    )
    try:
        stack.start()
    except (PortInUseError, ServiceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(banner(stack), flush=True)
    try:
        while not stop_requested.wait(0.5):
            pass
    finally:
        stack.stop()
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
