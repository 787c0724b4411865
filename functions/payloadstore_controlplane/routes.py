"""The v1 wire as data: one table shared by the handlers, the CDK API and the local gateway.

Keeping the route -> function mapping here means `infra/` builds exactly the API that
`payloadstore_devstack.gateway` serves locally, and both dispatch to the same handler strings.
This is the only place a path is written: each handler registers with `@route(app, routes.X)`
(handlers/_routing.py), which takes the path, method and roles from here.
Nothing in this module may import boto3, redis or Powertools: CDK synth imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CLIENT = "client"
DAEMON = "daemon"
ROLES = (CLIENT, DAEMON)

# Function group -> handler string, relative to the `functions/` code asset.
# These strings are public (README, CDK, sam local invoke): keep them stable.
FUNCTIONS: dict[str, str] = {
    "payloads": "payloadstore_controlplane.handlers.payloads.lambda_handler",
    "jobs": "payloadstore_controlplane.handlers.jobs.lambda_handler",
    "daemon": "payloadstore_controlplane.handlers.daemon.lambda_handler",
    "public": "payloadstore_controlplane.handlers.public.lambda_handler",
    "authorizer": "payloadstore_controlplane.handlers.authorizer.lambda_handler",
    # Not behind the API: invoked directly (aws lambda invoke / local CLI) to mint, revoke tokens.
    "admin": "payloadstore_controlplane.handlers.admin.lambda_handler",
    # Not behind the API: run on a schedule (SCHEDULES) to publish queue metrics.
    "metrics": "payloadstore_controlplane.handlers.metrics.lambda_handler",
    # Not behind the API: run on a schedule (SCHEDULES) to renew the blobs jobs still need.
    "renewals": "payloadstore_controlplane.handlers.renewals.lambda_handler",
}


# -- what a route answers (drives the OpenAPI document; see docs/wire.md "Declaring responses") --
#
# `responses` maps each status a route's own code can answer to the body it carries:
#   "ModelName"       a model of models/api.py          "A|B"    any one of several models
#   ERROR             the error body {"error": {...}}    None     no body (204)
#   OBJECT            any JSON object                    (spec, "description") to say more
# The statuses every route of a kind shares are added by the OpenAPI builder (COMMON_ERRORS), so a
# route lists only its own: success answers and the domain errors its logic raises (404, 409, ...).
ERROR = "ErrorResponse"
OBJECT = "object"
JSON = ("application/json",)

ResponseSpec = str | None | tuple[str | None, str]

# Shared answers, by what the route has (the builder adds them unless the route lists the status):
#   authorized   401 (no or unknown token: API Gateway's {"message"} or our error body),
#                403 (another namespace, a role the route does not serve, or a gateway deny),
#                503 (the token store unavailable to the authorizer: AUTHORIZER_UNAVAILABLE)
#   inputs       422 (path, query or body fails validation)
#   body         400 (unparsable: not UTF-8/JSON, nested too deep), 413 (over 10 MB, the gateway),
#                415 (a content type the route does not take)
#   backend      503 (Redis or S3 unavailable; always with Retry-After)
COMMON_ERRORS = {
    "authorized": (401, 403, 503),
    "inputs": (422,),
    "body": (400, 413, 415, 422),
    "backend": (503,),
}


@dataclass(frozen=True)
class Schedule:
    function: str  # key of FUNCTIONS
    every_minutes: int
    event: str  # name of the sample event under events/ (without .json)


# Functions run on a timer: an EventBridge rule in CDK, a timer thread in the local stack.
# The renewer's period P enters the blob arithmetic (models/blob_lifetime.py): a blob is referenced
# only while its object has BLOB_RENEW_AHEAD_S / 2 left, which must cover P and a copy.
RENEWAL_EVERY_MINUTES = 5
SCHEDULES: tuple[Schedule, ...] = (
    Schedule("metrics", 1, "metrics_schedule"),
    Schedule("renewals", RENEWAL_EVERY_MINUTES, "renewals_schedule"),
)


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # API Gateway resource path, `{name}` for path parameters
    function: str  # key of FUNCTIONS
    roles: tuple[str, ...] | None  # None: no authorizer (public)
    event: str  # name of the sample event under events/ (without .json)
    # status -> body (see above). Every route lists at least its success answers.
    responses: Mapping[int, ResponseSpec] = field(default_factory=dict, hash=False, compare=False)
    # Media types the request body may have; () = the route reads no body. A body of any other
    # type is refused with 415 before the handler runs; JSON bodies are parsed first (400).
    body: tuple[str, ...] = ()
    # The request body model (models/api.py) for routes that parse their body by hand, and
    # whether a body must be sent (presign also takes its fields as query parameters).
    request: str | None = None
    body_required: bool = True
    # False: the route touches neither Redis nor S3 (no 503 to declare).
    backend: bool = True


# Each route by name: handlers register with `@route(app, routes.PRESIGN)` (handlers/_routing.py),
# so a path is written here and nowhere else.
PRESIGN = Route(
    "POST",
    "/v1/namespaces/{ns}/payloads/presign",
    "payloads",
    (CLIENT, DAEMON),
    "presign_put",
    responses={
        200: ("PresignPutResponse|PresignGetResponse", "a presigned PUT (op=put) or GET"),
        404: ("ErrorResponse", "no such job, or a key never issued to this namespace"),
        409: ERROR,
        410: (
            "ErrorResponse",
            "gone: past retention; result_consumed, arguments_consumed: deleted (consume)",
        ),
        413: ("ErrorResponse", "size over MAX_PAYLOAD_BYTES"),
        429: ("ErrorResponse", "past MAX_PRESIGNS_PER_JOB for this job"),
    },
    body=JSON,
    request="PresignRequest",
    body_required=False,
)
PARTS = Route(
    "POST",
    "/v1/namespaces/{ns}/payloads/parts",
    "payloads",
    (CLIENT, DAEMON),
    "payloads_parts",
    responses={
        200: ("PartsResponse", "one presigned UploadPart URL per part asked for"),
        404: (
            "ErrorResponse",
            (
                "no such job, or no key of this kind issued to this namespace; no multipart "
                "upload open for that blob in this namespace"
            ),
        ),
        409: (
            "ErrorResponse",
            (
                "not a multipart upload, or no longer open; a part asked for again with another "
                "sha256; the job not awaiting its upload (args) or not running (result); "
                "lease_mismatch"
            ),
        ),
        429: ("ErrorResponse", "past MAX_PRESIGNS_PER_JOB for this job (or blob upload)"),
    },
    body=JSON,
)
ENQUEUE = Route(
    "POST",
    "/v1/namespaces/{ns}/queues/{queue}/jobs",
    "jobs",
    (CLIENT,),
    "enqueue_inline",
    responses={
        201: (
            "EnqueueResponse",
            "created; with ?wait=S, the result too when the job ended within S",
        ),
        200: ("EnqueueResponse", "the same job again (idempotent retry)"),
        409: (
            "ErrorResponse",
            (
                "a key not issued to this namespace or not uploaded; policy_mismatch (the "
                "object lacks the namespace's retention tag or KMS key); inline_never (the "
                "namespace's policy refuses inline payloads)"
            ),
        ),
        413: ("ErrorResponse", "inline payload over INLINE_THRESHOLD"),
        502: ("ErrorResponse", "object storage refused the check of the upload"),
    },
    body=("application/json", "application/msgpack", "application/octet-stream"),
    request="EnqueueRequest",
)
JOB_STATUS = Route(
    "GET",
    "/v1/namespaces/{ns}/jobs/{job_id}",
    "jobs",
    (CLIENT, DAEMON),
    "job_status",
    responses={200: "JobStatusResponse", 404: ERROR},
)
RESULT_GET = Route(
    "GET",
    "/v1/namespaces/{ns}/jobs/{job_id}/result",
    "jobs",
    (CLIENT,),
    "result_get",
    responses={
        200: ("ResultResponse", "the result, or the terminal failure"),
        202: ("ResultResponse", "still queued or running after the wait"),
        404: ERROR,
        410: (
            "ErrorResponse",
            "result_consumed: retention consume deleted the result, read past its grace",
        ),
    },
)
CANCEL = Route(
    "DELETE",
    "/v1/namespaces/{ns}/jobs/{job_id}",
    "jobs",
    (CLIENT,),
    "job_cancel",
    responses={
        200: ("CancelResponse", "it was queued: cancelled, never delivered"),
        202: ("CancelResponse", "it is running: cancel requested from its daemon"),
        404: ERROR,
        409: ("ErrorResponse", "the job already ended"),
    },
)
POLL = Route(
    "POST",
    "/v1/daemon/poll",
    "daemon",
    (DAEMON,),
    "daemon_poll",
    responses={
        200: ("PollResponse|PollManyResponse", 'a job; with max_jobs, {"jobs": [...]}'),
        204: (None, "nothing to do"),
    },
    body=JSON,
)
RESULT_POST = Route(
    "POST",
    "/v1/namespaces/{ns}/jobs/{job_id}/result",
    "daemon",
    (DAEMON,),
    "result_post",
    responses={
        200: (
            "PollManyResponse",
            'with next: {"jobs": [...]}, the next deliveries (maybe none), once the result is stored',
        ),
        204: (None, "stored"),
        404: ERROR,
        409: (
            "ErrorResponse",
            (
                "lease_mismatch, or the job takes no other result, or the key is not its own; "
                "policy_mismatch; inline_never (the namespace's policy refuses inline results)"
            ),
        ),
        413: ("ErrorResponse", "inline result over INLINE_THRESHOLD"),
        502: ("ErrorResponse", "object storage refused the check of the upload"),
    },
    body=JSON,
)
FAILURE = Route(
    "POST",
    "/v1/namespaces/{ns}/jobs/{job_id}/failure",
    "daemon",
    (DAEMON,),
    "failure_report",
    responses={
        200: (
            "PollManyResponse",
            'with next: {"jobs": [...]}, the next deliveries (maybe none), once it is recorded',
        ),
        204: (None, "recorded"),
        404: ERROR,
        409: ("ErrorResponse", "lease_mismatch, or the job takes no other report"),
    },
    body=JSON,
)
HEARTBEAT = Route(
    "POST",
    "/v1/namespaces/{ns}/jobs/{job_id}/heartbeat",
    "daemon",
    (DAEMON,),
    "heartbeat",
    responses={
        200: ("HeartbeatResponse", "the lease is extended"),
        404: ERROR,
        409: ("ErrorResponse", "lease_mismatch: the lease is not the current delivery's"),
    },
    body=JSON,
)
LEASES = Route(
    "POST",
    "/v1/daemon/leases",
    "daemon",
    (DAEMON,),
    "daemon_leases",
    responses={
        200: (
            "LeasesResponse",
            (
                "the leases renewed; answered after wait_s, or at once when a cancel of one of "
                "the daemon's jobs is requested or a lease is not current"
            ),
        ),
    },
    body=JSON,
)
CONFIG = Route(
    "GET",
    "/v1/config",
    "public",
    (CLIENT, DAEMON),
    "config",
    responses={200: "ConfigResponse"},
    backend=False,
)
HEALTH = Route(
    "GET",
    "/v1/health",
    "public",
    None,
    "health",
    responses={
        200: ("PublicHealthResponse", "every check passes (ok/failing per check, no details)"),
        503: ("PublicHealthResponse", "one or more checks failing (with Retry-After)"),
    },
)
HEALTH_DETAILS = Route(
    "GET",
    "/v1/health/details",
    "public",
    (CLIENT, DAEMON),
    "health_details",
    responses={
        200: ("HealthResponse", "every check passes, with each check's detail"),
        503: ("HealthResponse", "one or more checks failing (with Retry-After)"),
    },
)
OPENAPI = Route(
    "GET",
    "/v1/openapi.json",
    "public",
    None,
    "openapi",
    responses={200: (OBJECT, "this document")},
    backend=False,
)
ENQUEUE_BATCH = Route(
    "POST",
    "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
    "jobs",
    (CLIENT,),
    "enqueue_batch",
    responses={
        200: (
            "BatchEnqueueResponse",
            (
                "one answer per job, in request order; with ?wait=S, each job that ended "
                "within S carries its result"
            ),
        ),
        413: ("ErrorResponse", "inline bytes over BATCH_MAX_BYTES"),
    },
    body=JSON,
    request="BatchEnqueueRequest",
)
JOBS_STATUS = Route(
    "POST",
    "/v1/namespaces/{ns}/jobs:status",
    "jobs",
    (CLIENT,),
    "jobs_status",
    responses={200: ("JobsStatusResponse", "one answer per job id, in request order")},
    body=JSON,
    request="JobsStatusRequest",
)
QUEUE_LIST = Route(
    "GET",
    "/v1/namespaces/{ns}/queues",
    "jobs",
    (CLIENT, DAEMON),
    "queue_list",
    responses={200: ("QueueListResponse", "every queue the namespace has used")},
)
QUEUE_STATS = Route(
    "GET",
    "/v1/namespaces/{ns}/queues/{queue}",
    "jobs",
    (CLIENT, DAEMON),
    "queue_stats",
    responses={
        200: ("QueueStats", "the queue's figures"),
        404: ("ErrorResponse", "a queue this namespace never used"),
    },
)
JOBS_LIST = Route(
    "GET",
    "/v1/namespaces/{ns}/queues/{queue}/jobs",
    "jobs",
    (CLIENT,),
    "jobs_list",
    responses={200: ("JobListResponse", "a page of the queue's jobs in that state, newest first")},
)
JOB_RETRY = Route(
    "POST",
    "/v1/namespaces/{ns}/jobs/{job_id}/retry",
    "jobs",
    (CLIENT,),
    "job_retry",
    responses={
        200: ("RetryResponse", "queued again, same id"),
        404: ERROR,
        409: (
            "ErrorResponse",
            "not_retryable: `reason` succeeded, queued, running, arguments_expired, blob_expired",
        ),
    },
)
QUEUE_REDRIVE = Route(
    "POST",
    "/v1/namespaces/{ns}/queues/{queue}/redrive",
    "jobs",
    (CLIENT,),
    "queue_redrive",
    responses={200: ("RedriveResponse", "how many jobs were retried, and skipped")},
    body=JSON,
    request="RedriveRequest",
    body_required=False,
)
QUEUE_PURGE = Route(
    "POST",
    "/v1/namespaces/{ns}/queues/{queue}/purge",
    "jobs",
    (CLIENT,),
    "queue_purge",
    responses={200: ("PurgeResponse", "how many queued jobs were cancelled, and remain")},
)
QUEUE_THROUGHPUT = Route(
    "GET",
    "/v1/namespaces/{ns}/throughput",
    "jobs",
    (CLIENT, DAEMON),
    "queue_throughput",
    responses={
        200: (
            "ThroughputResponse",
            "succeeded and failed jobs per minute over the last hour (?queue=Q: one queue)",
        )
    },
)
JOB_PAYLOADS = Route(
    "GET",
    "/v1/namespaces/{ns}/jobs/{job_id}/payloads",
    "jobs",
    (CLIENT,),
    "job_payloads",
    responses={
        200: (
            "JobPayloadsResponse",
            "the job's arguments and result: inline bytes, or the S3 reference and a GET URL",
        ),
        404: ERROR,
    },
)

BLOBS = Route(
    "POST",
    "/v1/namespaces/{ns}/blobs",
    "payloads",
    (CLIENT, DAEMON),
    "blob_create",
    responses={
        200: (
            "BlobResponse",
            (
                "exists: true (the namespace has it, verified), or upload instructions (a "
                "presigned PUT with size and sha256 signed in; above MULTIPART_THRESHOLD a "
                "multipart upload): upload, then POST again"
            ),
        ),
        409: (
            "ErrorResponse",
            (
                "the namespace's blob with this sha256 has another size (size_mismatch); its "
                "multipart upload's parts are not the ones issued (parts_mismatch), or it is "
                "gone (not_uploaded)"
            ),
        ),
    },
    body=JSON,
    request="BlobRequest",
)

# Every route, in this order (CDK, the local gateway, the OpenAPI document and the events).
ROUTES: tuple[Route, ...] = (
    PRESIGN,
    PARTS,
    ENQUEUE,
    JOB_STATUS,
    RESULT_GET,
    CANCEL,
    POLL,
    RESULT_POST,
    FAILURE,
    HEARTBEAT,
    LEASES,
    CONFIG,
    HEALTH,
    HEALTH_DETAILS,
    OPENAPI,
    ENQUEUE_BATCH,
    JOBS_STATUS,
    QUEUE_LIST,
    QUEUE_STATS,
    JOBS_LIST,
    JOB_RETRY,
    QUEUE_REDRIVE,
    QUEUE_PURGE,
    BLOBS,
    QUEUE_THROUGHPUT,
    JOB_PAYLOADS,
)


# The OpenAPI document's `info.description` (handlers/public.py builds the document).
OPENAPI_DESCRIPTION = (
    "GET /v1/health (no auth), GET /v1/health/details, GET /v1/config (any token),\n"
    "GET /v1/openapi.json (no auth)."
)


def find_route(method: str, path: str) -> Route | None:
    """The route of an API Gateway resource path (`{name}` parameters) and method, if any."""
    for route in ROUTES:
        if route.method == method and route.path == path:
            return route
    return None


# API Gateway REST API limits the local gateway enforces too.
API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
API_GATEWAY_TIMEOUT_S = 29
# What a long-poll keeps for after its wait (the last Redis call, the answer, the way back to API
# Gateway): handlers/_budget.py ends every wait this long before either deadline.
LONG_POLL_ANSWER_MARGIN_S = 1.5
# A cold start of a VPC function (init before the handler; inside API Gateway's 29 s, outside the
# function's timeout): the wait caps must leave this much room (infra checks at synth).
COLD_START_ALLOWANCE_S = 3.0
BINARY_MEDIA_TYPES = ("application/msgpack", "application/octet-stream")
# API Gateway's payload compression (the REST API's minimumCompressionSize): an answer of at
# least this many bytes is gzipped for a client that accepts it. Answers carrying presigned URLs
# (~800 B) shrink by about 40%; smaller ones would barely shrink and are sent as they are.
MIN_COMPRESSION_BYTES = 512


# API Gateway's own answer when the authorizer fails: it raised (the token store unreachable on a
# container with no listing to answer from: a cold one, or one past TOKEN_STALE_MAX_S), timed out
# or answered malformed. By default API Gateway answers 500 for every caller; the stack sets the
# AUTHORIZER_FAILURE and AUTHORIZER_CONFIGURATION_ERROR gateway responses to this (infra/api.py),
# and the local gateway answers the same (devstack gateway_auth.py): a 503 a client retries after
# Retry-After, as it does Redis's. Retry-After is the token store's own back-off after a failed
# SSM read (store/tokens.py RETRY_AFTER_FAILURE_S): a retry sooner would meet the same container
# still leaving SSM alone.
AUTHORIZER_UNAVAILABLE_STATUS = 503
AUTHORIZER_UNAVAILABLE_RETRY_AFTER_S = 5
AUTHORIZER_UNAVAILABLE_CODE = "token_store_unavailable"
AUTHORIZER_UNAVAILABLE_MESSAGE = (
    "the token store is unavailable to the authorizer (Parameter Store failing); "
    "retry after Retry-After seconds"
)


def authorizer_unavailable_body() -> dict:
    """The answer's body: the wire's error shape (ErrorResponse)."""
    return {
        "error": {
            "code": AUTHORIZER_UNAVAILABLE_CODE,
            "message": AUTHORIZER_UNAVAILABLE_MESSAGE,
        }
    }
