"""What `make sam-local` invokes: every function of the template with every one of its events/
fixtures, each made meaningful by state created first, plus one whole job life cycle.

Nothing here knows the fixtures by name. A fixture is classified by its shape:
- an API Gateway proxy event: its (httpMethod, resource) names a route of routes.py, so its
  function, roles and path parameters;
- a REQUEST authorizer event (`type` REQUEST with a `methodArn`): the authorizer function;
- anything else (admin actions, scheduled events): the function routes.SCHEDULES names for it,
  else the function whose group name begins the file name (`admin_mint.json` -> admin).

State comes from the local stack's gateway (the same handlers, in-process, fast), with tokens
minted for the fixture's namespace and role. A fixture's sample job id becomes a real job in
the state its route needs: GET routes a finished job, DELETE a queued one, daemon-only POSTs a
job delivered to a daemon (its lease replaces any `lease` in the body), other routes a queued
one. Sample object keys become keys issued to the namespace and uploaded to the emulator. A
poll gets a job queued in each queue it names. Every API fixture must then answer 2xx.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib.util
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "events"
SAMPLE_KEY_RE = re.compile(r"payloads/\d{4}/\d{2}/\d{2}/[0-9A-Z]{26}/(args|result)")
STATE_QUEUE = "sam-local-state"  # + a number: a job goes in and is polled out at once
QUEUED_QUEUE = "sam-local-queued"  # jobs left queued for a fixture
LIFECYCLE_QUEUE = "sam-local-lifecycle"
DAEMON_ID = "sam-local"
# Fixture objects larger than this are uploaded at this size (the size in the reference follows).
MAX_UPLOAD = 8 * 1024 * 1024


def _generator_constants() -> dict[str, Any]:
    """JOB and TOKEN of events/generate.py: the sample values the fixtures carry."""
    spec = importlib.util.spec_from_file_location("_events_generate", EVENTS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"job": module.JOB, "token": module.TOKEN}


GENERATED = _generator_constants()
SAMPLE_JOB = GENERATED["job"]
PLACEHOLDER_TOKEN = GENERATED["token"]


@dataclass
class Fixture:
    name: str
    event: dict
    group: str
    kind: str  # "api" | "authorizer" | "direct"
    route: Any = None  # payloadstore_controlplane.routes.Route for "api"


def load_fixtures(
    functions: dict[str, str], routes, schedules=()
) -> tuple[list[Fixture], list[str]]:
    """(fixtures, problems): every events/*.json except `_`-prefixed ones and generate.py."""
    by_route = {(r.method, r.path): r for r in routes}
    scheduled = {s.event: s.function for s in schedules}
    fixtures, problems = [], []
    groups_by_length = sorted(functions, key=len, reverse=True)
    for path in sorted(EVENTS.glob("*.json")):
        if path.name.startswith("_"):
            continue
        try:
            event = json.loads(path.read_text())
        except ValueError as e:
            problems.append(f"events/{path.name}: not JSON ({e})")
            continue
        if not isinstance(event, dict):
            problems.append(f"events/{path.name}: not a JSON object")
            continue
        if event.get("type") == "REQUEST" and "methodArn" in event:
            fixtures.append(Fixture(path.stem, event, "authorizer", "authorizer"))
        elif "httpMethod" in event and "resource" in event:
            route = by_route.get((event["httpMethod"], event["resource"]))
            if route is None:
                problems.append(
                    f"events/{path.name}: {event['httpMethod']} {event['resource']} is no route"
                )
                continue
            fixtures.append(Fixture(path.stem, event, route.function, "api", route))
        else:
            group = scheduled.get(path.stem) or next(
                (g for g in groups_by_length if path.stem == g or path.stem.startswith(g + "_")),
                None,
            )
            if group is None:
                problems.append(
                    f"events/{path.name}: neither an API route's event nor named after a function "
                    f"group ({', '.join(sorted(functions))})"
                )
                continue
            fixtures.append(Fixture(path.stem, event, group, "direct"))
    return fixtures, problems


def template_functions(template: dict, functions: dict[str, str]) -> tuple[dict[str, str], list]:
    """({group: logical id}, [(logical id, handler) of functions that are not the project's])."""
    by_handler = {h: g for g, h in functions.items()}
    groups, foreign = {}, []
    for logical_id, res in template["Resources"].items():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        handler = res.get("Properties", {}).get("Handler", "")
        group = by_handler.get(handler)
        if group is None and handler.startswith("payloadstore_controlplane.handlers."):
            group = handler.split(".")[2]
        if group is None:
            foreign.append((logical_id, handler))
        else:
            groups[group] = logical_id
    return groups, foreign


def declared_variables(template: dict) -> dict[str, dict[str, Any]]:
    """{logical id: environment variables as the template declares them}."""
    return {
        k: v.get("Properties", {}).get("Environment", {}).get("Variables", {})
        for k, v in template["Resources"].items()
        if v["Type"] == "AWS::Lambda::Function"
    }


# ---------------------------------------------------------------- state, through the gateway


class StateError(RuntimeError):
    pass


@dataclass
class World:
    """Creates state on the local stack through its gateway, with real tokens."""

    endpoint: str
    bucket: str
    mint: Any  # (namespace, role) -> token
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    deliveries: int = 0

    def token(self, ns: str, role: str) -> str:
        if (ns, role) not in self.tokens:
            # Both roles at once: a token store read (and cached) between two mints would
            # know only the first.
            for r in ("client", "daemon", role):
                if (ns, r) not in self.tokens:
                    self.tokens[(ns, r)] = self.mint(ns, r)
        return self.tokens[(ns, role)]

    def call(self, method: str, path: str, ns: str, role: str | None, body=None, query=""):
        url = self.endpoint + path + (f"?{query}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if role:
            req.add_header("Authorization", f"Bearer {self.token(ns, role)}")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw
        return status, parsed

    def _expect(self, what: str, answer, *ok: int):
        status, body = answer
        if status not in ok:
            raise StateError(f"{what}: HTTP {status} {str(body)[:300]}")
        return body

    def queued_job(self, ns: str, queue: str = QUEUED_QUEUE) -> str:
        payload = base64.b64encode(b"\x92\x01\x02").decode()  # msgpack [1, 2]
        body = self._expect(
            f"enqueue into {ns}/{queue}",
            self.call(
                "POST",
                f"/v1/namespaces/{ns}/queues/{queue}/jobs",
                ns,
                "client",
                {"payloadInline": payload},
            ),
            201,
        )
        return body["job_id"]

    def delivered_job(self, ns: str) -> dict:
        # A queue of its own each time: a fixture may put its job back (a failure report
        # requeues it), and the next poll must not find that one.
        self.deliveries += 1
        queue = f"{STATE_QUEUE}-{self.deliveries}"
        job_id = self.queued_job(ns, queue)
        answer = self._expect(
            f"poll {ns}/{queue}",
            self.call(
                "POST",
                "/v1/daemon/poll",
                ns,
                "daemon",
                {"namespace": ns, "queues": [queue], "wait_s": 1, "daemon_id": DAEMON_ID},
            ),
            200,
        )
        if answer.get("job_id") != job_id:
            raise StateError(f"poll of {queue} gave {answer.get('job_id')}, not {job_id}")
        return answer

    def finished_job(self, ns: str, *, failed: bool = False) -> str:
        """A job that succeeded, or with `failed` ended with an error (one a retry takes)."""
        delivered = self.delivered_job(ns)
        body: dict[str, Any] = {"resultInline": base64.b64encode(b"\x03").decode()}
        if failed:
            body = {"error": {"type": "ValueError", "message": "sam-local"}}
        if delivered.get("lease"):
            body["lease"] = delivered["lease"]
        self._expect(
            "result post",
            self.call(
                "POST", f"/v1/namespaces/{ns}/jobs/{delivered['job_id']}/result", ns, "daemon", body
            ),
            200,
            204,
        )
        return delivered["job_id"]

    def multipart_job(self, ns: str, parts: list[dict]) -> str:
        """A job whose arguments' multipart upload is open (presigned, nothing uploaded), sized
        so that every part the fixture names exists with its size: the parts route's state."""
        config = self._expect("config", self.call("GET", "/v1/config", ns, "client"), 200)
        part_bytes = int(config["multipart_part_bytes"])
        last = max(int(p["number"]) for p in parts) if parts else 1
        # One byte more than the named parts, and above the threshold: a multipart upload.
        size = max(last * part_bytes, int(config["multipart_threshold"])) + 1
        body = {"kind": "args"}
        answer = self._expect(
            "presign put (multipart)",
            self.call(
                "POST",
                f"/v1/namespaces/{ns}/payloads/presign",
                ns,
                "client",
                body,
                query=f"op=put&size={size}",
            ),
            200,
        )
        if not answer.get("multipart"):
            raise StateError(f"a presign of {size} B gave no multipart upload: {answer}")
        return answer["job_id"]

    def issued_key(
        self,
        ns: str,
        size: int,
        kind: str = "args",
        job_id: str | None = None,
        content_type: str | None = None,
        lease: str | None = None,
    ) -> dict:
        """A key presigned for this namespace and uploaded: {key, bucket, size, sha256}. A
        result key is presigned with the delivery's `lease`."""
        data = (hashlib.sha256(b"sam-local").digest() * (size // 32 + 1))[:size]
        digest = hashlib.sha256(data).hexdigest()
        body: dict[str, Any] = {"kind": kind, "sha256": digest}
        if job_id:
            body["job_id"] = job_id
        if content_type:
            body["content_type"] = content_type
        if lease:
            body["lease"] = lease
        role = "daemon" if kind == "result" else "client"
        answer = self._expect(
            f"presign put ({kind})",
            self.call(
                "POST",
                f"/v1/namespaces/{ns}/payloads/presign",
                ns,
                role,
                body,
                query=f"op=put&size={size}",
            ),
            200,
        )
        upload(answer, data)
        return {"key": answer["key"], "bucket": answer["bucket"], "size": size, "sha256": digest}


def upload(presigned: dict, data: bytes) -> int:
    req = urllib.request.Request(presigned["url"], data=data, method=presigned.get("method", "PUT"))
    for k, v in (presigned.get("headers") or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status = resp.status
    except urllib.error.HTTPError as e:
        raise StateError(f"PUT to the emulator: HTTP {e.code} {e.read()[:300]!r}") from e
    if status not in (200, 204):
        raise StateError(f"PUT to the emulator: HTTP {status}")
    return status


# ---------------------------------------------------------------- fixtures made real


def set_path(event: dict, params: dict[str, str]) -> None:
    """Path parameters and every place API Gateway repeats them."""
    merged = {**(event.get("pathParameters") or {}), **params}
    path = event["resource"]
    for k, v in merged.items():
        path = path.replace("{" + k + "}", v)
    event["pathParameters"] = merged or None
    event["path"] = path
    rc = event.get("requestContext") or {}
    if "path" in rc:
        stage = rc.get("stage")
        rc["path"] = f"/{stage}{path}" if stage else path


def set_query(event: dict, query: dict[str, str]) -> None:
    event["queryStringParameters"] = query or None
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} or None


def set_token(event: dict, token: str) -> None:
    text = json.dumps(event).replace(PLACEHOLDER_TOKEN, token)
    event.clear()
    event.update(json.loads(text))


def fixture_namespace(event: dict) -> str:
    body = json_body(event)
    return (
        (event.get("pathParameters") or {}).get("ns")
        or (body.get("namespace") if isinstance(body, dict) else None)
        or ((event.get("requestContext") or {}).get("authorizer") or {}).get("namespace")
        or "dev"
    )


def fixture_role(event: dict, route) -> str:
    role = ((event.get("requestContext") or {}).get("authorizer") or {}).get("role")
    if role:
        return role
    return route.roles[0] if route is not None and route.roles else "client"


def json_body(event: dict) -> Any:
    if event.get("isBase64Encoded") or not event.get("body"):
        return None
    try:
        return json.loads(event["body"])
    except ValueError:
        return None


def _walk(node, fn) -> None:
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            _walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            _walk(v, fn)


@dataclass
class Prepared:
    event: dict
    notes: list[str]
    job_id: str | None = None
    expect_namespace: str | None = None


def prepare_api(world: World, fx: Fixture) -> Prepared:
    event = copy.deepcopy(fx.event)
    route = fx.route
    ns = fixture_namespace(event)
    role = fixture_role(event, route)
    notes: list[str] = []
    job_id = None
    lease = None
    text = json.dumps(event)
    # A job id inside a sample key is not a job the request is about (the key is replaced).
    if "{job_id}" in route.path or SAMPLE_JOB in SAMPLE_KEY_RE.sub("", text):
        daemon_only = route.roles is not None and "client" not in route.roles
        if route.method == "GET":
            job_id, state = world.finished_job(ns), "finished"
        elif route.path.endswith("/retry"):
            job_id, state = world.finished_job(ns, failed=True), "failed"
        elif route.path.endswith("/payloads/parts"):
            parts = (json_body(event) or {}).get("parts") or []
            job_id, state = world.multipart_job(ns, parts), "multipart upload open for"
        elif route.method == "DELETE":
            job_id, state = world.queued_job(ns), "queued"
        elif daemon_only:
            delivered = world.delivered_job(ns)
            job_id, lease, state = delivered["job_id"], delivered.get("lease"), "delivered"
        else:
            job_id, state = world.queued_job(ns), "queued"
        notes.append(f"{state} job {job_id}")
        event = json.loads(text.replace(SAMPLE_JOB, job_id))
    if route.roles:
        set_token(event, world.token(ns, role))

    body = json_body(event)
    if isinstance(body, dict):
        if "queues" in body and route.path.endswith("/poll"):
            for queue in body["queues"]:
                world.queued_job(body.get("namespace", ns), queue)
            notes.append(f"queued a job in {','.join(body['queues'])}")
        if lease is not None and "lease" in body:
            body["lease"] = lease
        if lease is not None and isinstance(body.get("leases"), list):
            # The leases long-poll names its jobs' leases in a list.
            for held in body["leases"]:
                if isinstance(held, dict) and held.get("job_id") == job_id:
                    held["lease"] = lease

        def real_refs(node: dict) -> None:
            ref_key = node.get("key")
            if not (isinstance(ref_key, str) and SAMPLE_KEY_RE.fullmatch(ref_key)):
                return
            kind = "result" if ref_key.endswith("/result") else "args"
            size = min(int(node.get("size") or 1024), MAX_UPLOAD)
            issued = world.issued_key(
                ns,
                size,
                kind,
                job_id if kind == "result" else None,
                node.get("contentType"),
                lease if kind == "result" else None,
            )
            node.update(key=issued["key"], size=issued["size"])
            if "bucket" in node:
                node["bucket"] = issued["bucket"]
            if "sha256" in node:
                node["sha256"] = issued["sha256"]
            notes.append(f"issued and uploaded {issued['key']}")

        _walk(body, real_refs)
        event["body"] = json.dumps(body)

    query = dict(event.get("queryStringParameters") or {})
    if SAMPLE_KEY_RE.fullmatch(query.get("key", "")):
        issued = world.issued_key(ns, 1024)
        query["key"] = issued["key"]
        set_query(event, query)
        notes.append(f"issued and uploaded {issued['key']}")
    return Prepared(event, notes, job_id)


def prepare_authorizer(world: World, fx: Fixture, namespace: str = "dev") -> Prepared:
    event = copy.deepcopy(fx.event)
    set_token(event, world.token(namespace, "client"))
    return Prepared(event, [f"token minted for {namespace}/client"], expect_namespace=namespace)


# ---------------------------------------------------------------- what an answer must be


def decode_body(response: dict) -> tuple[Any, str | None]:
    """(parsed body or bytes, problem)."""
    raw = response.get("body") or ""
    if response.get("isBase64Encoded"):
        try:
            return base64.b64decode(raw), None
        except ValueError:
            return None, "body is not valid base64"
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    if raw and "json" in headers.get("content-type", "application/json"):
        try:
            return json.loads(raw), None
        except ValueError:
            return None, f"body is not JSON: {raw[:200]!r}"
    return raw, None


def _needs(body: Any, *keys: str) -> str | None:
    if not isinstance(body, dict):
        return f"body is not an object: {str(body)[:200]}"
    missing = [k for k in keys if k not in body]
    return f"body lacks {', '.join(missing)}: {json.dumps(body)[:300]}" if missing else None


def check_api(fx: Fixture, prepared: Prepared, response: Any) -> str | None:
    """None when the proxy response is what the wire promises for the prepared request."""
    if not isinstance(response, dict) or not isinstance(response.get("statusCode"), int):
        return f"not an API Gateway proxy response: {str(response)[:300]}"
    status = response["statusCode"]
    body, problem = decode_body(response)
    if problem:
        return problem
    if not 200 <= status < 300:
        return f"HTTP {status}: {str(body)[:300]}"
    if status == 204:
        return None if not response.get("body") else "204 with a body"
    route = fx.route
    if route.method == "POST" and route.path.endswith("/presign"):
        op = (prepared.event.get("queryStringParameters") or {}).get("op", "put")
        return _needs(
            body, "url", "method", "expires_at", *(("key", "headers") if op == "put" else ())
        )
    if route.path.endswith("/poll"):
        if isinstance(body, dict) and "jobs" in body:
            # A poll with max_jobs: {"jobs": [delivery, ...]}, each as the single answer.
            deliveries = body["jobs"] if isinstance(body["jobs"], list) else []
            if not deliveries:
                return f"an empty jobs list with 200: {json.dumps(body)[:300]}"
            for delivery in deliveries:
                problem = _needs(delivery, "job_id", "queue", "attempt", "lease")
                if problem:
                    return problem
            return None
        return _needs(body, "job_id", "queue", "attempt")
    if route.path == "/v1/openapi.json":
        if _needs(body, "openapi", "paths"):
            return _needs(body, "openapi", "paths")
        return None
    if route.path == "/v1/health":
        return (
            _needs(body, "checks")
            if isinstance(body, dict) and "checks" in body
            else (None if isinstance(body, dict) and body else f"health body: {str(body)[:200]}")
        )
    if route.path == "/v1/config":
        return _needs(body, "inline_threshold", "max_payload_bytes", "presign_ttl_s")
    if route.method == "POST" and route.path.endswith("/blobs"):
        # A new blob: upload instructions (a single PUT, or above MULTIPART_THRESHOLD a
        # multipart upload); one the namespace has: exists.
        problem = _needs(body, "sha256", "size", "exists", "key")
        if problem or body["exists"]:
            return problem
        if body.get("multipart") is not None:
            return _needs(body["multipart"], "upload_id", "part_bytes", "part_count")
        return _needs(body.get("upload"), "url", "headers", "expires_at")
    if route.method == "POST" and route.path.endswith("/jobs"):
        return _needs(body, "job_id", "tier")
    if (
        isinstance(body, dict)
        and prepared.job_id
        and "job_id" in body
        and body["job_id"] != prepared.job_id
    ):
        return f"answer is for job {body['job_id']}, not {prepared.job_id}"
    if (
        route.method == "GET"
        and route.path.endswith("/result")
        and isinstance(body, dict)
        and not ({"resultInline", "resultRef"} & set(body))
    ):
        return f"no result in {json.dumps(body)[:300]}"
    if route.method == "GET" and route.path.endswith("{job_id}"):
        return _needs(body, "job_id", "state")
    if body in (None, "", b""):
        return "empty body"
    return None


def check_authorizer(prepared: Prepared, answer: Any) -> str | None:
    try:
        (statement,) = answer["policyDocument"]["Statement"]
    except (KeyError, TypeError, ValueError):
        return f"not an authorizer policy: {str(answer)[:300]}"
    if statement.get("Effect") != "Allow":
        return f"policy does not allow: {statement}"
    if (answer.get("context") or {}).get("namespace") != prepared.expect_namespace:
        return f"context namespace is not {prepared.expect_namespace}: {answer.get('context')}"
    return None


def check_direct(fx: Fixture, answer: Any) -> str | None:
    if isinstance(answer, dict) and "errorType" in answer:
        return f"{answer['errorType']}: {str(answer.get('errorMessage'))[:300]}"
    if (
        isinstance(answer, dict)
        and isinstance(answer.get("statusCode"), int)
        and not 200 <= answer["statusCode"] < 300
    ):
        return f"HTTP {answer['statusCode']}: {str(answer.get('body'))[:300]}"
    if fx.event.get("action") in ("set_policy", "get_policy"):
        policy = (answer or {}).get("policy") if isinstance(answer, dict) else None
        if not isinstance(policy, dict) or set(policy) != {"retention", "kms_key", "inline"}:
            return f"no policy answered: {str(answer)[:300]}"
    if fx.event.get("action") == "mint":
        if not str((answer or {}).get("token", "")).startswith("pst_"):
            return f"no token minted: {str(answer)[:300]}"
        got = (answer.get("namespace"), answer.get("role"))
        if got != (fx.event.get("namespace"), fx.event.get("role")):
            return f"minted for {got}, asked {fx.event.get('namespace'), fx.event.get('role')}"
    return None
