"""API Gateway REST proxy events, built from the samples under events/ so tests and
`sam local invoke -e events/<name>.json` exercise the same shapes."""

from __future__ import annotations

import base64
import copy
import json
import time
import uuid
from pathlib import Path

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict:
    return json.loads((EVENTS_DIR / f"{name}.json").read_text())


def api_event(
    method: str,
    resource: str,
    path_params: dict[str, str] | None = None,
    *,
    namespace: str | None = None,
    role: str | None = None,
    body: bytes | str | dict | None = None,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    binary: bool = False,
    authorizer_extra: dict[str, str] | None = None,
) -> dict:
    """A proxy event for `resource` (API Gateway template path) as the authorizer would pass it
    (`authorizer_extra`: more context, e.g. the namespace's policy)."""
    path_params = path_params or {}
    path = resource
    for k, v in path_params.items():
        path = path.replace("{" + k + "}", v)
    event = copy.deepcopy(load_event("_template"))
    hdrs = {"Host": "api.example.test", "User-Agent": "tests"}
    if isinstance(body, dict):
        body = json.dumps(body)
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    is_b64 = False
    if isinstance(body, (bytes, bytearray, memoryview)):
        body = base64.b64encode(bytes(body)).decode()
        is_b64 = True
    elif binary and body is not None:
        body = base64.b64encode(body.encode()).decode()
        is_b64 = True
    event.update(
        resource=resource,
        path=path,
        httpMethod=method,
        headers=hdrs,
        multiValueHeaders={k: [v] for k, v in hdrs.items()},
        queryStringParameters=query or None,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        pathParameters=path_params or None,
        body=body,
        isBase64Encoded=is_b64,
    )
    rc = event["requestContext"]
    rc.update(
        resourcePath=resource,
        httpMethod=method,
        requestId=str(uuid.uuid4()),
        path=f"/{rc['stage']}{path}",
    )
    if namespace is not None:
        rc["authorizer"] = {
            "namespace": namespace,
            "role": role,
            "token_id": "test",
            **(authorizer_extra or {}),
        }
    else:
        rc.pop("authorizer", None)
    return event


class FakeLambdaContext:
    function_name = "payloadstore-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:payloadstore-test"
    log_group_name = "/aws/lambda/payloadstore-test"
    log_stream_name = "test"

    def __init__(self, remaining_ms: int = 29_000):
        self.aws_request_id = str(uuid.uuid4())
        # The invocation's deadline, as Lambda counts it down from the function's timeout.
        self._deadline = time.monotonic() + remaining_ms / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self._deadline - time.monotonic()) * 1000), 0)
