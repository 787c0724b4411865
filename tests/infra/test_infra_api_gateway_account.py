"""The account's API Gateway CloudWatch role (issue 32): never overwrite a role the account
already has, and survive IAM propagation on a first deploy. A custom resource
(infra/account_role/index.py) does the setting; here it runs against stubbed API Gateway and IAM
clients (the errors shaped as botocore raises them) and answers a real HTTP endpoint standing for
CloudFormation's response URL."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from botocore.exceptions import ClientError

from infra.account_role import index
from infra.config import API_GATEWAY_ACCOUNT_STACK, CTX_API_GATEWAY_ACCOUNT
from tests.infra.cfn import resources
from tests.infra.test_infra_stages import _build

pytestmark = pytest.mark.infra

OURS = "arn:aws:iam::111122223333:role/PayloadStoreApiGatewayAccount-CloudWatchRole-ABC"
THEIRS = "arn:aws:iam::111122223333:role/service-role/other-app-apigw-logs"


def bad_request() -> ClientError:
    return ClientError(
        {"Error": {"Code": "BadRequestException", "Message": "The role ARN does not have "
                   "required permissions set to API Gateway"}},
        "UpdateAccount",
    )  # fmt: skip


def access_denied(operation: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "User: arn:aws:sts::111122223333:"
                   f"assumed-role/setter/fn is not authorized to perform: apigateway:{operation}"}},
        operation,
    )  # fmt: skip


class ApiGateway:
    def __init__(self, current: str | None, refusals: int = 0, denials: int = 0):
        self.current, self.refusals, self.updates = current, refusals, []
        # The setter's own policy not yet propagated: the first `denials` calls are refused
        self.denials = denials

    def _denied(self, operation: str) -> None:
        if self.denials:
            self.denials -= 1
            raise access_denied(operation)

    def get_account(self):
        self._denied("GET")
        return {"cloudwatchRoleArn": self.current} if self.current else {}

    def update_account(self, patchOperations):
        self._denied("PATCH")
        if self.refusals:
            self.refusals -= 1
            raise bad_request()
        (op,) = patchOperations
        assert (op["op"], op["path"]) == ("replace", "/cloudwatchRoleArn")
        self.updates.append(op["value"])
        self.current = op["value"]


class Iam:
    def __init__(self, roles: set[str]):
        self.roles = roles

    def get_role(self, RoleName):
        if RoleName not in self.roles:
            raise ClientError({"Error": {"Code": "NoSuchEntity"}}, "GetRole")
        return {"Role": {"RoleName": RoleName}}


def apply(apigw, iam, replace=False, deadline_s=60.0, clock=None):
    slept: list[float] = []
    props = {"RoleArn": OURS, "Replace": "true" if replace else "false"}
    kwargs = {"clock": clock} if clock else {}
    return index.apply(props, apigw, iam, deadline_s, sleep=slept.append, **kwargs), slept


def test_an_account_without_a_role_gets_ours():
    apigw = ApiGateway(current=None)
    data, _ = apply(apigw, Iam(set()))
    assert apigw.updates == [OURS] and data == {"RoleArn": OURS, "Action": "set"}


def test_a_role_the_account_already_has_is_left_alone():
    # Given the account's API Gateway already logs through another application's role
    apigw = ApiGateway(current=THEIRS)
    data, _ = apply(apigw, Iam({"other-app-apigw-logs"}))
    # Then it is not overwritten, and the stack reports the role in use
    assert apigw.updates == [] and apigw.current == THEIRS
    assert data == {"RoleArn": THEIRS, "Action": "left-existing"}


def test_a_setting_pointing_at_a_deleted_role_is_repaired_and_replace_overrides():
    apigw = ApiGateway(current=THEIRS)
    data, _ = apply(apigw, Iam(set()))
    assert apigw.updates == [OURS] and data["Action"] == "set"
    apigw = ApiGateway(current=THEIRS)
    apply(apigw, Iam({"other-app-apigw-logs"}), replace=True)
    assert apigw.updates == [OURS]


def test_a_new_role_refused_while_iam_propagates_is_retried_until_accepted():
    # Given API Gateway refuses the role twice (IAM has not propagated it yet)
    apigw = ApiGateway(current=None, refusals=2)
    data, slept = apply(apigw, Iam(set()))
    # Then the setter waits and tries again, and the deploy goes on
    assert apigw.updates == [OURS] and data["Action"] == "set"
    assert slept == [index.RETRY_S, index.RETRY_S]


def test_access_denied_while_its_own_policy_propagates_is_retried_until_accepted():
    # Given the setter's own freshly created policy is not yet visible: its first three calls
    # (GetAccount twice, then UpdateAccount) answer AccessDenied (issue 45)
    apigw = ApiGateway(current=None, denials=3)
    data, slept = apply(apigw, Iam(set()))
    # Then it waits and tries again instead of failing the first create
    assert apigw.updates == [OURS] and data["Action"] == "set"
    assert slept == [index.RETRY_S] * 3


def test_access_denied_past_the_deadline_fails_with_the_reason():
    now = [0.0]

    def clock():
        now[0] += index.RETRY_S
        return now[0]

    apigw = ApiGateway(current=None, denials=100)
    with pytest.raises(ClientError, match="not authorized"):
        apply(apigw, Iam(set()), deadline_s=35.0, clock=clock)
    assert apigw.updates == []


def test_refusals_past_the_deadline_fail_the_resource_with_the_reason():
    now = [0.0]

    def clock():
        now[0] += index.RETRY_S
        return now[0]

    apigw = ApiGateway(current=None, refusals=100)
    with pytest.raises(ClientError, match="required permissions"):
        apply(apigw, Iam(set()), deadline_s=35.0, clock=clock)
    assert apigw.updates == []


@pytest.fixture
def response_url():
    """An HTTP endpoint standing for CloudFormation's presigned response URL."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/response", received
    server.shutdown()


