"""The VPC the functions and the cache share: isolated subnets only, AWS APIs through endpoints.

Nothing here has a route to the internet (no NAT, no internet gateway). What the functions in it
call:
- S3 (HEAD on references, health checks): gateway endpoint, free.
- Secrets Manager (the AUTH token of the `nodes` cache, read once per container): an interface
  endpoint with private DNS, in that shape only (`secrets_endpoint`). The serverless shape
  authenticates with IAM tokens signed in-process: no endpoint at all ($0 of the ~$14.40 a month
  an interface endpoint costs in two AZs).
- SSM Parameter Store (the token store) is read by the authorizer and written by the admin
  function, which touch nothing in the VPC and so run outside it (docs/design.md, "Where the
  tokens live"): no SSM endpoint in either shape.
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
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        destroy_on_removal: bool,
        secrets_endpoint: bool = True,
        availability_zone_ids: tuple[str, ...] = (),
    ) -> None:
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
        if availability_zone_ids:
            self._pin_zone_ids(availability_zone_ids)
        self.isolated = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)

        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
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

        self.endpoints_sg: ec2.SecurityGroup | None = None
        if secrets_endpoint:
            self._add_secrets_endpoint()

    def _pin_zone_ids(self, zone_ids: tuple[str, ...]) -> None:
        """Each subnet in the zone of an AZ id (use1-az1: the same physical zone in every
        account; a name like us-east-1a is not), the first MAX_AZS of them in order. The Vpc
        construct places subnets by AZ name, so the id replaces the name on each subnet."""
        subnets = self.vpc.isolated_subnets
        if len(zone_ids) < len(subnets):
            raise ValueError(f"{len(subnets)} availability zone ids needed, got {len(zone_ids)}")
        for subnet, zone_id in zip(subnets, zone_ids, strict=False):
            cfn = subnet.node.default_child
            cfn.add_property_deletion_override("AvailabilityZone")
            cfn.add_property_override("AvailabilityZoneId", zone_id)

    def _add_secrets_endpoint(self) -> None:
        endpoints_sg = ec2.SecurityGroup(
            self,
            "EndpointsSg",
            vpc=self.vpc,
            description="payloadstore interface endpoints: https from the functions only",
            allow_all_outbound=False,
        )
        endpoints_sg.add_ingress_rule(
            self.functions_sg, ec2.Port.tcp(443), "https from the control-plane functions"
        )
        self.endpoints_sg = endpoints_sg
        self.vpc.add_interface_endpoint(
            "SecretsManager",
            service=ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
            subnets=self.isolated,
            security_groups=[endpoints_sg],
            private_dns_enabled=True,
            open=False,
        )
