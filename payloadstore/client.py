"""The client SDK: `Client`, `Queue.add`, `Job.result`.

A job's payload is its call, encoded once: `{"args": [...], "kwargs": {...}}` (see the codec for
the value types). Encoded sizes up to the control plane's `inline_threshold` travel inline as a
raw msgpack body; larger ones go straight to S3 through a presigned PUT and the job carries only
the reference.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from . import codec
from ._http import ApiSession, RetryPolicy, api_error
from ._transfer import download, upload
from .errors import (
    ApiError,
    ConfigError,
    JobFailed,
    PayloadCorrupt,
    PayloadLost,
    PayloadTooLarge,
    QueueNotFound,
    ResultTimeout,
)

log = logging.getLogger("payloadstore")

ENV_ENDPOINT = "PAYLOADSTORE_ENDPOINT"
ENV_TOKEN = "PAYLOADSTORE_TOKEN"
ENV_NAMESPACE = "PAYLOADSTORE_NAMESPACE"
ENV_DEVSTACK = "PAYLOADSTORE_DEVSTACK"
DEVSTACK_FILE = ".devstack.json"
DEFAULT_NAMESPACE = "dev"
# The control plane caps a result long-poll near 20 s; longer waits are several calls.
RESULT_WAIT_SLICE_S = 20.0
TERMINAL_STATES = frozenset({"succeeded", "failed", "payload_lost", "payload_corrupt"})


@dataclass(frozen=True)
class ServerConfig:
    inline_threshold: int
    max_payload_bytes: int
    presign_ttl_s: int


@dataclass(frozen=True)
class QueueInfo:
    """A queue's figures from the control plane (GET .../queues[/{queue}])."""

    name: str
    queued: int
    in_flight: int
    oldest_queued_age_s: float | None

    @classmethod
    def from_wire(cls, body: dict) -> QueueInfo:
        return cls(
            name=body["name"],
            queued=int(body["queued"]),
            in_flight=int(body["in_flight"]),
            oldest_queued_age_s=body.get("oldest_queued_age_s"),
        )


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    queue: str | None = None
    attempts: int | None = None
    tier: str | None = None
    payload_ref: dict | None = None
    result_ref: dict | None = None
    error: dict | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES


def find_devstack_file(start: Path | None = None) -> Path | None:
    """`$PAYLOADSTORE_DEVSTACK`, else `.devstack.json` in the working directory or a parent."""
    env = os.environ.get(ENV_DEVSTACK)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / DEVSTACK_FILE
        if candidate.is_file():
            return candidate
    return None


