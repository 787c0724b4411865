"""The v1 wire as data: one table shared by the handlers, the CDK API and the local gateway.

Keeping the route -> function mapping here means `infra/` builds exactly the API that
`payloadstore.devstack.gateway` serves locally, and both dispatch to the same handler strings.
Nothing in this module may import boto3, redis or Powertools: CDK synth imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

CLIENT = "client"
DAEMON = "daemon"
ROLES = (CLIENT, DAEMON)

# Function group -> handler string, relative to the `functions/` code asset.
# These strings are public (README, CDK, sam local invoke): keep them stable.
FUNCTIONS: dict[str, str] = {
    "payloads": "controlplane.handlers.payloads.lambda_handler",
    "jobs": "controlplane.handlers.jobs.lambda_handler",
    "daemon": "controlplane.handlers.daemon.lambda_handler",
    "public": "controlplane.handlers.public.lambda_handler",
    "authorizer": "controlplane.handlers.authorizer.lambda_handler",
    # Not behind the API: invoked directly (aws lambda invoke / local CLI) to mint and revoke tokens.
    "admin": "controlplane.handlers.admin.lambda_handler",
}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # API Gateway resource path, `{name}` for path parameters
    function: str  # key of FUNCTIONS
    roles: tuple[str, ...] | None  # None: no authorizer (public)
    event: str  # name of the sample event under events/ (without .json)


ROUTES: tuple[Route, ...] = (
    Route(
        "POST", "/v1/namespaces/{ns}/payloads/presign", "payloads", (CLIENT, DAEMON), "presign_put"
    ),
    Route("POST", "/v1/namespaces/{ns}/queues/{queue}/jobs", "jobs", (CLIENT,), "enqueue_inline"),
    Route("GET", "/v1/namespaces/{ns}/jobs/{job_id}", "jobs", (CLIENT, DAEMON), "job_status"),
    Route("GET", "/v1/namespaces/{ns}/jobs/{job_id}/result", "jobs", (CLIENT,), "result_get"),
    Route("POST", "/v1/daemon/poll", "daemon", (DAEMON,), "daemon_poll"),
    Route("POST", "/v1/namespaces/{ns}/jobs/{job_id}/result", "daemon", (DAEMON,), "result_post"),
    Route(
        "POST", "/v1/namespaces/{ns}/jobs/{job_id}/failure", "daemon", (DAEMON,), "failure_report"
    ),
    Route("GET", "/v1/config", "public", (CLIENT, DAEMON), "config"),
    Route("GET", "/v1/health", "public", None, "health"),
    Route("GET", "/v1/openapi.json", "public", None, "openapi"),
)

# API Gateway REST API limits the local gateway enforces too.
API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
API_GATEWAY_TIMEOUT_S = 29
BINARY_MEDIA_TYPES = ("application/msgpack", "application/octet-stream")
