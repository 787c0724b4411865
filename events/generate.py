"""Writes the sample API Gateway events under events/ (run: python events/generate.py).

One REST proxy event per route of functions/payloadstore_controlplane/routes.py, plus the authorizer's REQUEST
event and the admin function's mint, set_policy and get_policy events. Each is usable as `sam local invoke -e events/<name>.json`;
replace `pst_replace_with_a_minted_token` with a real token where the authorizer runs."""

import base64
import json
from pathlib import Path

import msgpack

HERE = Path(__file__).resolve().parent
JOB = "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"
TOKEN = "pst_replace_with_a_minted_token"
# The lease of the delivery (from the poll answer) that result, failure and heartbeat carry.
LEASE = "replace-with-the-poll-lease"

TEMPLATE = {
    "resource": "/",
    "path": "/",
    "httpMethod": "GET",
    "headers": {},
    "multiValueHeaders": {},
    "queryStringParameters": None,
    "multiValueQueryStringParameters": None,
    "pathParameters": None,
    "stageVariables": None,
    "requestContext": {
        "accountId": "123456789012",
        "apiId": "abcdef1234",
        "stage": "prod",
        "requestId": "00000000-0000-0000-0000-000000000000",
        "resourcePath": "/",
        "httpMethod": "GET",
        "path": "/prod/",
        "protocol": "HTTP/1.1",
        "identity": {"sourceIp": "127.0.0.1", "userAgent": "sam-local"},
        "authorizer": {"namespace": "dev", "role": "client", "token_id": "example"},
        "requestTimeEpoch": 1764400000000,
    },
    "body": None,
    "isBase64Encoded": False,
}


def event(method, resource, params, role="client", body=None, query=None, headers=None, b64=False):
    e = json.loads(json.dumps(TEMPLATE))
    path = resource
    for k, v in (params or {}).items():
        path = path.replace("{" + k + "}", v)
    h = {
        "Host": "abcdef1234.execute-api.us-east-1.amazonaws.com",
        "Authorization": f"Bearer {TOKEN}",
    }
    if role is None:
        h.pop("Authorization")
    if isinstance(body, dict):
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    e.update(
        resource=resource,
        path=path,
        httpMethod=method,
        headers=h,
        multiValueHeaders={k: [v] for k, v in h.items()},
        queryStringParameters=query,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        pathParameters=params or None,
        body=body,
        isBase64Encoded=b64,
    )
    rc = e["requestContext"]
    rc.update(resourcePath=resource, httpMethod=method, path="/prod" + path)
    if role is None:
        rc.pop("authorizer")
    else:
        rc["authorizer"] = {"namespace": "dev", "role": role, "token_id": "example"}
    return e


