"""The account-wide API Gateway setting every stage's execution logging needs, in a stack of its own.

API Gateway writes execution logs through one CloudWatch role per account and region
(`AWS::ApiGateway::Account`). Set by each stage, two stages would overwrite each other's setting,
and destroying one stage would take the role the others use with it. So it lives here, deployed
once per account and region (every stage depends on this stack, so `cdk deploy PayloadStore-dev`
deploys it first when it is not there yet). With `-c payloadstore:apiGatewayAccount=existing` the
app leaves the account's own setting alone and this stack is not part of it.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from constructs import Construct

PUSH_TO_CLOUDWATCH_POLICY = "service-role/AmazonAPIGatewayPushToCloudWatchLogs"


class ApiGatewayAccountStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
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
        # Deleting AWS::ApiGateway::Account does not reset the account setting, so a deleted role
        # would leave every API's execution logging pointing at nothing: keep the role.
        self.role.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        self.setting = apigw.CfnAccount(self, "Account", cloud_watch_role_arn=self.role.role_arn)
        self.setting.node.add_dependency(self.role)
        cdk.CfnOutput(
            self,
            "CloudWatchRoleArn",
            value=self.role.role_arn,
            description="the API Gateway CloudWatch role set on this account and region",
        )
