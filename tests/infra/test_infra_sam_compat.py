"""What `sam local invoke -t cdk.out/PayloadStore-dev.template.json <Function> -e events/<event>.json`
does, minus the container: for every AWS::Lambda::Function of the synthesized template, resolve
its Handler inside its staged code asset the way the Lambda runtime does, give it the template's
environment (AWS resources swapped for the local redis-server and moto's S3/SSM), and serve the
function's sample events in-process.

The handler modules are imported from the staged asset, not from the source tree; third-party
packages come from this interpreter (the layer holds Linux CPython 3.13 wheels, which a test of
its own checks).
"""

from __future__ import annotations

import base64
import copy
import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.functions import LOCAL_ENDPOINT_ENV
from payloadstore_controlplane.models.settings import SETTINGS_ENV
from payloadstore_controlplane.routes import FUNCTIONS, ROUTES, SCHEDULES

pytestmark = pytest.mark.infra

EVENTS = Path(__file__).resolve().parents[2] / "events"
PLACEHOLDER_TOKEN = "pst_replace_with_a_minted_token"
# The template's values that name AWS resources; everything else is used exactly as deployed.
# (The default dev stage is serverless: no AUTH secret; its token path carries the stack's id.)
RESOURCE_BACKED = {"PAYLOAD_BUCKET", "REDIS_URL", "KMS_KEY_ARN", "TOKEN_PARAMETER_PATH"}
# What a deployment's token path is under SAM, where the stack id has no value.
LOCAL_TOKEN_PATH = "/payloadstore/dev/tokens/sam-local"
# A database of its own on the session redis-server, emptied first: the events use fixed names
# (namespace "dev", queue "default") that other suites may use too.
REDIS_DB = 9

# What each sample event must get back on a store that has seen nothing but the events before it.
EXPECTED_STATUS: dict[str, set[int]] = {
    "presign_put": {200},
    "presign_get": {404},  # a key never issued to the namespace
    "enqueue_inline": {201},
    "enqueue_ref": {409},  # a reference to a key never issued
    "job_status": {404},  # the sample job id does not exist
    "result_get": {404},
    "daemon_poll": {200},  # picks up the job enqueue_inline created
    "result_post": {404},  # the sample job id does not exist
    "failure_report": {404},
    "config": {200},
    "health": {200},
    "health_details": {200},
    "openapi": {200},
}
ROUTE_EVENT_ORDER = list(EXPECTED_STATUS)


class LambdaContext:
    """The attributes Powertools and the handlers read from Lambda's context object."""

    def __init__(self, function_name: str, memory_mb: int):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "sam-compat"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def load_event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def event_catalog() -> dict[str, list[str]]:
    """Function group -> names of the events under events/ that it serves."""
    routes = {(r.method, r.path): r.function for r in ROUTES}
    scheduled = {s.event: s.function for s in SCHEDULES}
    catalog: dict[str, list[str]] = {group: [] for group in FUNCTIONS}
    for path in sorted(EVENTS.glob("*.json")):
        if path.name.startswith("_"):
            continue
        event = json.loads(path.read_text())
        if path.stem in scheduled:
            group = scheduled[path.stem]
        elif event.get("type") == "REQUEST" and "methodArn" in event:
            group = "authorizer"
        elif "action" in event and "httpMethod" not in event:
            group = "admin"
        else:
            group = routes.get((event.get("httpMethod"), event.get("resource")))
            assert group, f"events/{path.name} is for no route of routes.py"
        catalog[group].append(path.stem)
    return catalog


