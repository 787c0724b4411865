"""The VPC the functions and Redis share: isolated subnets only, AWS APIs through endpoints.

Nothing here has a route to the internet (no NAT, no internet gateway). What the functions call:
- S3 (HEAD on references, health checks): gateway endpoint, free.
- Secrets Manager (Redis AUTH token, read once per container) and SSM Parameter Store (the
  token store: authorizer reads, admin writes): interface endpoints with private DNS, so the
  SDKs' default endpoints resolve to them.
- CloudWatch Logs and X-Ray need no endpoint: Lambda ships the function's stdout (and with it
  the EMF metrics) itself, and the X-Ray daemon Lambda runs beside the function sends segments
  through the Lambda service, not through the function's VPC interface.
- Presigning needs no network at all: it is a local signature.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

MAX_AZS = 2  # ElastiCache Multi-AZ needs two; more would only add endpoint-hours.


class Network(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, destroy_on_removal: bool) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=MAX_AZS,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24
                )
            ],
            # Restricting the default security group deploys a Node.js custom-resource Lambda;
            # nothing in this stack is ever placed in the default group, so it guards nothing.
            restrict_default_security_group=False,
        )
        self.isolated = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)

        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN,
        )
        # Rejected flows only: in a VPC without an internet path, a reject is the signal
        # (a misrouted call or a probe); accepted flows would be volume without insight.
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )

        self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.isolated]
        )

        self.functions_sg = ec2.SecurityGroup(
            self,
            "FunctionsSg",
            vpc=self.vpc,
            description="payloadstore control-plane functions",
            allow_all_outbound=False,
        )
        # HTTPS out: in isolated subnets the only HTTPS destinations are the interface endpoints
        # and S3 through the gateway endpoint. S3's prefix list id differs per region and looking
        # it up would make synth call AWS, so the rule names the port, not the prefix list.
        self.functions_sg.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "https to VPC endpoints and S3 gateway endpoint"
        )

        self.endpoints_sg = ec2.SecurityGroup(
            self,
            "EndpointsSg",
            vpc=self.vpc,
            description="payloadstore interface endpoints: https from the functions only",
            allow_all_outbound=False,
        )
        self.endpoints_sg.add_ingress_rule(
            self.functions_sg, ec2.Port.tcp(443), "https from the control-plane functions"
        )
        for name, service in (
            ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
            ("Ssm", ec2.InterfaceVpcEndpointAwsService.SSM),
        ):
            self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.isolated,
                security_groups=[self.endpoints_sg],
                private_dns_enabled=True,
                open=False,
            )