def read_devstack(path: str | os.PathLike | None = None) -> tuple[Path, dict]:
    found = Path(path) if path else find_devstack_file()
    if found is None:
        raise ConfigError(
            f"no {DEVSTACK_FILE} found here or above: start the local stack (make dev) "
            f"or set {ENV_ENDPOINT}, {ENV_TOKEN} and {ENV_NAMESPACE}"
        )
    try:
        return found, json.loads(found.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {found}: {e}") from e


def ref_key(ref: dict) -> str:
    return ref["key"]


class Client:
    """Talks to the control plane for one namespace with one bearer token.

    `http` (control plane) and `s3_http` (presigned URLs; never sent the bearer token) may be
    injected, e.g. with `httpx.MockTransport` in tests.
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        namespace: str,
        *,
        http: httpx.Client | None = None,
        s3_http: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        progress: bool | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not endpoint:
            raise ConfigError(f"no control-plane endpoint: pass endpoint= or set {ENV_ENDPOINT}")
        if not token:
            raise ConfigError(f"no token: pass token= or set {ENV_TOKEN}")
        if not namespace:
            raise ConfigError(f"no namespace: pass namespace= or set {ENV_NAMESPACE}")
        self.namespace = namespace
        self.retry = retry or RetryPolicy()
        self.progress = progress
        self._sleep = sleep
        self.api = ApiSession(
            endpoint, token, http=http, retry=self.retry, timeout_s=timeout_s, sleep=sleep
        )
        self._owns_s3 = s3_http is None
        # Long read timeout: a 100 MiB object on a slow link; connect stays short.
        self.s3_http = s3_http or httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0))
        self._config: ServerConfig | None = None
        self._config_lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> Client:
        env = os.environ if environ is None else environ
        missing = [n for n in (ENV_ENDPOINT, ENV_TOKEN) if not env.get(n)]
        if missing:
            raise ConfigError(
                f"set {' and '.join(missing)} (and {ENV_NAMESPACE}, default {DEFAULT_NAMESPACE})"
            )
        return cls(
            env[ENV_ENDPOINT], env[ENV_TOKEN], env.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE, **kwargs
        )

    @classmethod
    def from_devstack(
        cls,
        path: str | os.PathLike | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "client",
        **kwargs: Any,
    ) -> Client:
        """A client of the local stack, from the `.devstack.json` that `make dev` writes."""
        found, stack = read_devstack(path)
        try:
            tokens = stack["namespaces"][namespace]
            token = tokens[f"{role}_token"]
            endpoint = stack["endpoint"]
        except (KeyError, TypeError) as e:
            names = ", ".join(sorted((stack.get("namespaces") or {}).keys())) or "none"
            raise ConfigError(
                f"{found} has no {role} token for namespace {namespace!r} (namespaces: {names})"
            ) from e
        return cls(endpoint, token, namespace, **kwargs)

    @classmethod
    def from_env_or_devstack(cls, *, role: str = "client", **kwargs: Any) -> Client:
        """Environment variables when set, else the local stack's file."""
        if os.environ.get(ENV_ENDPOINT) or os.environ.get(ENV_TOKEN):
            return cls.from_env(**kwargs)
        return cls.from_devstack(
            namespace=os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE, role=role, **kwargs
        )

    def close(self) -> None:
        self.api.close()
        if self._owns_s3:
            self.s3_http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(endpoint={self.api.endpoint!r}, namespace={self.namespace!r})"

    # -- user API -----------------------------------------------------------------------------

    @property
    def config(self) -> ServerConfig:
        """The fleet's settings from `/v1/config`, fetched once per client."""
        with self._config_lock:
            if self._config is None:
                body = self.api.request("GET", "/v1/config", "read config").json()
                self._config = ServerConfig(
                    inline_threshold=int(body["inline_threshold"]),
                    max_payload_bytes=int(body["max_payload_bytes"]),
                    presign_ttl_s=int(body.get("presign_ttl_s") or 900),
                )
            return self._config

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def job(self, job_id: str) -> Job:
        return Job(self, job_id)

    def queues(self) -> list[QueueInfo]:
        """Every queue of the namespace: queued, in flight and the oldest queued job's age."""
        body = self.api.request("GET", self._ns_path("/queues"), "list queues", ok=(200,)).json()
        return [QueueInfo.from_wire(q) for q in body["queues"]]

    def health(self) -> tuple[bool, dict]:
        """(healthy, body) from `/v1/health`; does not raise for a 503."""
        response = self.api.request("GET", "/v1/health", "health check", auth=False, ok=(200, 503))
        try:
            body = response.json()
        except ValueError:
            body = {"status": "unreadable", "body": response.text[:300]}
        healthy = response.status_code == 200 and str(body.get("status", "ok")).lower() in (
            "ok",
            "healthy",
            "pass",
        )
        return healthy, body

    # -- wire helpers shared with the daemon ----------------------------------------------------

    def _ns_path(self, suffix: str) -> str:
        return f"/v1/namespaces/{self.namespace}{suffix}"

    def _check_size(self, size: int) -> None:
        limit = self.config.max_payload_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"payload is {size} bytes ({size / 2**20:.1f} MiB) encoded, over the "
                f"{limit} byte ({limit / 2**20:.1f} MiB) cap (MAX_PAYLOAD_BYTES)",
                size=size,
                limit=limit,
                status=None,
            )

    def _presign_put(self, size: int, kind: str, sha256: str, job_id: str | None = None) -> dict:
        body: dict[str, Any] = {
            "op": "put",
            "size": size,
            "kind": kind,
            "sha256": sha256,
            "content_type": codec.CONTENT_TYPE,
        }
        if job_id:
            body["job_id"] = job_id
        return self.api.request(
            "POST",
            self._ns_path("/payloads/presign"),
            f"presign {kind} upload",
            json_body=body,
            ok=(200,),
        ).json()

    def _presign_get(self, key: str, job_id: str | None = None) -> dict:
        path = self._ns_path("/payloads/presign")
        response = self.api.request(
            "POST",
            path,
            "presign download",
            json_body={"op": "get", "key": key},
            ok=(200, 404, 410),
        )
        if response.status_code != 200:
            try:
                response.raise_for_status()
            except httpx.HTTPStatusError as e:
                reason = (
                    "past retention"
                    if response.status_code == 410
                    else "unknown to the control plane"
                )
                raise PayloadLost(
                    f"payload {key} is {reason}: {api_error(response, 'presign download').message}",
                    job_id=job_id,
                    key=key,
                ) from e
        return response.json()

    def _store_large(
        self,
        encoded: Any,
        kind: str,
        *,
        job_id: str | None = None,
        progress: bool | None = None,
    ) -> tuple[dict, str]:
        """Presign, PUT with exactly the signed headers (re-presigning the same job's key when a
        URL expires), and return (payloadRef, job_id)."""
        size = encoded.nbytes
        sha256 = encoded.sha256()
        grant = self._presign_put(size, kind, sha256, job_id)
        granted_job = grant.get("job_id") or job_id

        def presign_again() -> dict:
            return self._presign_put(size, kind, sha256, granted_job)

        grant = upload(
            self.s3_http,
            grant,
            list(encoded.chunks),
            size,
            presign_again=presign_again,
            retry=self.retry,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc=f"upload {kind}",
        )
        ref = {
            "kind": "s3",
            "bucket": grant["bucket"],
            "key": grant["key"],
            "size": size,
            "contentType": codec.CONTENT_TYPE,
            "sha256": sha256,
        }
        return ref, granted_job

    def _fetch_ref(
        self, ref: dict, *, job_id: str | None = None, progress: bool | None = None
    ) -> bytearray:
        """Download a payload reference and verify its sha256 (PayloadCorrupt / PayloadLost)."""
        key = ref_key(ref)
        grant = self._presign_get(key, job_id)
        return download(
            self.s3_http,
            grant,
            size=ref.get("size"),
            sha256=ref.get("sha256"),
            presign_again=lambda: self._presign_get(key, job_id),
            retry=self.retry,
            job_id=job_id,
            key=key,
            progress=self.progress if progress is None else progress,
            sleep=self._sleep,
            desc="download",
        )

    def _status(self, job_id: str) -> JobStatus:
        body = self.api.request(
            "GET", self._ns_path(f"/jobs/{job_id}"), f"job {job_id} status", ok=(200,)
        ).json()
        return JobStatus(
            job_id=body.get("job_id", job_id),
            state=body.get("state", "unknown"),
            queue=body.get("queue"),
            attempts=body.get("attempts"),
            tier=body.get("tier"),
            payload_ref=body.get("payloadRef"),
            result_ref=body.get("resultRef"),
            error=body.get("error"),
            raw=body,
        )


