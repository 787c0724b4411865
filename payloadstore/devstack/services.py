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
# The emulator verifies presigned URLs against these (s3_emulator.py); the handlers sign with them.
LOCAL_ACCESS_KEY_ID = "local"
LOCAL_SECRET_ACCESS_KEY = "local-secret"

# The lifecycle the CDK stack puts on the bucket (infra/ asserts the same values).
PAYLOAD_PREFIX = "payloads/"
PAYLOAD_EXPIRATION_DAYS = 2
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


def find_redis_server(install: bool = True) -> str:
    """Path of a redis-server binary; installs Debian's package when missing and we are root."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if found:
        return found
    if install and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=False, env=env)
        found = shutil.which("redis-server")
        if found:
            return found
    raise ServiceError(
        "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server; "
        "macOS: brew install redis) and run again"
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

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        binary = find_redis_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
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


@dataclass
class MotoServer:
    """moto's HTTP server: S3 with real presigned URLs, and SSM Parameter Store for tokens."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    detach: bool = False  # see _own_group_dying_with_parent (the dev stack sets it)

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        # The child writes this log for as long as it runs: no context manager.
        out = open_private_log(self.log_path) if self.log_path else subprocess.DEVNULL
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "payloadstore.devstack.s3_emulator",
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
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        terminate(self.proc, timeout_s)
        self.proc = None


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
    """Create the bucket as the CDK stack does: SSE-S3, public access blocked, payloads/ lifecycle."""
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
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": LIFECYCLE_RULE_ID,
                    "Filter": {"Prefix": PAYLOAD_PREFIX},
                    "Status": "Enabled",
                    "Expiration": {"Days": PAYLOAD_EXPIRATION_DAYS},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_DAYS},
                }
            ]
        },
    )


def _main(argv: list[str]) -> int:
    """`python -m payloadstore.devstack.services find-redis`: the Makefile's redis check."""
    if argv[:1] != ["find-redis"]:
        print("usage: python -m payloadstore.devstack.services find-redis", file=sys.stderr)
        return 2
    try:
        print(find_redis_server())
    except ServiceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
