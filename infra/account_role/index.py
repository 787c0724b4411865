"""A CloudFormation custom resource: API Gateway's account-wide CloudWatch role, set only where
the account and region has none (issue 32). Runs in Lambda (python3.13, boto3 of the runtime).

`AWS::ApiGateway::Account` would overwrite a role another application set, and on a first deploy
it races IAM: a role created seconds earlier is not yet assumable by API Gateway, which answers
400 "The role ARN does not have required permissions" (a known CloudFormation/CDK failure). So:

- Create/Update: read the account setting (GetAccount). Ours already: nothing to do. Another
  role that still exists: leave it (Data.Action = left-existing), unless Replace=true. None, or
  one whose role was deleted: set ours (UpdateAccount), retrying the 400 for up to the
  invocation's time left (IAM propagation takes seconds, rarely a minute or two).
- Every call also retries AccessDenied until that deadline: the setter's own policy is created
  in the same deploy, and until IAM has propagated it, its calls are refused (issue 45).
- Delete: nothing. Deleting the setting is not possible, and the role is retained, so the APIs
  of the account keep logging.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

RETRY_S = 10.0
PHYSICAL_ID = "payloadstore-api-gateway-account"
# The setter's own freshly created policy, not yet propagated (API Gateway answers
# AccessDeniedException, IAM AccessDenied).
PROPAGATING = frozenset({"AccessDeniedException", "AccessDenied"})


def _code(error: Exception) -> str:
    return getattr(error, "response", {}).get("Error", {}).get("Code", "")


class Retrying:
    """Runs a call again after RETRY_S while it fails with one of the given codes, until the
    deadline; then the last error is raised."""

    def __init__(
        self, deadline_s: float, sleep: Callable[[float], None], clock: Callable[[], float]
    ):
        self.end = clock() + deadline_s
        self.sleep, self.clock = sleep, clock

    def __call__(self, what: str, call: Callable[[], Any], codes: frozenset[str] = PROPAGATING):
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except ClientError as e:
                if _code(e) not in codes or self.clock() + RETRY_S > self.end:
                    raise
                print(f"api gateway account {what} refused, retrying attempt={attempt} error={e}")
                self.sleep(RETRY_S)


def role_exists(iam: Any, arn: str, retrying: Retrying | None = None) -> bool:
    def get() -> None:
        iam.get_role(RoleName=arn.rsplit("/", 1)[-1])

    try:
        (retrying or (lambda _what, call: call()))("get-role", get)
    except (
        ClientError
    ) as e:  # anything but "no such role" (AccessDenied past the deadline): keep it
        return _code(e) != "NoSuchEntity"
    return True


def apply(
    props: dict,
    apigw: Any,
    iam: Any,
    deadline_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict:
    ours = props["RoleArn"]
    replace = str(props.get("Replace", "false")).lower() == "true"
    retrying = Retrying(deadline_s, sleep, clock)
    current = retrying("get-account", apigw.get_account).get("cloudwatchRoleArn")
    if current == ours:
        return {"RoleArn": ours, "Action": "kept"}
    if current and not replace and role_exists(iam, current, retrying):
        print(f"api gateway account role left as it is role={current}")
        return {"RoleArn": current, "Action": "left-existing"}
    # A new role is not assumable by API Gateway until IAM has propagated it (400), and the
    # setter's own permission may not have propagated yet either (AccessDenied).
    retrying(
        "update-account",
        lambda: apigw.update_account(
            patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": ours}]
        ),
        PROPAGATING | {"BadRequestException"},
    )
    print(f"api gateway account role set role={ours} replaced={current}")
    return {"RoleArn": ours, "Action": "set"}


def respond(event: dict, status: str, data: dict, reason: str) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or "see the function's log",
            "PhysicalResourceId": PHYSICAL_ID,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def handler(event: dict, context: Any) -> None:
    import boto3

    status, data, reason = "SUCCESS", {}, ""
    try:
        if event["RequestType"] != "Delete":
            left_s = context.get_remaining_time_in_millis() / 1000 - 20
            data = apply(
                event["ResourceProperties"],
                boto3.client("apigateway"),
                boto3.client("iam"),
                deadline_s=max(30.0, left_s),
            )
    except Exception as e:  # noqa: BLE001 (CloudFormation must hear back, or waits an hour)
        status, reason = "FAILED", f"{type(e).__name__}: {e}"
        print(f"api gateway account role failed error={reason}")
    respond(event, status, data, reason)
