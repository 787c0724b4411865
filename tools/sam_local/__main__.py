"""`make sam-local`: every function of the synthesized template, in Lambda containers.

Steps: a Docker engine (dockerhost.py) -> the python3.13 base image (image.py) -> the pinned
aws-sam-cli (samcli.py) and `cdk synth`, in parallel -> the local stack (Redis, the S3/SSM
emulator, a gateway for creating state) with relays onto the containers' network -> the
env-vars file -> `sam local invoke` of every fixture of every function (plan.py) -> one whole
job life cycle -> `sam-local: N invocations, N ok, 0 failed`. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tools.sam_local import plan
from tools.sam_local.dockerhost import (
    DockerEngine,
    DockerError,
    PrivateDockerd,
    machine_docker_answers,
    machine_engine,
)
from tools.sam_local.image import ensure_base_image
from tools.sam_local.log import elapsed, say
from tools.sam_local.relay import Relay
from tools.sam_local.samcli import SAM_CLI_VERSION, ensure_sam, sam_env

REPO = plan.REPO
BUILD = REPO / "build" / "sam-local"
# The dev stage: `npx cdk synth` builds it by default (infra/config.py StageNames).
TEMPLATE = REPO / "cdk.out" / "PayloadStore-dev.template.json"
ENV_VARS_FILE = BUILD / "env.json"
REGION = "us-east-1"
# Past this a `sam local invoke` is stuck (functions time out at 30 s at most).
INVOKE_TIMEOUT_S = 240
STACK_ENV = "SAM_LOCAL_STACK"  # a running `make dev` stack's state file, to reuse its services
# The variables that point a function at local services; the template must declare each (SAM
# overrides only declared variables), empty on AWS.
LOCAL_ENDPOINT_VARS = (
    "S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SSM",
    "AWS_ENDPOINT_URL_SECRETS_MANAGER",
)


class Interrupted(Exception):
    pass


def _interrupt(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


@dataclass
class Result:
    function: str
    fixture: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Run:
    sam: Path
    engine: DockerEngine
    image: str
    env_file: Path
    groups: dict[str, str]  # group -> logical id
    results: list[Result] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    current: subprocess.Popen | None = None

    def invoke(self, logical_id: str, name: str, event: dict) -> tuple[object, str | None, float]:
        """(the function's answer, a problem, seconds) of one `sam local invoke`; a timeout is
        tried once more (a loaded machine can push a cold start past a 10 s function timeout),
        and a second timeout is a failure."""
        answer, problem, seconds = self._invoke_once(logical_id, name, event)
        if problem and "timed out" in problem:
            self.retried.append(name)
            say(f"note {logical_id} {name}: {problem}; trying once more")
            answer, problem, more = self._invoke_once(logical_id, name, event)
            seconds += more
        return answer, problem, seconds

    def _invoke_once(self, logical_id: str, name: str, event: dict):
        events_dir = BUILD / "events"
        events_dir.mkdir(parents=True, exist_ok=True)
        event_file = events_dir / f"{name}.json"
        event_file.write_text(json.dumps(event, indent=1))
        cmd = [
            str(self.sam),
            "local",
            "invoke",
            logical_id,
            "--template",
            str(TEMPLATE),
            "--event",
            str(event_file),
            "--env-vars",
            str(self.env_file),
            "--invoke-image",
            self.image,
            "--skip-pull-image",
            "--region",
            REGION,
            "--container-host-interface",
            "127.0.0.1",
            "--layer-cache-basedir",
            str(BUILD / "layer-cache"),
        ]
        if self.engine.network:
            cmd += ["--docker-network", self.engine.network]
        started = time.monotonic()
        self.current = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=sam_process_env(self.engine),
            start_new_session=True,
        )
        try:
            out, errout = self.current.communicate(timeout=INVOKE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_process(self.current)
            return None, f"sam local invoke did not return within {INVOKE_TIMEOUT_S}s", 0.0
        finally:
            proc, self.current = self.current, None
        seconds = time.monotonic() - started
        log_file = BUILD / "logs" / f"{name}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{errout}\n")
        # sam exits 0 when the function timed out: read what it says, not only its status.
        if "timed out after" in errout or "Function timed out" in errout:
            return None, f"the function timed out (see {rel(log_file)})", seconds
        if proc.returncode != 0:
            return None, f"sam exited {proc.returncode} (see {rel(log_file)})", seconds
        answer_line = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "")
        try:
            answer = json.loads(answer_line)
        except ValueError:
            return None, f"no JSON answer on sam's stdout (see {rel(log_file)})", seconds
        return answer, None, seconds

    def record(self, function: str, fixture: str, problem: str | None, seconds: float) -> None:
        ok = problem is None
        self.results.append(Result(function, fixture, ok, seconds, problem or ""))
        status = "ok  " if ok else "FAIL"
        tail = "" if ok else f"  {problem}"
        say(f"{status} {function:<20} {fixture:<24} {seconds:5.1f}s{tail}")


def rel(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(REPO))
    return str(path)


def sam_process_env(engine: DockerEngine) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DOCKER_"))}
    env.update(engine.env)
    env.update(sam_env(BUILD / "sam-home"))
    env.update(
        {
            # Dummy credentials, passed on to the containers: the emulator accepts any.
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local-secret",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    return env


def stop_process(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)  # sam removes its container on Ctrl-C
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def synth() -> float:
    started = time.monotonic()
    log = BUILD / "synth.log"
    env = {
        **os.environ,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    }
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    # The venv's python runs app.py (cdk.json says `python3 app.py`).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with open(log, "wb") as out:
        r = subprocess.run(
            ["npx", "cdk", "synth", "--no-notices", "--quiet"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if r.returncode != 0 or not TEMPLATE.exists():
        raise RuntimeError(f"cdk synth failed; see {rel(log)}")
    return time.monotonic() - started


@dataclass
class Services:
    endpoint: str  # gateway, for creating state
    redis_port: int
    s3_port: int
    bucket: str
    token_path: str
    mint: object
    stop: object

    def lost(self) -> str | None:
        """Which service no longer answers (stopped or killed from outside), if any."""
        from payloadstore_devstack.services import port_is_open

        for what, port in (("Redis", self.redis_port), ("the S3/SSM emulator", self.s3_port)):
            if not port_is_open(port):
                return f"{what} on 127.0.0.1:{port} stopped answering; the run cannot go on"
        return None


def start_services() -> Services:
    """Reuse a running `make dev` (SAM_LOCAL_STACK=<its state file>) or start a stack of ours."""
    from payloadstore_devstack.gateway import configure_logging
    from payloadstore_devstack.services import free_port
    from payloadstore_devstack.stack import DEV_TOKEN_PATH, DevStack

    def minter(ssm, path):
        from payloadstore_devstack.gateway import ensure_functions_on_path

        ensure_functions_on_path()
        from payloadstore_controlplane.store.tokens import TokenStore

        store = TokenStore(ssm, path)
        return lambda ns, role: store.mint(ns, role)[0]

    import boto3

    reuse = os.environ.get(STACK_ENV)
    if reuse:
        state = json.loads(Path(reuse).read_text())
        s3_port = int(state["s3_endpoint"].rsplit(":", 1)[1])
        redis_port = int(state["redis_url"].rsplit(":", 1)[1].split("/")[0])
        ssm = boto3.client(
            "ssm",
            endpoint_url=state["s3_endpoint"],
            region_name=REGION,
            aws_access_key_id="local",
            aws_secret_access_key="local-secret",
        )
        say(f"reusing the local stack of {reuse} ({state['endpoint']})")
        return Services(
            state["endpoint"],
            redis_port,
            s3_port,
            state["bucket"],
            DEV_TOKEN_PATH,
            minter(ssm, DEV_TOKEN_PATH),
            lambda: None,
        )
    state_dir = BUILD / "stack"
    shutil.rmtree(state_dir, ignore_errors=True)  # every run starts from empty Redis and bucket
    configure_logging("WARNING")
    # The state-making handlers run in this process: keep their logs out of the report.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    # Tokens are minted as fixtures need them: the gateway's authorizer must see each at once.
    os.environ["TOKEN_CACHE_S"] = "0"
    stack = DevStack(
        state_dir=state_dir,
        state_file=state_dir / "stack.json",
        port=free_port(),
        authorizer_cache_s=0,
    )
    stack.start()
    if getattr(stack, "scheduler", None) is not None:
        # Its timer would run the metrics function in this process every minute: only noise
        # here (the function itself is invoked in its container like every other).
        stack.scheduler.stop()
        stack.scheduler = None
    say(
        f"local stack: gateway {stack.endpoint}, redis {stack.redis.url}, "
        f"S3/SSM {stack.moto.endpoint}, bucket {stack.bucket}"
    )
    return Services(
        stack.endpoint,
        stack.redis.port,
        stack.moto.port,
        stack.bucket,
        stack.token_path,
        minter(stack._ssm, stack.token_path),
        lambda: stack.stop(snapshot=False),
    )


def env_vars(template: dict, redis: Relay, s3: Relay, services: Services) -> dict:
    """The --env-vars file: the template's variables pointed at the relays. Only declared
    variables can be overridden, so a missing declaration is an error, not a silent no-op."""
    s3_url = f"http://{s3.host}:{s3.port}"
    wanted = {
        "PAYLOAD_BUCKET": services.bucket,
        "REDIS_URL": f"redis://{redis.host}:{redis.port}/0",
        "REDIS_CLUSTER": "false",
        # The template asks a replica to confirm every write (shards have replicas on AWS); the
        # relay is one redis-server without replicas, so nothing would ever be confirmed.
        "REDIS_MIN_REPLICA_ACKS": "0",
        # Under SAM the secret's Ref resolves to a logical id: no AUTH locally.
        "REDIS_AUTH_SECRET": "",
        # The serverless shape signs IAM tokens for its ElastiCache user; the relay's
        # redis-server takes none.
        "REDIS_IAM_USER": "",
        # Under SAM the key's GetAtt resolves to no key: kms_key `stack` takes the local stand-in
        # the S3 emulator knows (models/policy.py) when this is empty.
        "KMS_KEY_ARN": "",
        "TOKEN_PARAMETER_PATH": services.token_path,
        "S3_ENDPOINT_URL": s3_url,
        "AWS_ENDPOINT_URL_SSM": s3_url,
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": s3_url,
    }
    declared = set().union(*(set(v) for v in plan.declared_variables(template).values()))
    missing = [k for k in LOCAL_ENDPOINT_VARS + ("REDIS_AUTH_SECRET",) if k not in declared]
    if missing:
        raise RuntimeError(
            f"the template declares no {', '.join(missing)}: SAM cannot point the functions at "
            "local services (infra/functions.py declares them empty)"
        )
    return {"Parameters": {k: v for k, v in wanted.items() if k in declared}}


def lifecycle(run: Run, world: plan.World, fixtures: list[plan.Fixture]) -> None:
    """presign put -> PUT to the emulator -> enqueue by reference -> poll -> result post ->
    result get, each step a `sam local invoke` built from the route's fixture."""

    def fixture_for(method: str, suffix: str) -> plan.Fixture:
        for fx in fixtures:
            if fx.kind == "api" and fx.route.method == method and fx.route.path.endswith(suffix):
                return fx
        raise RuntimeError(f"no fixture for {method} ...{suffix}")

    ns = "dev"
    data = os.urandom(300 * 1024)  # above the inline threshold's default: an S3 job
    digest = hashlib.sha256(data).hexdigest()

    def step(fx: plan.Fixture, name: str, event: dict, expect: int):
        logical_id = run.groups[fx.group]
        answer, problem, seconds = run.invoke(logical_id, f"lifecycle_{name}", event)
        body = None
        if problem is None:
            if not isinstance(answer, dict) or answer.get("statusCode") != expect:
                problem = f"expected {expect}, got {str(answer)[:300]}"
            else:
                body, problem = plan.decode_body(answer)
        run.record(logical_id, f"lifecycle:{name}", problem, seconds)
        if problem:
            raise RuntimeError(f"life cycle stopped at {name}")
        return body

    def api_event(fx: plan.Fixture, role: str, params=None, query=None, body=None) -> dict:
        event = json.loads(json.dumps(fx.event))
        plan.set_path(event, params or {})
        if query is not None:
            plan.set_query(event, query)
        event["isBase64Encoded"] = False
        event["body"] = json.dumps(body) if body is not None else None
        for headers in ("headers", "multiValueHeaders"):
            h = event.get(headers) or {}
            h.pop("Content-Type", None)
            if body is not None:
                h["Content-Type"] = (
                    "application/json" if headers == "headers" else ["application/json"]
                )
        auth = (event.get("requestContext") or {}).get("authorizer")
        if auth is not None:
            auth.update(namespace=ns, role=role)
        plan.set_token(event, world.token(ns, role))
        return event

    presign = fixture_for("POST", "/payloads/presign")
    answer = step(
        presign,
        "presign_put",
        api_event(
            presign,
            "client",
            {"ns": ns},
            {"op": "put", "size": str(len(data))},
            {"kind": "args", "sha256": digest, "content_type": "application/octet-stream"},
        ),
        200,
    )
    put_started = time.monotonic()
    try:
        plan.upload(answer, data)
        put_problem = None
    except plan.StateError as e:
        put_problem = str(e)
    run.record("emulator", "lifecycle:put", put_problem, time.monotonic() - put_started)
    if put_problem:
        raise RuntimeError("life cycle stopped at the upload")
    ref = {
        "kind": "s3",
        "bucket": answer["bucket"],
        "key": answer["key"],
        "size": len(data),
        "contentType": "application/octet-stream",
        "sha256": digest,
    }
    enqueue = fixture_for("POST", "/queues/{queue}/jobs")
    job = step(
        enqueue,
        "enqueue_ref",
        api_event(
            enqueue, "client", {"ns": ns, "queue": plan.LIFECYCLE_QUEUE}, {}, {"payloadRef": ref}
        ),
        201,
    )
    poll = fixture_for("POST", "/v1/daemon/poll")
    delivered = step(
        poll,
        "poll",
        api_event(
            poll,
            "daemon",
            body={
                "namespace": ns,
                "queues": [plan.LIFECYCLE_QUEUE],
                "wait_s": 1,
                "daemon_id": plan.DAEMON_ID,
            },
        ),
        200,
    )
    if (
        delivered.get("job_id") != job["job_id"]
        or (delivered.get("payloadRef") or {}).get("key") != ref["key"]
    ):
        run.record("check", "lifecycle:delivery", f"poll gave {delivered}", 0.0)
        raise RuntimeError("life cycle: the poll delivered another job")
    download = delivered.get("download")
    if download:  # the daemon side: fetch the arguments as a daemon would, verify them
        with urllib.request.urlopen(download["url"], timeout=60) as resp:
            got = resp.read()
        ok = hashlib.sha256(got).hexdigest() == digest
        run.record("emulator", "lifecycle:get", None if ok else "downloaded bytes differ", 0.0)
    result_bytes = b"\x91\xa2ok"  # msgpack ["ok"]
    post = fixture_for("POST", "/jobs/{job_id}/result")
    body = {"resultInline": base64.b64encode(result_bytes).decode()}
    if delivered.get("lease"):
        body["lease"] = delivered["lease"]
    step(
        post,
        "result_post",
        api_event(post, "daemon", {"ns": ns, "job_id": job["job_id"]}, {}, body),
        204,
    )
    get = fixture_for("GET", "/jobs/{job_id}/result")
    result = step(
        get,
        "result_get",
        api_event(get, "client", {"ns": ns, "job_id": job["job_id"]}, {"wait": "1"}),
        200,
    )
    inline = base64.b64decode(result.get("resultInline", "")) if isinstance(result, dict) else b""
    if inline != result_bytes:
        run.record("check", "lifecycle:result", f"result differs: {result}", 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make sam-local", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="fixture name(s) to invoke (default: all), e.g. --only config",
    )
    parser.add_argument("--no-lifecycle", action="store_true", help="skip the life cycle")
    args = parser.parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    BUILD.mkdir(parents=True, exist_ok=True)
    from payloadstore_controlplane import routes  # installed: `make sam-local` installs [test]

    functions, all_routes = routes.FUNCTIONS, routes.ROUTES
    schedules = getattr(routes, "SCHEDULES", ())

    cleanup = contextlib.ExitStack()
    run: Run | None = None
    timings: dict[str, float] = {}
    failed_setup = None
    try:
        with cleanup, concurrent.futures.ThreadPoolExecutor(2) as pool:
            # Neither needs Docker: they run while the engine starts and the image builds.
            sam_future = pool.submit(ensure_sam, BUILD / "sam-venv")
            synth_future = pool.submit(synth)

            t = time.monotonic()
            if machine_docker_answers():
                engine = machine_engine()
                say(
                    f"Docker: the machine's own engine, network {engine.network} "
                    f"(host address {engine.gateway_ip})"
                )
            else:
                dockerd = PrivateDockerd(BUILD / "docker")
                cleanup.callback(dockerd.stop)
                engine = dockerd.start()
            timings["docker"] = time.monotonic() - t
            t = time.monotonic()
            image, which = ensure_base_image(engine, BUILD / "image")
            timings["image"] = time.monotonic() - t
            say(f"base image: {which}")
            sam = sam_future.result()
            timings["synth"] = synth_future.result()
            say(f"aws-sam-cli {SAM_CLI_VERSION}: {rel(sam)}; synthesized {rel(TEMPLATE)}")

            template = json.loads(TEMPLATE.read_text())
            groups, foreign = plan.template_functions(template, functions)
            for logical_id, handler in foreign:
                say(f"not invoked: {logical_id} ({handler}) is not a control-plane function")
            fixtures, problems = plan.load_fixtures(functions, all_routes, schedules)
            for group, logical_id in groups.items():
                if not any(fx.group == group for fx in fixtures):
                    problems.append(
                        f"{logical_id}: no fixture under events/ for the {group} function"
                    )
            for fx in fixtures:
                if fx.group not in groups:
                    problems.append(
                        f"events/{fx.name}.json: its function ({fx.group}) is not in the template"
                    )

            t = time.monotonic()
            services = start_services()
            cleanup.callback(services.stop)
            redis_relay = Relay(engine.gateway_ip, services.redis_port)
            s3_relay = Relay(engine.gateway_ip, services.s3_port)
            cleanup.callback(redis_relay.stop)
            cleanup.callback(s3_relay.stop)
            if engine.kind == "private":
                dockerd.restrict(engine, [redis_relay.port, s3_relay.port])
            say(
                f"containers reach Redis at {redis_relay.host}:{redis_relay.port} and S3/SSM at "
                f"{s3_relay.host}:{s3_relay.port} (firewall: {engine.firewall})"
            )
            ENV_VARS_FILE.write_text(
                json.dumps(env_vars(template, redis_relay, s3_relay, services), indent=2) + "\n"
            )
            say(f"env-vars file: {rel(ENV_VARS_FILE)}")
            timings["services"] = time.monotonic() - t

            run = Run(sam, engine, image, ENV_VARS_FILE, groups)
            cleanup.callback(lambda: run.current and stop_process(run.current))
            for problem in problems:
                run.record("catalog", "-", problem, 0.0)
            world = plan.World(services.endpoint, services.bucket, services.mint)
            t = time.monotonic()
            selected = [fx for fx in fixtures if not args.only or fx.name in args.only]
            for fx in selected:
                if fx.group not in groups:
                    continue
                lost = services.lost()
                if lost:
                    raise RuntimeError(lost)
                logical_id = groups[fx.group]
                try:
                    if fx.kind == "api":
                        prepared = plan.prepare_api(world, fx)
                    elif fx.kind == "authorizer":
                        prepared = plan.prepare_authorizer(world, fx)
                    else:
                        prepared = plan.Prepared(json.loads(json.dumps(fx.event)), [])
                except plan.StateError as e:
                    run.record(logical_id, fx.name, f"could not create its state: {e}", 0.0)
                    continue
                answer, problem, seconds = run.invoke(logical_id, fx.name, prepared.event)
                if problem is None:
                    if fx.kind == "api":
                        problem = plan.check_api(fx, prepared, answer)
                    elif fx.kind == "authorizer":
                        problem = plan.check_authorizer(prepared, answer)
                    else:
                        problem = plan.check_direct(fx, answer)
                run.record(logical_id, fx.name, problem, seconds)
            if not args.only:
                for logical_id in groups.values():
                    if not any(r.function == logical_id for r in run.results):
                        run.record(logical_id, "-", "never invoked", 0.0)
            if not args.no_lifecycle:
                lost = services.lost()
                if lost:
                    raise RuntimeError(lost)
                try:
                    lifecycle(run, world, fixtures)
                except (RuntimeError, plan.StateError, OSError) as e:
                    run.record("lifecycle", "-", str(e), 0.0)
            timings["invocations"] = time.monotonic() - t
    except Interrupted as e:
        failed_setup = f"interrupted ({e}); everything started was stopped"
    except (DockerError, RuntimeError, plan.StateError, subprocess.CalledProcessError) as e:
        failed_setup = str(e)
    results = run.results if run else []
    invocations = [
        r for r in results if r.function not in ("catalog", "emulator", "check", "lifecycle")
    ]
    failed = [r for r in results if not r.ok]
    if failed_setup:
        say(f"error: {failed_setup}")
    for r in failed:
        say(f"failed: {r.function} {r.fixture}: {r.detail}")
    if invocations:
        secs = [r.seconds for r in invocations if r.seconds]
        say(
            f"timings: {', '.join(f'{k} {v:.0f}s' for k, v in timings.items())}; per invocation "
            f"median {statistics.median(secs):.1f}s, max {max(secs):.1f}s; total {elapsed():.0f}s"
        )
    if run and run.retried:
        say(f"timed out once and tried again: {', '.join(run.retried)}")
    n = len(invocations)
    ok = len([r for r in invocations if r.ok])
    # Failed checks outside an invocation (a fixture for no function, the upload) count too.
    bad = len(failed) + (1 if failed_setup else 0)
    print(f"sam-local: {n} invocations, {ok} ok, {bad} failed", flush=True)
    return 1 if (failed or failed_setup or n == 0) else 0


if __name__ == "__main__":
    sys.exit(main())
