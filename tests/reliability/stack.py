"""The reliability suite's own stack: redis-server (AOF) it may SIGKILL and restart, the S3
emulator, the local gateway in a process of its own, and daemon processes it supervises.

Everything listens on free loopback ports and lives under one state directory, so the suite
never meets a developer's `make dev` stack or another test session.

Optional parts: a Redis proxy (redis_proxy.py) between the main gateway and redis-server, which
can hold script replies past the control plane's reply timeout; side gateways with settings of
their own (e.g. a short RESULT_TTL_S) against the same redis-server and S3 emulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from payloadstore_devstack.gateway import GatewayProcess
from payloadstore_devstack.services import (
    MotoServer,
    RedisServer,
    create_payload_bucket,
    free_port,
    local_aws_env,
    port_is_open,
    terminate,
)
from payloadstore_devstack.stack import handler_env, mint_tokens

REPO_ROOT = Path(__file__).resolve().parents[2]
BUCKET = "payloadstore-reliability"
REGION = "us-east-1"
TOKEN_PATH = "/payloadstore-reliability/tokens"
NAMESPACE = "dev"


@dataclass
class RedisProxy:
    """tests/reliability/redis_proxy.py in a process of its own, on a free loopback port."""

    state_dir: Path
    upstream_port: int
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def control_path(self) -> Path:
        return self.state_dir / "redis-proxy-control.json"

    @property
    def stats_path(self) -> Path:
        return self.state_dir / "redis-proxy-stats.json"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProxy:
        self.control_path.write_text("{}")
        log = open(self.state_dir / "redis-proxy.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.reliability.redis_proxy",
                "--listen-port",
                str(self.port),
                "--upstream-port",
                str(self.upstream_port),
                "--control",
                str(self.control_path),
                "--stats",
                str(self.stats_path),
            ],
            cwd=str(REPO_ROOT),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        if not wait_for_port(self.port, 20):
            raise RuntimeError(f"the redis proxy did not listen on port {self.port}")
        return self

    def delay(self, *, seconds: float, delay_s: float, p: float, max_delays: int, scripts=None):
        """Open a window of `seconds` in which script replies may be held `delay_s`."""
        control = {
            "until": time.time() + seconds,
            "delay_s": delay_s,
            "p": p,
            "max": max_delays,
            "scripts": scripts,
        }
        tmp = self.control_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(control))
        os.replace(tmp, self.control_path)

    def stats(self) -> dict:
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        terminate(self.proc, 5)
        self.proc = None


@dataclass
class ReliabilityStack:
    state_dir: Path
    settings: dict[str, str]
    redis: RedisServer | None = None
    moto: MotoServer | None = None
    gateway: GatewayProcess | None = None
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)
    s3: object = None
    with_redis_proxy: bool = False
    redis_proxy: RedisProxy | None = None
    side_gateways: dict[str, GatewayProcess] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self.gateway.url

    def token(self, role: str) -> str:
        return self.tokens[NAMESPACE][f"{role}_token"]

    def start(self) -> ReliabilityStack:
        import boto3
        from botocore.config import Config

        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.redis = RedisServer(data_dir=self.state_dir / "redis", appendonly=True).start()
        self.moto = MotoServer(log_path=self.state_dir / "s3.log").start()
        aws = local_aws_env(self.moto.endpoint, REGION)
        os.environ.update(aws)
        self.s3 = boto3.client(
            "s3",
            endpoint_url=self.moto.endpoint,
            region_name=REGION,
            config=Config(signature_version="s3v4"),
        )
        create_payload_bucket(self.s3, BUCKET)
        ssm = boto3.client("ssm", endpoint_url=self.moto.endpoint, region_name=REGION)
        self.tokens = mint_tokens(ssm, TOKEN_PATH, namespaces=(NAMESPACE,))
        redis_url = self.redis.url
        if self.with_redis_proxy:
            self.redis_proxy = RedisProxy(self.state_dir, self.redis.port).start()
            redis_url = self.redis_proxy.url
        self.gateway = self._gateway(redis_url, self.settings, "gateway.log")
        return self

    def _gateway(self, redis_url: str, settings: dict[str, str], log_name: str) -> GatewayProcess:
        env = handler_env(
            redis_url=redis_url,
            s3_endpoint=self.moto.endpoint,
            bucket=BUCKET,
            region=REGION,
            token_path=TOKEN_PATH,
            extra={"POWERTOOLS_LOG_LEVEL": "WARNING", **settings},
        )
        return GatewayProcess(
            env=env, log_path=self.state_dir / log_name, authorizer_cache_s=30.0
        ).start()

    def start_side_gateway(self, name: str, overrides: dict[str, str]) -> GatewayProcess:
        """Another gateway process on the same redis-server (directly) and S3 emulator, with
        the main settings changed by `overrides` (e.g. a short RESULT_TTL_S)."""
        gateway = self._gateway(
            self.redis.url, {**self.settings, **overrides}, f"gateway-{name}.log"
        )
        self.side_gateways[name] = gateway
        return gateway

    def dead(self) -> list[str]:
        """The parts of the stack whose process exited (none of them should, but SIGKILL)."""
        parts = {"gateway": self.gateway, "s3 emulator": self.moto, "redis-server": self.redis}
        if self.with_redis_proxy:
            parts["redis proxy"] = self.redis_proxy
        for name, gateway in self.side_gateways.items():
            parts[f"gateway {name}"] = gateway
        return [
            name
            for name, part in parts.items()
            if part is None or part.proc is None or part.proc.poll() is not None
        ]

    def kill_redis(self) -> None:
        """SIGKILL: no shutdown, no final AOF rewrite; what was written to the AOF is all."""
        proc = self.redis.proc
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.redis.proc = None

    def start_redis(self) -> None:
        self.redis.start()

    def stop(self) -> None:
        parts = [
            *self.side_gateways.values(),
            self.gateway,
            self.redis_proxy,
            self.moto,
            self.redis,
        ]
        for part in parts:
            if part is not None:
                with contextlib.suppress(Exception):  # stopping must go on
                    part.stop()


@dataclass
class DaemonProcess:
    """One daemon process (tests/reliability/worker.py), restarted by the supervisor when it dies."""

    name: str
    queues: list[str]
    concurrency: int
    stack: ReliabilityStack
    endpoint: str | None = None  # another gateway than the main one
    extra_args: list[str] = field(default_factory=list)  # worker.py options
    proc: subprocess.Popen | None = None
    starts: int = 0
    deaths: int = 0
    wanted: bool = True

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "tests.reliability.worker",
            "--endpoint",
            self.endpoint or self.stack.endpoint,
            "--namespace",
            NAMESPACE,
            "--queues",
            ",".join(self.queues),
            "--concurrency",
            str(self.concurrency),
            "--state-dir",
            str(self.stack.state_dir),
            "--name",
            self.name,
            *self.extra_args,
        ]
        log = open(self.stack.state_dir / f"daemon-{self.name}.log", "ab")  # noqa: SIM115
        env = {
            **os.environ,
            "PAYLOADSTORE_TOKEN": self.stack.token("daemon"),
            "PYTHONUNBUFFERED": "1",
        }
        self.proc = subprocess.Popen(
            args, cwd=str(REPO_ROOT), env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        self.wanted = False
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


class Supervisor:
    """Restarts daemon processes that die (SIGKILL by the suite, or a poison job), like systemd."""

    def __init__(self, daemons: list[DaemonProcess]):
        self.daemons = daemons
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)

    def add(self, daemon: DaemonProcess) -> None:
        with self._lock:
            self.daemons.append(daemon)
            daemon.start()

    def start(self) -> Supervisor:
        for d in self.daemons:
            d.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                for d in self.daemons:
                    if d.wanted and d.proc is not None and d.proc.poll() is not None:
                        d.deaths += 1
                        d.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for d in self.daemons:  # all asked at once, then waited for: idle ones end within a poll
            d.wanted = False
            if d.alive():
                d.proc.send_signal(signal.SIGTERM)
        for d in self.daemons:
            d.stop()


def wait_for_port(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_is_open(port):
            return True
        time.sleep(0.05)
    return False