class Queue:
    def __init__(self, client: Client, name: str):
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, namespace={self.client.namespace!r})"

    def stats(self) -> QueueInfo:
        """Queued, in flight and oldest queued age of this queue; QueueNotFound if never used."""
        response = self.client.api.request(
            "GET", self.client._ns_path(f"/queues/{self.name}"), f"queue {self.name}", ok=(200, 404)
        )
        if response.status_code == 404:
            raise QueueNotFound(
                f"queue {self.name} not found in namespace {self.client.namespace}", status=404
            )
        return QueueInfo.from_wire(response.json())

    def add(self, *args: Any, **kwargs: Any) -> Job:
        """Enqueue a call of the daemon's function with these arguments."""
        return self.submit(args, kwargs)

    def submit(
        self,
        args: tuple | list = (),
        kwargs: dict | None = None,
        *,
        progress: bool | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """`add` with options: progress bar for large uploads, and an idempotency key so a
        caller's own retry of an inline enqueue cannot create a second job."""
        encoded = codec.encode({"args": list(args), "kwargs": dict(kwargs or {})})
        return self.submit_encoded(encoded, progress=progress, idempotency_key=idempotency_key)

    def submit_encoded(
        self, encoded: Any, *, progress: bool | None = None, idempotency_key: str | None = None
    ) -> Job:
        client = self.client
        size = encoded.nbytes
        path = client._ns_path(f"/queues/{self.name}/jobs")
        what = f"enqueue on queue {self.name}"
        if size <= client.config.inline_threshold:
            # One key per call, sent on every retry: a lost 201 retried gives back the same job.
            headers = {
                "Content-Type": codec.CONTENT_TYPE,
                "Idempotency-Key": idempotency_key or uuid.uuid4().hex,
            }
            body = client.api.request(
                "POST", path, what, content=encoded.tobytes(), headers=headers, ok=(200, 201)
            ).json()
            tier = body.get("tier", "inline")
        else:
            client._check_size(size)
            ref, _ = client._store_large(encoded, "args", progress=progress)
            # The upload is done once; enqueueing the same issued key again is idempotent on the
            # server, so the session's retries never re-upload.
            body = client.api.request(
                "POST", path, what, json_body={"payloadRef": ref}, ok=(200, 201)
            ).json()
            tier = body.get("tier", "s3")
        job = Job(client, body["job_id"], tier=tier, queue=self.name)
        log.info("enqueued job_id=%s queue=%s tier=%s bytes=%d", job.job_id, self.name, tier, size)
        return job


class Job:
    def __init__(
        self, client: Client, job_id: str, *, tier: str | None = None, queue: str | None = None
    ):
        self.client = client
        self.job_id = job_id
        self.tier = tier
        self.queue = queue
        self._result: Any = None
        self._has_result = False

    def __repr__(self) -> str:
        return f"Job({self.job_id!r}, tier={self.tier!r}, queue={self.queue!r})"

    def status(self) -> JobStatus:
        status = self.client._status(self.job_id)
        self.tier = self.tier or status.tier
        self.queue = self.queue or status.queue
        return status

    def result(
        self, timeout: float | None = None, *, progress: bool | None = None, copy: bool = False
    ) -> Any:
        """Wait for the job and return its decoded value; `timeout=None` waits as long as it takes.

        Raises JobFailed (remote type, message, traceback), PayloadCorrupt, PayloadLost,
        ResultTimeout, JobNotFound.
        """
        if self._has_result:
            return self._result
        deadline = None if timeout is None else time.monotonic() + timeout
        client = self.client
        path = client._ns_path(f"/jobs/{self.job_id}/result")
        state: str | None = None
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = RESULT_WAIT_SLICE_S if remaining is None else min(RESULT_WAIT_SLICE_S, remaining)
            response = client.api.request(
                "GET",
                path,
                f"job {self.job_id} result",
                params={"wait": f"{wait:g}"},
                timeout_s=wait + 20.0,
                ok=(200, 202),
            )
            body = response.json()
            state = body.get("state", state)
            if response.status_code == 200:
                value = self._value_from(body, progress=progress, copy=copy)
                self._result, self._has_result = value, True
                return value
            if remaining is not None and deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(self.job_id, timeout or 0.0, state)

    def _value_from(self, body: dict, *, progress: bool | None, copy: bool) -> Any:
        state = body.get("state")
        if body.get("resultInline") is not None:
            return codec.decode(base64.b64decode(body["resultInline"]), copy=copy)
        if body.get("resultRef"):
            data = self.client._fetch_ref(body["resultRef"], job_id=self.job_id, progress=progress)
            return codec.decode(data, copy=copy)
        raise job_error(self.job_id, state, body.get("error"))


def job_error(job_id: str, state: str | None, error: Any) -> Exception:
    """The typed error for a job that ended without a result."""
    err = error if isinstance(error, dict) else {"message": str(error) if error else ""}
    message = str(err.get("message") or err.get("detail") or state or "no result")
    if state == "payload_corrupt":
        return PayloadCorrupt(
            f"job {job_id} payload_corrupt: {message}",
            job_id=job_id,
            key=err.get("key"),
            expected_sha256=err.get("expected_sha256"),
            actual_sha256=err.get("actual_sha256"),
        )
    if state == "payload_lost":
        return PayloadLost(
            f"job {job_id} payload_lost: {message}", job_id=job_id, key=err.get("key")
        )
    if state == "failed" or error:
        return JobFailed(
            job_id,
            str(err.get("type") or err.get("code") or "Error"),
            message,
            err.get("traceback"),
            state or "failed",
        )
    return ApiError(f"job {job_id} result has neither a value nor an error (state={state})")