def event(kind: str, url: str) -> dict:
    return {
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:111122223333:stack/x/1",
        "RequestId": "r-1",
        "LogicalResourceId": "Account",
        "ResourceProperties": {"RoleArn": OURS},
    }


def test_a_delete_leaves_the_setting_and_answers_cloudformation(response_url):
    url, received = response_url
    # When the stack (or the resource) is deleted, Then nothing in the account is touched
    # (no client is even created) and CloudFormation is told it succeeded
    index.handler(event("Delete", url), context=None)
    (answer,) = received
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == index.PHYSICAL_ID
    assert (answer["RequestId"], answer["LogicalResourceId"]) == ("r-1", "Account")


def test_a_failure_is_reported_to_cloudformation_with_its_reason(response_url, monkeypatch):
    url, received = response_url

    def refuse(*args, **kwargs):
        raise bad_request()

    monkeypatch.setattr(index, "apply", refuse)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    class Context:
        def get_remaining_time_in_millis(self):
            return 60_000

    index.handler(event("Create", url), Context())
    (answer,) = received
    assert answer["Status"] == "FAILED" and "required permissions" in answer["Reason"]


def test_the_template_sets_the_role_through_the_custom_resource_with_least_privilege():
    app, _ = _build({})
    account = app.synth().get_stack_by_name(API_GATEWAY_ACCOUNT_STACK).template
    # No AWS::ApiGateway::Account: that resource overwrites whatever role is set
    assert resources(account, "AWS::ApiGateway::Account") == {}
    (setting,) = resources(account, "Custom::ApiGatewayAccountRole").values()
    assert setting["Properties"]["Replace"] == "false"
    # It is created after the role and its policy, by a function with time to wait for IAM
    (setter,) = resources(account, "AWS::Lambda::Function").values()
    assert setter["Properties"]["Timeout"] >= 120
    assert setter["Properties"]["Handler"] == "index.handler"
    role_id = next(
        k
        for k, r in resources(account, "AWS::IAM::Role").items()
        if "apigateway" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    )
    assert role_id in setting.get("DependsOn", [])
    # And the setter may read and patch the account setting, pass only our role, and only
    # look up (not change) other roles
    statements = [
        st
        for policy in resources(account, "AWS::IAM::Policy").values()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {
        a
        for st in statements
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    }
    assert actions == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "apigateway:GET",
        "apigateway:PATCH",
        "iam:GetRole",
        "iam:PassRole",
    }
    (pass_role,) = [st for st in statements if st["Action"] == "iam:PassRole"]
    assert pass_role["Resource"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert pass_role["Condition"] == {
        "StringEquals": {"iam:PassedToService": "apigateway.amazonaws.com"}
    }


def test_replace_and_a_bad_mode():
    app, _ = _build({CTX_API_GATEWAY_ACCOUNT: "replace"})
    account = app.synth().get_stack_by_name(API_GATEWAY_ACCOUNT_STACK).template
    (setting,) = resources(account, "Custom::ApiGatewayAccountRole").values()
    assert setting["Properties"]["Replace"] == "true"
    with pytest.raises(ValueError, match="auto, replace, existing"):
        _build({CTX_API_GATEWAY_ACCOUNT: "sometimes"})
