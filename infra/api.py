"""The REST API built from ROUTES: one Lambda proxy method per route, the bearer-token REQUEST
authorizer on every route that names roles, binary media types, throttling and access logs."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from payloadstore_controlplane.routes import (
    AUTHORIZER_UNAVAILABLE_RETRY_AFTER_S,
    AUTHORIZER_UNAVAILABLE_STATUS,
    BINARY_MEDIA_TYPES,
    MIN_COMPRESSION_BYTES,
    ROUTES,
    authorizer_unavailable_body,
)

EXECUTION_LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# How long API Gateway reuses an authorizer answer for the same Authorization header. A revoked
# token keeps working for at most this plus the authorizer's own TOKEN_CACHE_S (60 s): two
# minutes in all, while a polling daemon costs one authorizer call a minute, not one a request.
AUTHORIZER_CACHE_TTL = cdk.Duration.seconds(60)
DEFAULT_THROTTLE_RATE = 100
DEFAULT_THROTTLE_BURST = 200


class ControlPlaneApi(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage_name: str,
        functions: dict[str, lambda_.IFunction],
        authorizer_function: lambda_.IFunction,
        throttle_rate: int,
        throttle_burst: int,
        destroy_on_removal: bool,
        detailed_metrics: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=cdk.Stack.of(self).stack_name,
            description="payloadstore control plane (wire v1)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            binary_media_types=list(BINARY_MEDIA_TYPES),
            # Answers with presigned URLs leave gzipped to clients that accept it (the SDK does):
            # ~40% fewer control-plane bytes, compressed by API Gateway, not by the functions.
            min_compression_size=cdk.Size.bytes(MIN_COMPRESSION_BYTES),
            # Execution logging (below) needs the account-level CloudWatch role for API Gateway.
            # That is one setting per account and region, so no stage sets it: the stack
            # infra/account.py does, once (or the account already has one).
            cloud_watch_role=False,
            deploy_options=apigw.StageOptions(
                # The API stage is the payloadstore stage: the URL says which one it talks to.
                stage_name=stage_name,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
                tracing_enabled=True,
                # Per-method metrics are billed as custom metrics (payloadstore:detailedMetrics);
                # the stage-wide Count, errors and latency the alarms read are there without them.
                metrics_enabled=detailed_metrics,
                # Errors only, never request/response bodies: those may be payload bytes.
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=False,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=False,
                ),
            ),
        )
        # API Gateway writes execution logs to a group it names itself and creates, without a
        # retention, on first use. Created here first, with the name it will use, the group gets
        # a retention and belongs to the stack.
        self.execution_logs = logs.LogGroup(
            self,
            "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.api.rest_api_id}/{stage_name}",
            retention=EXECUTION_LOG_RETENTION,
            removal_policy=cdk.RemovalPolicy.DESTROY
            if destroy_on_removal
            else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
        self.api.deployment_stage.node.add_dependency(self.execution_logs)
        self.authorizer = apigw.RequestAuthorizer(
            self,
            "BearerAuthorizer",
            handler=authorizer_function,
            identity_sources=[apigw.IdentitySource.header("Authorization")],
            results_cache_ttl=AUTHORIZER_CACHE_TTL,
        )
        # An authorizer that fails (raises: the token store unavailable to a cold container or
        # one past TOKEN_STALE_MAX_S; times out; answers malformed) is by default a 500 for every
        # caller. Answered instead as the dependency outage it is: 503 with Retry-After and the
        # wire's error body, which clients retry (routes.py AUTHORIZER_UNAVAILABLE_*).
        for kind, response_type in (
            ("AuthorizerFailure", apigw.ResponseType.AUTHORIZER_FAILURE),
            ("AuthorizerConfigurationError", apigw.ResponseType.AUTHORIZER_CONFIGURATION_ERROR),
        ):
            self.api.add_gateway_response(
                f"{kind}Response",
                type=response_type,
                status_code=str(AUTHORIZER_UNAVAILABLE_STATUS),
                response_headers={
                    "Retry-After": f"'{AUTHORIZER_UNAVAILABLE_RETRY_AFTER_S}'",
                    "Content-Type": "'application/json'",
                },
                templates={"application/json": json.dumps(authorizer_unavailable_body())},
            )
        integrations: dict[str, apigw.LambdaIntegration] = {}
        self.methods: dict[tuple[str, str], apigw.Method] = {}
        for route in ROUTES:
            integration = integrations.get(route.function)
            if integration is None:
                # One integration per function; test-invoke permissions are left out, so each
                # method adds one resource-based permission for its own ARN only.
                integration = apigw.LambdaIntegration(
                    functions[route.function], proxy=True, allow_test_invoke=False
                )
                integrations[route.function] = integration
            resource = self.api.root.resource_for_path(route.path)
            if route.roles is None:
                method = resource.add_method(
                    route.method, integration, authorization_type=apigw.AuthorizationType.NONE
                )
            else:
                method = resource.add_method(
                    route.method,
                    integration,
                    authorizer=self.authorizer,
                    authorization_type=apigw.AuthorizationType.CUSTOM,
                )
            self.methods[(route.method, route.path)] = method

    @property
    def url(self) -> str:
        return self.api.url
