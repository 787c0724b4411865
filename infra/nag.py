"""Every cdk-nag AwsSolutions acknowledgement of the stack, each with its reason, in one place.

cdk-nag v3 acknowledges each finding by its exact id (`Rule[Finding]`); findings that name a
resource carry its logical id, which is computed here from the construct so the list follows
renames. Anything not acknowledged here fails synth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from constructs import IConstruct

from infra.config import (
    ADMIN_FUNCTION,
    AUTHORIZER_FUNCTION,
    BLOB_OBJECT_ACTIONS,
    OBJECT_ACTIONS,
)

if TYPE_CHECKING:
    from infra.account import ApiGatewayAccountStack
    from infra.stack import PayloadStoreStack


NAG_PLUGIN = "AwsSolutions"


def _ack(scope: IConstruct, finding: str, reason: str) -> None:
    # Validation ids are `<plugin>::<rule>`; the rule of a specific finding is `Rule[Finding]`.
    cdk.Validations.of(scope).acknowledge(
        cdk.Acknowledgment(id=f"{NAG_PLUGIN}::{finding}", reason=reason)
    )


def _pseudo(stack: cdk.Stack, value: str, name: str) -> str:
    """How a finding id spells a pseudo parameter: its value in a stack bound to an account and
    region (app_factory.deploy_environment), else `<AWS::Name>`."""
    resolved = stack.resolve(value)
    return resolved if isinstance(resolved, str) else f"<AWS::{name}>"


def _arn_prefix(stack: cdk.Stack, service: str, regional: bool = True) -> str:
    """`arn:<partition>:<service>:<region>:<account>:` as cdk-nag writes it into a finding id."""
    partition = _pseudo(stack, stack.partition, "Partition")
    region = _pseudo(stack, stack.region, "Region") if regional else ""
    account = _pseudo(stack, stack.account, "AccountId")
    return f"arn:{partition}:{service}:{region}:{account}:"


def _logical_id(stack: cdk.Stack, construct: IConstruct) -> str:
    return stack.resolve(stack.get_logical_id(construct.node.default_child))


def acknowledge_findings(stack: PayloadStoreStack) -> None:
    fns = stack.functions
    api = stack.api

    # --- Lambda -------------------------------------------------------------------------------
    for fn in fns.functions.values():
        _ack(
            fn,
            "AwsSolutions-L1",
            "python3.13 is deliberate: the dependency layer ships bytecode compiled by an "
            "interpreter of the runtime's exact version (cold imports ~0.7 s instead of ~2 s), "
            "and 3.13 is the newest interpreter the build machines have.",
        )

    # --- IAM: the function roles are written out by hand; each wildcard below is the narrowest
    # resource the action supports.
    for group, role in fns.roles.items():
        _ack(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "Only actions without resource-level permissions use '*': the EC2 network-interface "
            "calls Lambda makes for a VPC function, and X-Ray PutTraceSegments/"
            "PutTelemetryRecords for active tracing.",
        )
        log_group_id = _logical_id(stack, fns.log_groups[group])
        _ack(
            role,
            f"AwsSolutions-IAM5[Resource::<{log_group_id}.Arn>:log-stream:*]",
            "Log streams are created by the runtime with generated names; the grant is limited "
            "to the streams of this function's own log group.",
        )
    bucket_id = _logical_id(stack, stack.storage.bucket)
    for group in OBJECT_ACTIONS:
        _ack(
            fns.roles[group],
            f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/payloads/*]",
            "Payload keys are minted per job (payloads/YYYY/MM/DD/<job_id>/<kind>), so the "
            "grant is the payloads/ prefix, and only s3:GetObject (HEAD verification) or "
            "s3:GetObject+s3:PutObject (presigning) on it.",
        )
    for group in BLOB_OBJECT_ACTIONS:
        _ack(
            fns.roles[group],
            f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/blobs/*]",
            "Blob keys are content-addressed per namespace (blobs/<namespace>/<sha256>), so the "
            "grant is the blobs/ prefix: s3:GetObject+s3:PutObject to presign, HEAD and renew "
            "(CopyObject onto itself).",
        )
    _ack(
        fns.roles[AUTHORIZER_FUNCTION],
        f"AwsSolutions-IAM5[Resource::{_arn_prefix(stack, 'ssm')}"
        f"parameter{stack.names.token_parameter_path}/*]",
        "One parameter per token, named by the token's sha256: on a miss the authorizer reads "
        "(GetParameter) the one parameter named by the presented token's hash, under the token "
        "path and nowhere else.",
    )
    _ack(
        fns.roles[ADMIN_FUNCTION],
        f"AwsSolutions-IAM5[Resource::{_arn_prefix(stack, 'ssm')}"
        f"parameter{stack.names.token_parameter_path}/*]",
        "One parameter per token, named by the token's sha256: the admin function may put and "
        "delete parameters under the token path and nowhere else.",
    )

    # --- API Gateway ----------------------------------------------------------------------------
    _ack(
        api.api,
        "AwsSolutions-APIG2",
        "Requests are validated by the handlers' pydantic models (Powertools, "
        "enable_validation), which answer 422 with the reason; an API Gateway model would "
        "duplicate them and answer a bare 400.",
    )
    _ack(
        api.api,
        "AwsSolutions-APIG3",
        "No WAF web ACL by default: every route but health/openapi needs a bearer token, the "
        "stage is throttled, and the API carries no browser traffic. Associate a web ACL with "
        "the stage if the account mandates one.",
    )
    for m in api.methods.values():
        _ack(
            m,
            "AwsSolutions-COG4",
            "Callers are processes (clients and daemons) holding bearer tokens scoped to one "
            "namespace and role, checked by the Lambda REQUEST authorizer; there are no "
            "end users to keep in a Cognito user pool.",
        )
    for route_key in (("GET", "/v1/health"), ("GET", "/v1/openapi.json")):
        _ack(
            api.methods[route_key],
            "AwsSolutions-APIG4",
            "Public by design (routes.py roles=None): health is for load balancers and "
            "monitors, openapi.json is the schema of the wire; neither reveals job data.",
        )

    # --- Cache ------------------------------------------------------------------------------------
    if stack.cache.auth_secret is None:
        # Serverless: no replication group, no AUTH secret; IAM authentication (cache.py).
        return
    _ack(
        stack.cache.replication_group,
        "AwsSolutions-AEC5",
        "A non-default port is obscurity, not access control: Redis is reachable only from "
        "the functions' security group, requires TLS and the AUTH token.",
    )
    _ack(
        stack.cache.auth_secret,
        "AwsSolutions-SMG4",
        "No managed rotation exists for an ElastiCache AUTH token: rotating it is a "
        "ModifyReplicationGroup ROTATE/SET sequence coordinated with the functions reading the "
        "secret at cold start (documented in the README); the token never leaves the VPC.",
    )


def acknowledge_account_findings(stack: ApiGatewayAccountStack) -> None:
    _ack(
        stack.role,
        # A managed policy's ARN names the partition by its pseudo parameter in any stack.
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AmazonAPIGatewayPushToCloudWatchLogs]",
        "The account-level role API Gateway uses to write execution logs; the AWS-managed "
        "policy is exactly that permission set and is kept current by AWS.",
    )
    _ack(
        stack.setter,
        "AwsSolutions-L1",
        "python3.13, the runtime of every function of the app; the setter runs once per deploy.",
    )
    log_group_id = _logical_id(stack, stack.setter_logs)
    _ack(
        stack.setter_role,
        f"AwsSolutions-IAM5[Resource::<{log_group_id}.Arn>:log-stream:*]",
        "Log streams are created by the runtime with generated names; the grant is limited to "
        "the streams of the setter's own log group.",
    )
    _ack(
        stack.setter_role,
        f"AwsSolutions-IAM5[Resource::{_arn_prefix(stack, 'iam', regional=False)}role/*]",
        "iam:GetRole only, on any role of the account: the setter checks that the role the "
        "account's API Gateway setting names (set by anyone) still exists before leaving it.",
    )
