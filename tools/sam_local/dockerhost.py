"""A Docker engine for `sam local invoke`: the machine's own, or a private dockerd under build/.

The machine's Docker is used when `docker info` answers (a developer's laptop). Otherwise, as
root on Debian, Debian's `docker.io` is installed with apt (its init scripts kept from starting a
system-wide daemon) and a private dockerd is started:

- on a socket, exec root and data root under build/ (images survive between runs there);
- with no iptables rules, no masquerading and no IP forwarding: nothing a container sends is
  routed off this machine;
- on a Linux bridge of its own (a name and a /24 derived from the build directory), which is
  removed again on exit; dockerd would otherwise leave `docker0` behind;
- where iptables works, with INPUT rules on that bridge that let containers open connections
  only to the ports of the local stack's relays (see relay.py): every other service of this
  machine stays out of their reach.

The daemon is stopped by PID (SIGTERM, then SIGKILL) on every exit path the caller's
`finally` covers, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.sam_local.log import say

APT_PACKAGES = ("docker.io", "debootstrap")
# Unix socket paths are limited to 107 bytes; containerd's lives under the exec root.
MAX_SOCKET_PATH = 100


class DockerError(RuntimeError):
    """No Docker engine could be found or started."""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    check = kwargs.pop("check", False)
    return subprocess.run(cmd, check=check, **kwargs)


def docker_cli() -> str | None:
    return shutil.which("docker")


def machine_docker_answers() -> bool:
    """`docker info` against the environment's Docker (DOCKER_HOST or the default socket)."""
    cli = docker_cli()
    if cli is None:
        return False
    try:
        return _run([cli, "info", "--format", "{{.ServerVersion}}"], timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def apt_install(packages: tuple[str, ...]) -> None:
    """Install Debian packages without letting their init scripts start services."""
    missing = [
        p
        for p in packages
        if _run(["dpkg-query", "-W", "-f=${Status}", p]).stdout != "install ok installed"
    ]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise DockerError(
            "no Docker engine answers `docker info`, and installing one needs root on Debian "
            f"(apt-get install {' '.join(missing)}); start Docker or run as root"
        )
    say(f"installing {' '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        # The standard way to keep a package's postinst from starting its service: a dockerd with
        # the default (masquerading, iptables) network must never start here.
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        update = _run(["apt-get", "update", "-qq"], env=env)
        if update.returncode != 0:
            say(f"warning: apt-get update failed: {update.stderr.strip()[-500:]}")
        result = _run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env
        )
        if result.returncode != 0:
            raise DockerError(
                f"apt-get install {' '.join(missing)} failed: {result.stderr[-2000:]}"
            )
    finally:
        if own_policy:
            policy.unlink(missing_ok=True)


@dataclass
class DockerEngine:
    """What SAM and the docker CLI need to reach an engine, and what to undo at the end."""

    env: dict[str, str]  # DOCKER_HOST and friends for child processes
    kind: str  # "machine" | "private"
    gateway_ip: str  # address of the host on the containers' network
    network: str | None = None  # docker network name for `sam --docker-network`
    firewall: str = "none"  # what keeps containers to the relays: "iptables" | "none"

    def docker(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return _run([docker_cli() or "docker", *args], env={**os.environ, **self.env}, **kwargs)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = _run(["ip", "-4", "-o", "addr", "show"]).stdout + _run(["ip", "-4", "route"]).stdout
    nets = []
    for word in out.split():
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(word, strict=False))
    return nets


def pick_subnet(seed: str) -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that nothing on this machine uses, starting at one the seed picks."""
    used = _used_networks()
    start = int(_hash(seed)[:4], 16) % 250 + 2
    for i in range(250):
        third = (start + i) % 250 + 2
        net = ipaddress.ip_network(f"10.213.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise DockerError("no free /24 in 10.213.0.0/16 for the private docker bridge")


@dataclass
class PrivateDockerd:
    """dockerd of our own: socket, exec root and data root under `root`; own bridge; by PID."""

    root: Path
    bridge: str = ""
    subnet: ipaddress.IPv4Network | None = None
    proc: subprocess.Popen | None = None
    chain: str = ""
    _log: object = None
    allowed_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        seed = _hash(str(self.root.resolve()))
        self.bridge = self.bridge or f"psam{seed[:8]}"  # interface names: 15 bytes at most
        self.chain = f"PSAM-{seed[:8]}"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def exec_root(self) -> Path:
        return self.root / "x"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def gateway_ip(self) -> str:
        return str(next(self.subnet.hosts()))

    def _stale_cleanup(self) -> None:
        """A previous run killed with SIGKILL may have left its daemon, bridge or rules behind."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = 0
        if pid and _is_our_dockerd(pid, self.root):
            say(f"stopping a dockerd left running by an earlier run (pid {pid})")
            _stop_pid(pid)
        self._remove_firewall()
        if _run(["ip", "link", "show", self.bridge]).returncode == 0:
            _run(["ip", "link", "delete", self.bridge])

    def start(self, timeout_s: float = 60.0) -> DockerEngine:
        apt_install(APT_PACKAGES)
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        if not os.path.exists(dockerd):
            raise DockerError("dockerd not found after installing docker.io")
        self.root.mkdir(parents=True, exist_ok=True)
        if len(str(self.exec_root / "containerd" / "containerd.sock.ttrpc")) > MAX_SOCKET_PATH:
            raise DockerError(
                f"the build directory path is too long for dockerd's sockets ({self.exec_root}); "
                "clone the repository into a shorter path"
            )
        self._stale_cleanup()
        self.subnet = pick_subnet(str(self.root.resolve()))
        prefix = self.subnet.prefixlen
        for cmd in (
            ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.gateway_ip}/{prefix}", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            r = _run(cmd)
            if r.returncode != 0:
                raise DockerError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        config = self.root / "daemon.json"
        config.write_text("{}\n")
        log_path = self.root / "dockerd.log"
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        args = [
            dockerd,
            "--config-file",
            str(config),
            "--host",
            f"unix://{self.socket}",
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.exec_root),
            "--pidfile",
            str(self.pidfile),
            "--bridge",
            self.bridge,
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--ip6tables=false",
            "--userland-proxy=true",
            "--log-level",
            "warn",
        ]
        say(
            f"starting a private dockerd (bridge {self.bridge} {self.gateway_ip}/{prefix}, "
            f"socket {self.socket}, log {log_path})"
        )
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us; we stop it in order
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, before any thread
        )
        env = {"DOCKER_HOST": f"unix://{self.socket}"}
        engine = DockerEngine(env=env, kind="private", gateway_ip=self.gateway_ip)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise DockerError(f"dockerd exited with {self.proc.returncode}: {tail}")
            if self.socket.exists() and engine.docker("info", timeout=20).returncode == 0:
                break
            if time.monotonic() > deadline:
                raise DockerError(f"dockerd did not answer within {timeout_s:.0f}s; see {log_path}")
            time.sleep(0.2)
        return engine

    def restrict(self, engine: DockerEngine, ports: list[int]) -> None:
        """Containers on the bridge may open connections to these host ports only."""
        iptables = shutil.which("iptables")
        if iptables is None:
            say("note: no iptables: containers could reach any service listening on all addresses")
            return
        self._remove_firewall()
        rules = [
            ["-N", self.chain],
            [
                "-A",
                self.chain,
                "-m",
                "conntrack",
                "--ctstate",
                "ESTABLISHED,RELATED",
                "-j",
                "ACCEPT",
            ],
            *[
                [
                    "-A",
                    self.chain,
                    "-p",
                    "tcp",
                    "-d",
                    self.gateway_ip,
                    "--dport",
                    str(p),
                    "-j",
                    "ACCEPT",
                ]
                for p in ports
            ],
            ["-A", self.chain, "-j", "DROP"],
            ["-I", "INPUT", "-i", self.bridge, "-j", self.chain],
        ]
        for rule in rules:
            r = _run([iptables, "-w", *rule])
            if r.returncode != 0:
                say(
                    f"note: iptables refused ({r.stderr.strip()}); containers could reach any "
                    "service listening on all addresses"
                )
                self._remove_firewall()
                return
        engine.firewall = "iptables"

    def _remove_firewall(self) -> None:
        iptables = shutil.which("iptables")
        if iptables is None:
            return
        while (
            _run(
                [iptables, "-w", "-D", "INPUT", "-i", self.bridge, "-j", self.chain], timeout=30
            ).returncode
            == 0
        ):
            pass
        _run([iptables, "-w", "-F", self.chain], timeout=30)
        _run([iptables, "-w", "-X", self.chain], timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            _stop_pid(self.proc.pid, self.proc)
            self.proc = None
        self._remove_firewall()
        if _run(["ip", "link", "show", self.bridge]).returncode == 0:
            _run(["ip", "link", "set", self.bridge, "down"])
            _run(["ip", "link", "delete", self.bridge])
        if self._log is not None:
            self._log.close()
            self._log = None


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _is_our_dockerd(pid: int, root: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(cmdline)
        and cmdline[0].endswith(b"dockerd")
        and str(root).encode() in b" ".join(cmdline)
    )


def _stop_pid(pid: int, proc: subprocess.Popen | None = None, timeout_s: float = 20.0) -> None:
    """SIGTERM (dockerd stops its containers and its containerd), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(10)


MACHINE_NETWORK = "payloadstore-sam-local"


def machine_engine() -> DockerEngine:
    """The machine's Docker, with a network of ours that does not masquerade: containers reach
    the host's address on it, and nothing beyond this machine."""
    engine = DockerEngine(env={}, kind="machine", gateway_ip="", network=MACHINE_NETWORK)
    found = engine.docker("network", "inspect", MACHINE_NETWORK)
    if found.returncode != 0:
        created = engine.docker(
            "network",
            "create",
            "--driver",
            "bridge",
            "-o",
            "com.docker.network.bridge.enable_ip_masquerade=false",
            MACHINE_NETWORK,
        )
        if created.returncode != 0:
            raise DockerError(f"docker network create failed: {created.stderr.strip()}")
        found = engine.docker("network", "inspect", MACHINE_NETWORK)
    info = json.loads(found.stdout)[0]
    engine.gateway_ip = info["IPAM"]["Config"][0]["Gateway"]
    return engine