def main() -> None:
    key = f"payloads/2026/01/01/{JOB}/args"
    events = {
        "presign_put": event(
            "POST",
            "/v1/namespaces/{ns}/payloads/presign",
            {"ns": "dev"},
            query={"op": "put", "size": "8388608"},
            # CRC64NVME (base64, as S3 shows it): signed into the URL; `sha256` (hex) instead
            # for a client that verifies with sha256.
            body={"kind": "args", "crc64nvme": "AAAAAAAAAAA="},
        ),
        "payloads_parts": event(
            "POST",
            "/v1/namespaces/{ns}/payloads/parts",
            {"ns": "dev"},
            body={
                "job_id": JOB,
                "kind": "args",
                "parts": [
                    {"number": 1, "size": 16777216, "sha256": "a" * 64},
                    {"number": 2, "size": 16777216, "sha256": "b" * 64},
                ],
            },
        ),
        "presign_get": event(
            "POST",
            "/v1/namespaces/{ns}/payloads/presign",
            {"ns": "dev"},
            role="daemon",
            query={"op": "get", "key": key},
        ),
        "enqueue_inline": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": "dev", "queue": "default"},
            body=base64.b64encode(msgpack.packb({"args": [1, 2], "kwargs": {}})).decode(),
            headers={"Content-Type": "application/msgpack"},
            b64=True,
        ),
        "enqueue_ref": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": "dev", "queue": "default"},
            body={
                # As the SDK sends it: what the control plane checks against what it issued.
                "payloadRef": {"bucket": "payloadstore-payloads", "key": key, "size": 8388608}
            },
        ),
        "job_status": event(
            "GET", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": "dev", "job_id": JOB}
        ),
        "job_cancel": event(
            "DELETE",
            "/v1/namespaces/{ns}/jobs/{job_id}",
            {"ns": "dev", "job_id": JOB},
            headers={"Idempotency-Key": "cancel-example-1"},
        ),
        "result_get": event(
            "GET",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": "dev", "job_id": JOB},
            query={"wait": "1"},
        ),
        "daemon_poll": event(
            "POST",
            "/v1/daemon/poll",
            None,
            role="daemon",
            body={"namespace": "dev", "queues": ["default"], "wait_s": 1, "daemon_id": "daemon-1"},
        ),
        "daemon_leases": event(
            "POST",
            "/v1/daemon/leases",
            None,
            role="daemon",
            body={
                "namespace": "dev",
                "daemon_id": "daemon-1",
                "leases": [{"job_id": JOB, "lease": LEASE}],
                "wait_s": 1,
            },
        ),
        "daemon_poll_many": event(
            "POST",
            "/v1/daemon/poll",
            None,
            role="daemon",
            body={
                "namespace": "dev",
                "queues": ["default"],
                "wait_s": 1,
                "daemon_id": "daemon-1",
                "max_jobs": 8,
            },
        ),
        "result_post": event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": "dev", "job_id": JOB},
            role="daemon",
            body={"lease": LEASE, "resultInline": base64.b64encode(msgpack.packb(3)).decode()},
        ),
        # Result-and-next (issue 34): the result stored, then up to 4 next deliveries answered.
        "result_post_next": event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/result",
            {"ns": "dev", "job_id": JOB},
            role="daemon",
            body={
                "lease": LEASE,
                "resultInline": base64.b64encode(msgpack.packb(3)).decode(),
                "next": {
                    "queues": ["default"],
                    "max_jobs": 4,
                    "wait_s": 1,
                    "daemon_id": "daemon-1",
                },
            },
            headers={"Idempotency-Key": "post-example-1"},
        ),
        # Enqueue-and-wait (issue 34): 201 with the result when the job ends within 5 s.
        "enqueue_wait": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": "dev", "queue": "default"},
            body=base64.b64encode(msgpack.packb({"args": [1, 2], "kwargs": {}})).decode(),
            headers={"Content-Type": "application/msgpack"},
            query={"wait": "5"},
            b64=True,
        ),
        "enqueue_batch": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/jobs:batch",
            {"ns": "dev", "queue": "default"},
            body={
                "jobs": [
                    {
                        "payloadInline": base64.b64encode(
                            msgpack.packb({"args": [i], "kwargs": {}})
                        ).decode()
                    }
                    for i in range(3)
                ]
            },
        ),
        "jobs_status": event(
            "POST",
            "/v1/namespaces/{ns}/jobs:status",
            {"ns": "dev"},
            body={"job_ids": [JOB], "wait_s": 0},
        ),
        "queue_list": event("GET", "/v1/namespaces/{ns}/queues", {"ns": "dev"}, role="daemon"),
        "queue_stats": event(
            "GET", "/v1/namespaces/{ns}/queues/{queue}", {"ns": "dev", "queue": "default"}
        ),
        "jobs_list": event(
            "GET",
            "/v1/namespaces/{ns}/queues/{queue}/jobs",
            {"ns": "dev", "queue": "default"},
            query={"state": "failed", "limit": "20"},
        ),
        "job_retry": event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/retry",
            {"ns": "dev", "job_id": JOB},
            headers={"Idempotency-Key": "retry-example-1"},
        ),
        "queue_redrive": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/redrive",
            {"ns": "dev", "queue": "default"},
            body={"states": ["failed", "payload_lost", "payload_corrupt"], "limit": 100},
            headers={"Idempotency-Key": "redrive-example-1"},
        ),
        "queue_purge": event(
            "POST",
            "/v1/namespaces/{ns}/queues/{queue}/purge",
            {"ns": "dev", "queue": "default"},
            headers={"Idempotency-Key": "purge-example-1"},
        ),
        "queue_throughput": event(
            "GET",
            "/v1/namespaces/{ns}/throughput",
            {"ns": "dev"},
            query={"queue": "default"},
        ),
        "job_payloads": event(
            "GET", "/v1/namespaces/{ns}/jobs/{job_id}/payloads", {"ns": "dev", "job_id": JOB}
        ),
        "failure_report": event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/failure",
            {"ns": "dev", "job_id": JOB},
            role="daemon",
            body={"lease": LEASE, "state": "payload_lost", "detail": "GET returned 404"},
        ),
        "heartbeat": event(
            "POST",
            "/v1/namespaces/{ns}/jobs/{job_id}/heartbeat",
            {"ns": "dev", "job_id": JOB},
            role="daemon",
            body={"lease": LEASE},
        ),
        "blob_create": event(
            "POST",
            "/v1/namespaces/{ns}/blobs",
            {"ns": "dev"},
            body={"sha256": "b" * 64, "size": 268435456},
        ),
        "config": event("GET", "/v1/config", None),
        "health": event("GET", "/v1/health", None, role=None),
        "health_details": event("GET", "/v1/health/details", None),
        "openapi": event("GET", "/v1/openapi.json", None, role=None),
    }
    events["_template"] = TEMPLATE
    events["authorizer_request"] = {
        "type": "REQUEST",
        "methodArn": "arn:aws:execute-api:us-east-1:123456789012:abcdef1234/prod/GET/v1/config",
        "resource": "/v1/config",
        "path": "/v1/config",
        "httpMethod": "GET",
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "multiValueHeaders": {"Authorization": [f"Bearer {TOKEN}"]},
        "queryStringParameters": {},
        "multiValueQueryStringParameters": {},
        "pathParameters": {},
        "stageVariables": {},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abcdef1234",
            "stage": "prod",
            "requestId": "00000000-0000-0000-0000-000000000001",
            "resourcePath": "/v1/config",
            "httpMethod": "GET",
            "path": "/prod/v1/config",
            "identity": {"sourceIp": "127.0.0.1"},
        },
    }
    events["admin_mint"] = {"action": "mint", "namespace": "dev", "role": "client"}
    # Namespace policies (the defaults spelled out, so invoking it changes nothing).
    events["admin_set_policy"] = {
        "action": "set_policy",
        "namespace": "dev",
        "retention": "2d",
        "kms_key": "none",
        "inline": "allowed",
    }
    events["admin_get_policy"] = {"action": "get_policy", "namespace": "dev"}
    # What an EventBridge schedule rule sends the metrics function (routes.SCHEDULES).
    events["metrics_schedule"] = {
        "version": "0",
        "id": "00000000-0000-0000-0000-000000000002",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/payloadstore-metrics"],
        "detail": {},
    }
    # ... and the blob renewals function (every 5 minutes).
    events["renewals_schedule"] = {
        **events["metrics_schedule"],
        "id": "00000000-0000-0000-0000-000000000003",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/payloadstore-renewals"],
    }
    for name, body in events.items():
        (HERE / f"{name}.json").write_text(json.dumps(body, indent=2) + "\n")


if __name__ == "__main__":
    main()