@contextmanager
def code_asset_importable(asset: Path):
    """Make `payloadstore_controlplane` resolve inside the staged asset, as /var/task does on Lambda, and
    put the source-tree modules back afterwards."""
    own = lambda name: (
        name == "payloadstore_controlplane" or name.startswith("payloadstore_controlplane.")
    )
    saved = {n: m for n, m in sys.modules.items() if own(n)}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(asset))
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # keep the staged asset exactly as synth left it
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.dont_write_bytecode = dont_write
        sys.path.remove(str(asset))
        for name in [n for n in sys.modules if own(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def resolve_handler(handler: str, asset: Path):
    """`module.path.function` -> the callable, loaded from the asset (Lambda's bootstrap rule)."""
    module_name, _, function_name = handler.rpartition(".")
    module = importlib.import_module(module_name)
    assert Path(module.__file__).resolve().is_relative_to(asset.resolve()), (
        f"{module_name} was imported from {module.__file__}, not from the staged asset {asset}"
    )
    return getattr(module, function_name)


class DeployedFunction:
    def __init__(self, logical_id: str, resource: dict, outdir: Path):
        self.logical_id = logical_id
        self.props = resource["Properties"]
        self.asset = outdir / resource["Metadata"]["aws:asset:path"]
        self.env = self.props["Environment"]["Variables"]

    def local_env(self, redis: LocalRedis, bucket: str) -> dict[str, str]:
        literal = {k: v for k, v in self.env.items() if isinstance(v, str)}
        assert set(self.env) - set(literal) == RESOURCE_BACKED, "an unexpected non-literal variable"
        local = {
            **literal,
            "PAYLOAD_BUCKET": bucket,
            # Local Redis has neither TLS nor AUTH, so no secret to fetch.
            "REDIS_URL": redis.url,
            # The template asks a replica to confirm each write; the local nodes have none.
            "REDIS_MIN_REPLICA_ACKS": "0",
            # No KMS locally: kms_key `stack` takes the S3 emulator's stand-in key.
            "KMS_KEY_ARN": "",
            # Local Redis takes no IAM token: no ElastiCache user to sign for.
            "REDIS_IAM_USER": "",
            "TOKEN_PARAMETER_PATH": LOCAL_TOKEN_PATH,
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        if not redis.cluster:
            local["REDIS_CLUSTER"] = "false"
        return local

    def context(self) -> LambdaContext:
        return LambdaContext(self.logical_id, self.props["MemorySize"])


@pytest.fixture(scope="module")
def deployed(cli_synth) -> dict[str, DeployedFunction]:
    functions = {
        k: DeployedFunction(k, v, cli_synth.outdir)
        for k, v in cli_synth.template["Resources"].items()
        if v["Type"] == "AWS::Lambda::Function"
    }
    by_group = {}
    for group, handler in FUNCTIONS.items():
        (fn,) = [f for f in functions.values() if f.props["Handler"] == handler]
        by_group[group] = fn
    assert len(by_group) == len(functions), (
        "a function of the template serves no group of routes.py"
    )
    return by_group


@dataclass
class LocalRedis:
    url: str
    cluster: bool


@pytest.fixture(scope="module")
def cluster_redis(tmp_path_factory):
    """A one-node Redis Cluster (all 16384 slots on one redis-server): the deployed functions run
    with REDIS_CLUSTER=true, so every key they touch in one command must share a slot."""
    from payloadstore_devstack.services import find_redis_server, free_port, port_is_open

    port = free_port()
    workdir = tmp_path_factory.mktemp("redis-cluster")
    proc = subprocess.Popen(
        [
            find_redis_server(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(workdir),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(workdir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(lambda: port_is_open(port), "cluster redis-server to listen")
        import redis

        node = redis.Redis(port=port)
        node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        _wait(
            lambda: b"cluster_state:ok" in node.execute_command("CLUSTER", "INFO"),
            "cluster state ok",
        )
        yield LocalRedis(f"redis://127.0.0.1:{port}/0", cluster=True)
    finally:
        proc.terminate()
        proc.wait(10)


def _wait(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def single_redis(redis_server) -> LocalRedis:
    import redis

    url = redis_server.url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    redis.Redis.from_url(url).flushdb()
    return LocalRedis(url, cluster=False)


@pytest.fixture(params=["single-node", "cluster"])
def local_redis(request) -> LocalRedis:
    """The session redis-server, and a one-node cluster to run the template's REDIS_CLUSTER=true."""
    if request.param == "cluster":
        return request.getfixturevalue("cluster_redis")
    return request.getfixturevalue("single_redis")


@pytest.fixture
def function_env(monkeypatch, aws_env, single_redis, payload_bucket):
    """Applies one function's environment for an in-process invocation."""
    redis_target = single_redis

    def apply(fn: DeployedFunction, redis: LocalRedis | None = None) -> None:
        # Nothing another suite left in this process may leak into the function's settings.
        for name in list(SETTINGS_ENV.values()) + [
            k for k in os.environ if k.startswith("POWERTOOLS_")
        ]:
            if name not in aws_env:
                monkeypatch.delenv(name, raising=False)
        for k, v in fn.local_env(redis or redis_target, payload_bucket).items():
            monkeypatch.setenv(k, v)
        # The template declares the local endpoint variables empty (AWS's endpoints); like
        # `sam local invoke --env-vars`, point them at the emulator.
        for name in LOCAL_ENDPOINT_ENV:
            if aws_env.get(name):
                monkeypatch.setenv(name, aws_env[name])

    return apply


def invoke(fn: DeployedFunction, event: dict):
    with code_asset_importable(fn.asset):
        handler = resolve_handler(fn.props["Handler"], fn.asset)
        return handler(copy.deepcopy(event), fn.context())


def test_every_route_and_function_has_sample_events():
    catalog = event_catalog()
    for route in ROUTES:
        assert (EVENTS / f"{route.event}.json").is_file(), f"missing events/{route.event}.json"
        assert route.event in catalog[route.function]
    for group, events in catalog.items():
        assert events, f"no sample event for the {group} function"


def test_every_function_of_the_template_resolves_its_handler_in_its_asset(deployed, function_env):
    for group, fn in deployed.items():
        # Given the function's own environment (module-level settings may read it at import)
        function_env(fn)
        # When its handler string is resolved inside its staged code asset
        with code_asset_importable(fn.asset):
            handler = resolve_handler(fn.props["Handler"], fn.asset)
        # Then it is a callable of (event, context)
        assert callable(handler), group


def _body(response: dict):
    body = response.get("body") or ""
    if response.get("isBase64Encoded"):
        return base64.b64decode(body)
    return body


def test_api_functions_serve_their_events_against_local_redis_and_s3(
    deployed, function_env, local_redis
):
    catalog = event_catalog()
    responses = {}
    for name in ROUTE_EVENT_ORDER + sorted(
        {n for events in catalog.values() for n in events} - set(ROUTE_EVENT_ORDER)
    ):
        group = next((g for g, events in catalog.items() if name in events), None)
        if group in (None, "authorizer", "admin") or group in {s.function for s in SCHEDULES}:
            continue
        fn = deployed[group]
        # Given the function's deployed environment pointed at the local services
        function_env(fn, local_redis)
        # When API Gateway's event is served by the handler resolved in the staged asset
        response = invoke(fn, load_event(name))
        # Then it is a proxy response with the status the wire promises for that request
        assert isinstance(response, dict) and isinstance(response.get("statusCode"), int), (
            name,
            response,
        )
        expected = EXPECTED_STATUS.get(name, set(range(200, 500)))
        assert response["statusCode"] in expected, (
            name,
            response["statusCode"],
            _body(response)[:500],
        )
        responses[name] = response
    assert set(EXPECTED_STATUS) <= set(responses)
    # And health, run with the deployed settings, found the local bucket configured as deployed
    assert json.loads(_body(responses["health"])), "health answered an empty body"


def test_scheduled_functions_serve_their_schedule_events(deployed, function_env, local_redis):
    for schedule in SCHEDULES:
        fn = deployed[schedule.function]
        # Given the function's deployed environment pointed at the local services
        function_env(fn, local_redis)
        # When EventBridge's scheduled event reaches the handler resolved in the staged asset
        summary = invoke(fn, load_event(schedule.event))
        assert isinstance(summary, dict), summary
        if schedule.function == "renewals":
            # Then it answers what it renewed (nothing is due in a fresh Redis)
            assert summary["failed"] == 0 and summary["renewed"] >= 0, summary
            continue
        # Then it answers with what it published (queues may be none in a fresh Redis)
        assert isinstance(summary.get("queues"), list), summary
        assert summary["redis_memory"]["used"] > 0


def test_admin_mints_a_token_the_authorizer_then_accepts_for_every_route(deployed, function_env):
    catalog = event_catalog()
    # Given a token minted by the admin function from its sample event
    admin = deployed["admin"]
    function_env(admin)
    (mint_event,) = [
        load_event(n) for n in catalog["admin"] if load_event(n).get("action") == "mint"
    ]
    minted = invoke(admin, mint_event)
    assert minted.get("token", "").startswith("pst_"), minted
    assert (minted["namespace"], minted["role"]) == (mint_event["namespace"], mint_event["role"])

    authorizer = deployed["authorizer"]
    function_env(authorizer)
    for name in catalog["authorizer"]:
        event = json.loads(load_event_text(name).replace(PLACEHOLDER_TOKEN, minted["token"]))
        # When the authorizer serves the request with that token
        answer = invoke(authorizer, event)
        # Then it allows, with the token's namespace and role for the handlers
        (statement,) = answer["policyDocument"]["Statement"]
        assert statement["Effect"] == "Allow"
        assert answer["context"]["namespace"] == mint_event["namespace"]
        assert answer["context"]["role"] == mint_event["role"]
        # And the allowed resource covers every route: API Gateway caches this answer per token
        # and reuses it on other routes for the cache TTL
        arn_prefix = event["methodArn"].split("/", 1)[0]
        resources = (
            statement["Resource"]
            if isinstance(statement["Resource"], list)
            else [statement["Resource"]]
        )
        import fnmatch

        for route in ROUTES:
            method_arn = f"{arn_prefix}/prod/{route.method}{route.path}"
            assert any(fnmatch.fnmatchcase(method_arn, r) for r in resources), (
                method_arn,
                resources,
            )

        # And the sample token itself (never minted) is refused with API Gateway's 401 message
        with pytest.raises(Exception, match="Unauthorized"):
            invoke(authorizer, load_event(name))


def load_event_text(name: str) -> str:
    return (EVENTS / f"{name}.json").read_text()
