"""The account-wide API Gateway setting every stage's execution logging needs, in a stack of its own.

API Gateway writes execution logs through one CloudWatch role per account and region (the
account setting `cloudwatchRoleArn`). Set by each stage, two stages would overwrite each other's
setting, and destroying one stage would take the role the others use with it. So it lives here,
deployed once per account and region (every stage depends on this stack, so `cdk deploy
PayloadStore-dev` deploys it first when it is not there yet).

`AWS::ApiGateway::Account` is not used (issue 32): it overwrites a role the account already has
(another application's), and on a first deploy it races IAM propagation (API Gateway refuses a
role created seconds earlier: a known CDK/CloudFormation failure, aws-cdk#2194/#13511). A small
custom resource (account_role/index.py) sets the role instead, and only where the account has
none or its role was deleted, retrying until IAM has propagated ours:
`payloadstore:apiGatewayAccount` = `auto` (default) | `replace` (set ours whatever is there) |
`existing` (no stack: the account's own setting is used as it is).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

PUSH_TO_CLOUDWATCH_POLICY = "service-role/AmazonAPIGatewayPushToCloudWatchLogs"
SETTER_CODE = Path(__file__).resolve().parent / "account_role"
# Long enough for IAM to propagate a new role (seconds, rarely minutes), short of
# CloudFormation's patience for a custom resource (one hour).
SETTER_TIMEOUT = cdk.Duration.minutes(5)
SETTER_RUNTIME = lambda_.Runtime.PYTHON_3_13


class ApiGatewayAccountStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, replace: bool = False, **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.role = iam.Role(
            self,
            "CloudWatchRole",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            description="API Gateway execution logging for every API of this account and region",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(PUSH_TO_CLOUDWATCH_POLICY)
            ],
        )
        # The account setting outlives this stack (it cannot be deleted), so a deleted role
        # would leave every API's execution logging pointing at nothing: keep the role.
        self.role.apply_removal_policy(cdk.RemovalPolicy.RETAIN)

        self.setter_logs = logs.LogGroup(
            self,
            "SetterLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.setter_role = iam.Role(
            self,
            "SetterRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="payloadstore: sets the API Gateway account role where none is set",
        )
        self.setter_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[
                    self.setter_logs.log_group_arn,
                    f"{self.setter_logs.log_group_arn}:log-stream:*",
                ],
            )
        )
        self.setter_role.add_to_policy(
            iam.PolicyStatement(
                actions=["apigateway:GET", "apigateway:PATCH"],
                resources=[f"arn:{self.partition}:apigateway:{self.region}::/account"],
            )
        )
        # Is the role the account names still there? (A deleted one is replaced by ours.)
        self.setter_role.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:GetRole"],
                resources=[f"arn:{self.partition}:iam::{self.account}:role/*"],
            )
        )
        self.setter_role.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "apigateway.amazonaws.com"}},
            )
        )
        self.setter = lambda_.Function(
            self,
            "SetterFunction",
            description="payloadstore: the API Gateway account CloudWatch role, where none is set",
            runtime=SETTER_RUNTIME,
            handler="index.handler",
            code=lambda_.Code.from_asset(str(SETTER_CODE), exclude=["__pycache__", "*.pyc"]),
            timeout=SETTER_TIMEOUT,
            memory_size=128,
            role=self.setter_role,
            log_group=self.setter_logs,
        )
        self.setting = cdk.CustomResource(
            self,
            "Account",
            service_token=self.setter.function_arn,
            resource_type="Custom::ApiGatewayAccountRole",
            properties={"RoleArn": self.role.role_arn, "Replace": "true" if replace else "false"},
        )
        # Its managed policy attached before API Gateway is asked to use it.
        self.setting.node.add_dependency(self.role)
        cdk.CfnOutput(
            self,
            "CloudWatchRoleArn",
            value=self.setting.get_att_string("RoleArn"),
            description="the API Gateway CloudWatch role of this account and region (ours, or "
            "the one it already had)",
        )
