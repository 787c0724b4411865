"""What the synthesized template promises, checked resource by resource (one in-process synth)."""

from __future__ import annotations

import json

import pytest

from infra.config import SERVICE_NAME, StageNames
from infra.functions import LOCAL_ENDPOINT_ENV, function_logical_id
from payloadstore_controlplane.models.settings import SETTINGS_ENV, Settings
from payloadstore_controlplane.routes import (
    API_GATEWAY_TIMEOUT_S,
    BINARY_MEDIA_TYPES,
    FUNCTIONS,
    MIN_COMPRESSION_BYTES,
    ROUTES,
)
from payloadstore_controlplane.store.tokens import RETRY_AFTER_FAILURE_S
from tests.infra.cfn import (
    api_paths,
    as_list,
    integrated_function,
    render,
    resources,
    role_statements,
)

pytestmark = pytest.mark.infra

DEV = StageNames("dev")


def _payload_bucket_id(template) -> str:
    (bucket_id,) = [
        k
        for k, v in resources(template, "AWS::S3::Bucket").items()
        if "LoggingConfiguration" in v["Properties"]
    ]
    return bucket_id


def _function(template, group: str) -> dict:
    return template["Resources"][function_logical_id(group)]


# --- storage ---------------------------------------------------------------------------------


def test_every_bucket_is_sse_s3_encrypted_and_blocks_all_public_access(template):
    # Given the synthesized stack
    buckets = resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 2, "the payload bucket and its access-log bucket"
    for bucket_id, bucket in buckets.items():
        props = bucket["Properties"]
        # Then default encryption is SSE-S3 (AES256)
        (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}, bucket_id
        # And all four public-access blocks are on
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }, bucket_id
        # And no CORS: no browser client ever talks to S3
        assert "CorsConfiguration" not in props


def test_every_bucket_policy_denies_requests_without_tls(template):
    for policy in resources(template, "AWS::S3::BucketPolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        denies = [
            s
            for s in statements
            if s["Effect"] == "Deny"
            and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
            and s["Action"] == "s3:*"
        ]
        assert len(denies) == 1, statements
        bucket = render(policy["Properties"]["Bucket"])
        bucket_arn = bucket.replace(">", ".Arn>")
        # Both the bucket and every object in it
        assert sorted(render(denies[0]["Resource"])) == sorted([bucket_arn, f"{bucket_arn}/*"])
    assert len(resources(template, "AWS::S3::BucketPolicy")) == 2


def test_lifecycle_has_one_rule_per_retention_class_by_tag_and_prefix_backstops(template):
    bucket = template["Resources"][_payload_bucket_id(template)]
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    by_tag = {
        tuple(f["Key"] + "=" + f["Value"] for f in rule["TagFilters"]): rule
        for rule in rules
        if rule.get("TagFilters")
    }
    # Then each retention class has its rule, filtered by the tag alone, expiring by its days
    assert {k[0]: r["ExpirationInDays"] for k, r in by_tag.items()} == {
        "payloadstore-retention=consume": 2,
        "payloadstore-retention=1d": 1,
        "payloadstore-retention=2d": 2,
        "payloadstore-retention=7d": 7,
        "payloadstore-retention=30d": 30,
    }
    for rule in by_tag.values():
        assert rule["Status"] == "Enabled"
        assert "Prefix" not in rule
    # And payloads/ and blobs/ keep a backstop rule (the longest class: a shorter one would
    # cut every longer class short, S3 honouring the shortest) that aborts uploads after a day;
    # exec/ and other prefixes are untouched
    backstops = [rule for rule in rules if not rule.get("TagFilters")]
    assert sorted(r["Prefix"] for r in backstops) == ["blobs/", "payloads/"]
    for rule in backstops:
        assert rule["Status"] == "Enabled"
        assert rule["ExpirationInDays"] == 30
        assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_functions_know_the_stack_key(template):
    fn = template["Resources"]["PayloadsFunction"]
    env = fn["Properties"]["Environment"]["Variables"]
    assert "Fn::GetAtt" in env["KMS_KEY_ARN"] and env["KMS_KEY_ARNS"] == ""


def test_lifecycle_matches_the_local_stack_bucket():
    # The local stack creates its bucket from its own constants: both must say the same thing.
    from infra import storage
    from payloadstore_devstack import services

    assert (
        storage.PAYLOAD_PREFIX,
        storage.PAYLOAD_EXPIRATION_DAYS,
        storage.ABORT_MULTIPART_DAYS,
    ) == (services.PAYLOAD_PREFIX, services.PAYLOAD_EXPIRATION_DAYS, services.ABORT_MULTIPART_DAYS)
    assert (storage.BLOB_PREFIX, storage.BLOB_LIFECYCLE_RULE_ID) == (
        services.BLOB_PREFIX,
        services.BLOB_LIFECYCLE_RULE_ID,
    )
    assert storage.LIFECYCLE_RULE_ID == services.LIFECYCLE_RULE_ID


def test_payload_bucket_logs_access_and_is_retained_by_default(template):
    bucket_id = _payload_bucket_id(template)
    bucket = template["Resources"][bucket_id]
    # Retained, except when the stack's first create fails (issue 45)
    assert bucket["DeletionPolicy"] == "RetainExceptOnCreate"
    assert bucket["UpdateReplacePolicy"] == "Retain"
    target = render(bucket["Properties"]["LoggingConfiguration"]["DestinationBucketName"])
    assert target != f"<{bucket_id}>"
    assert template["Resources"][target.strip("<>")]["Type"] == "AWS::S3::Bucket"


def test_removal_policy_context_flag_switches_buckets_to_destroy():
    # Given a stack built with -c payloadstore:removalPolicy=destroy (storage construct alone)
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.app_factory import cdk_json_context
    from infra.config import CTX_REMOVAL_POLICY, destroy_on_removal
    from infra.storage import PayloadStorage

    app = cdk.App(
        context={**cdk_json_context(), CTX_REMOVAL_POLICY: "destroy"},
        builtin_cloud_formation_validation=False,
    )
    stack = cdk.Stack(app, "Flag")
    PayloadStorage(stack, "Storage", destroy_on_removal=destroy_on_removal(stack))
    # Then the buckets are deleted with the stack (emptied first)
    buckets = Template.from_stack(stack).find_resources("AWS::S3::Bucket")
    assert {b["DeletionPolicy"] for b in buckets.values()} == {"Delete"}
    # And a typo is refused rather than silently retaining or destroying
    bad = cdk.Stack(cdk.App(context={CTX_REMOVAL_POLICY: "destory"}), "Bad")
    with pytest.raises(ValueError, match="retain or destroy"):
        destroy_on_removal(bad)


# --- network and cache -------------------------------------------------------------------------


def test_vpc_has_only_isolated_subnets_and_no_internet_path(template):
    subnets = resources(template, "AWS::EC2::Subnet")
    assert len(subnets) == 2, "two AZs for Multi-AZ Redis"
    for subnet in subnets.values():
        tags = {t["Key"]: t["Value"] for t in subnet["Properties"]["Tags"]}
        assert tags["aws-cdk:subnet-type"] == "Isolated"
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False
    for forbidden in (
        "AWS::EC2::InternetGateway",
        "AWS::EC2::NatGateway",
        "AWS::EC2::Route",
        "AWS::EC2::EIP",
    ):
        assert resources(template, forbidden) == {}, forbidden


def test_vpc_reaches_s3_by_gateway_and_secrets_by_a_private_interface_endpoint(template):
    endpoints = resources(template, "AWS::EC2::VPCEndpoint").values()
    # ServiceName renders as "com.amazonaws.<AWS::Region>.<service>"
    by_service = {
        render(e["Properties"]["ServiceName"]).rsplit(".", 1)[-1]: e["Properties"]
        for e in endpoints
    }
    # No SSM endpoint: the functions that read the token store run outside the VPC (issue 45)
    assert set(by_service) == {"s3", "secretsmanager"}
    assert by_service["s3"]["VpcEndpointType"] == "Gateway"
    for service in ("secretsmanager",):
        assert by_service[service]["VpcEndpointType"] == "Interface"
        assert by_service[service]["PrivateDnsEnabled"] is True


def test_redis_is_encrypted_multi_az_cluster_mode_with_auth(template):
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    props = group["Properties"]
    assert props["TransitEncryptionEnabled"] is True
    assert props["TransitEncryptionMode"] == "required"
    assert props["AtRestEncryptionEnabled"] is True
    assert props["MultiAZEnabled"] is True and props["AutomaticFailoverEnabled"] is True
    assert props["ReplicasPerNodeGroup"] >= 1
    assert props["ClusterMode"] == "enabled"
    # The AUTH token comes from the generated secret, never a literal in the template
    (secret_id,) = resources(template, "AWS::SecretsManager::Secret")
    assert (
        render(props["AuthToken"])
        == f"{{{{resolve:secretsmanager:<{secret_id}>:SecretString:::}}}}"
    )
    # And it lives in the isolated subnets
    (subnet_group,) = resources(template, "AWS::ElastiCache::SubnetGroup").values()
    isolated = {f"<{k}>" for k in resources(template, "AWS::EC2::Subnet")}
    assert set(render(subnet_group["Properties"]["SubnetIds"])) == isolated


def test_redis_accepts_connections_only_from_the_functions_security_group(template):
    (group,) = resources(template, "AWS::ElastiCache::ReplicationGroup").values()
    (redis_sg,) = [
        render(s).strip("<>").split(".")[0] for s in group["Properties"]["SecurityGroupIds"]
    ]
    function_sgs = {
        render(sg).strip("<>").split(".")[0]
        for fn in resources(template, "AWS::Lambda::Function").values()
        for sg in fn["Properties"].get("VpcConfig", {}).get("SecurityGroupIds", [])
    }
    assert len(function_sgs) == 1
    # No inline ingress on the group itself, one separate rule: port 6379 from the functions' SG
    assert "SecurityGroupIngress" not in template["Resources"][redis_sg]["Properties"]
    ingress = [
        r["Properties"]
        for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if render(r["Properties"]["GroupId"]) == f"<{redis_sg}.GroupId>"
    ]
    assert ingress == [
        {
            "Description": "redis from the control-plane functions",
            "FromPort": 6379,
            "ToPort": 6379,
            "IpProtocol": "tcp",
            "GroupId": {"Fn::GetAtt": [redis_sg, "GroupId"]},
            "SourceSecurityGroupId": {"Fn::GetAtt": [function_sgs.pop(), "GroupId"]},
        }
    ]
    # And nothing in the stack is open to the world inbound
    for sg in resources(template, "AWS::EC2::SecurityGroup").values():
        for rule in sg["Properties"].get("SecurityGroupIngress", []):
            assert rule.get("CidrIp") not in ("0.0.0.0/0",) and rule.get("CidrIpv6") != "::/0"


# --- functions -------------------------------------------------------------------------------


def test_one_function_per_group_with_its_handler_runtime_tracing_and_timeout(template):
    functions = resources(template, "AWS::Lambda::Function")
    assert set(functions) == {function_logical_id(g) for g in FUNCTIONS}
    for group, handler in FUNCTIONS.items():
        props = _function(template, group)["Properties"]
        assert props["Handler"] == handler
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["x86_64"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        if group not in ("admin", "renewals"):
            # Answers must reach the client before API Gateway's 29 s integration timeout
            # (the admin is invoked directly, the renewer by its schedule)
            assert props["Timeout"] < API_GATEWAY_TIMEOUT_S, group
        assert len(props["Layers"]) == 1
        isolated = {f"<{k}>" for k in resources(template, "AWS::EC2::Subnet")}
        if group in ("authorizer", "admin"):
            # SSM only, nothing in the VPC: outside it, no SSM endpoint needed (issue 45)
            assert "VpcConfig" not in props
            continue
        assert set(render(props["VpcConfig"]["SubnetIds"])) == isolated


def test_long_poll_functions_outlive_their_longest_wait(template):
    settings = Settings(payload_bucket="bucket")
    for group in ("jobs", "daemon"):
        timeout = _function(template, group)["Properties"]["Timeout"]
        assert timeout > max(settings.poll_max_wait_s, settings.result_max_wait_s) + 2


def test_every_function_carries_the_settings_and_powertools_environment(template):
    (bucket_id,) = [_payload_bucket_id(template)]
    (secret_id,) = resources(template, "AWS::SecretsManager::Secret")
    (group_id,) = resources(template, "AWS::ElastiCache::ReplicationGroup")
    expected_names = set(SETTINGS_ENV.values()) - {"AWS_REGION", "S3_ENDPOINT_URL"}
    for group in FUNCTIONS:
        env = _function(template, group)["Properties"]["Environment"]["Variables"]
        # Then every AWS-relevant setting is there, plus Powertools' three and its two tracer
        # capture switches, pydantic's plugins switched off and the local endpoint variables
        # (empty; see test_infra_local_endpoints.py)
        assert set(env) == expected_names | set(LOCAL_ENDPOINT_ENV) | {
            "POWERTOOLS_SERVICE_NAME",
            "POWERTOOLS_METRICS_NAMESPACE",
            "POWERTOOLS_LOG_LEVEL",
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE",
            "POWERTOOLS_TRACER_CAPTURE_ERROR",
            "PYDANTIC_DISABLE_PLUGINS",
        }, group
        assert env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
        # And no answer or error body goes into the traces (tokens, presigned URLs, payloads)
        assert env["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false", group
        assert env["POWERTOOLS_TRACER_CAPTURE_ERROR"] == "false", group
        assert env["POWERTOOLS_SERVICE_NAME"] == SERVICE_NAME
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == DEV.metrics_namespace == "PayloadStore/dev"
        # And the resource-backed ones point at this stack's resources
        assert render(env["PAYLOAD_BUCKET"]) == f"<{bucket_id}>"
        assert render(env["REDIS_URL"]) == (
            f"rediss://<{group_id}.ConfigurationEndPoint.Address>:<{group_id}.ConfigurationEndPoint.Port>/0"
        )
        assert env["REDIS_CLUSTER"] == "true"
        assert render(env["REDIS_AUTH_SECRET"]) == f"<{secret_id}>"
        # The stage's path and this stack's own id (a redeployed stage starts with no tokens)
        path = env["TOKEN_PARAMETER_PATH"]["Fn::Join"]
        assert (
            path[0] == "/" and path[1][0] == DEV.token_parameter_path == "/payloadstore/dev/tokens"
        )
        # And the literal ones are valid settings equal to the documented defaults
        literal = {k: v for k, v in env.items() if isinstance(v, str)}
        parsed = Settings.from_env(
            {**literal, "PAYLOAD_BUCKET": "bucket", "REDIS_URL": "rediss://h:6379/0"}
        )
        defaults = Settings(payload_bucket="bucket")
        for field in (
            "inline_threshold",
            "max_payload_bytes",
            "presign_ttl_s",
            "result_ttl_s",
            "max_presigns_per_job",
            "visibility_timeout_s",
            "payload_lost_policy",
        ):
            assert getattr(parsed, field) == getattr(defaults, field), field
        assert parsed.redis_cluster is True


def _s3_statements(template, group):
    role_id = render(_function(template, group)["Properties"]["Role"]).strip("<>").split(".")[0]
    return [
        s
        for s in role_statements(template, role_id)
        if any(a.startswith("s3:") for a in as_list(s["Action"]))
    ]


def test_s3_permissions_are_exactly_what_each_function_signs_or_checks(template):
    bucket_arn = f"<{_payload_bucket_id(template)}.Arn>"
    objects = f"{bucket_arn}/payloads/*"
    blobs = f"{bucket_arn}/blobs/*"
    # Blobs: presign their GETs and read the retention tag; nothing written: no request copies a
    # blob (the renewals function does)
    tagging = ("s3:GetObjectTagging", "s3:PutObjectTagging")
    blob_grant = (tuple(sorted(("s3:GetObject", *tagging))), (blobs,), "Allow")

    def summary(group):
        return sorted(
            (
                tuple(sorted(as_list(s["Action"]))),
                tuple(sorted(as_list(render(s["Resource"])))),
                s["Effect"],
            )
            for s in _s3_statements(template, group)
        )

    # Who HEADs a reference or presigns a GET also holds s3:ListBucket on the bucket (issue 23):
    # without it S3 answers a missing key with 403, and `not_uploaded` / `payload_lost` (which
    # need its 404) never happen on AWS.
    list_bucket = (("s3:ListBucket",), (bucket_arn,), "Allow")
    # The presigning function: Put and Get on payloads/* (a URL can do what its signer can);
    # on blobs/* also the completion of a blob's multipart upload (list its parts, abort)
    blob_completes = (
        tuple(
            sorted(
                (
                    "s3:AbortMultipartUpload",
                    "s3:GetObject",
                    "s3:ListMultipartUploadParts",
                    "s3:PutObject",
                    *tagging,
                )
            )
        ),
        (blobs,),
        "Allow",
    )
    assert summary("payloads") == sorted(
        [
            blob_completes,
            (tuple(sorted(("s3:GetObject", "s3:PutObject", *tagging))), (objects,), "Allow"),
            list_bucket,
        ]
    )
    # The reference checkers and GET presigners: HEAD (s3:GetObject) on payloads/* only, and
    # the completion of a multipart reference (list its parts, complete it: s3:PutObject, abort)
    completes = (
        tuple(
            sorted(
                (
                    "s3:AbortMultipartUpload",
                    "s3:GetObject",
                    "s3:ListMultipartUploadParts",
                    "s3:PutObject",
                    *tagging,
                )
            )
        ),
        (objects,),
        "Allow",
    )
    assert summary("jobs") == sorted([completes, blob_grant, list_bucket])
    assert summary("daemon") == sorted([completes, blob_grant, list_bucket])
    # Health: bucket-level configuration reads on the bucket itself, no object access
    assert summary("public") == [
        (
            (
                "s3:GetBucketLocation",
                "s3:GetEncryptionConfiguration",
                "s3:GetLifecycleConfiguration",
                "s3:ListBucket",
            ),
            (bucket_arn,),
            "Allow",
        )
    ]
    # The renewer: copies onto themselves (CopyObject, UploadPartCopy: Get on the source, Put on
    # the target; abort a failed multipart copy; the retention tag read and carried over) of
    # blobs/* only, HEAD of a blob gone answering 404 (ListBucket); nothing of payloads/*
    assert summary("renewals") == sorted(
        [
            (
                tuple(
                    sorted(("s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject", *tagging))
                ),
                (blobs,),
                "Allow",
            ),
            list_bucket,
        ]
    )
    # The authorizer and the admin functions never touch S3; the metrics function (scheduled)
    # deletes the due payloads of retention `consume` namespaces, and nothing else
    assert summary("authorizer") == [] and summary("admin") == []
    assert summary("metrics") == [(("s3:DeleteObject",), (objects,), "Allow")]


def test_the_s3_statements_are_the_grant_table_the_local_emulator_enforces(template):
    """One table drives both: every statement of every role is an entry of grants.py."""
    from payloadstore_controlplane import grants

    bucket_arn = f"<{_payload_bucket_id(template)}.Arn>"
    for group, granted in grants.grant_table().items():
        found: dict[str, set[str]] = {"objects": set(), "bucket": set(), "blobs": set()}
        for s in _s3_statements(template, group):
            for resource in as_list(render(s["Resource"])):
                where = {
                    bucket_arn: "bucket",
                    f"{bucket_arn}/payloads/*": "objects",
                    f"{bucket_arn}/blobs/*": "blobs",
                }[resource]
                found[where] |= set(as_list(s["Action"]))
        assert found == {
            "objects": set(granted.objects),
            "bucket": set(granted.bucket),
            "blobs": set(granted.blobs),
        }, group


def test_no_role_has_s3_wildcards_or_object_listing(template):
    for role_id in resources(template, "AWS::IAM::Role"):
        for s in role_statements(template, role_id):
            actions = as_list(s["Action"])
            assert "s3:*" not in actions and "*" not in actions, role_id
            # ListMultipartUploadParts lists the parts of one upload (a multipart completion),
            # not the bucket's objects.
            listing = ("s3:ListBucket", "s3:ListMultipartUploadParts")
            assert not [a for a in actions if a.startswith("s3:List") and a not in listing], role_id


def test_token_store_permissions(template):
    def ssm(group):
        role_id = render(_function(template, group)["Properties"]["Role"]).strip("<>").split(".")[0]
        return sorted(
            (a, r)
            for s in role_statements(template, role_id)
            for a in as_list(s["Action"])
            if a.startswith("ssm:")
            for r in as_list(render(s["Resource"]))
        )

    # This stage's own path, never a prefix another stage's path could fall under
    path = (
        "arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:parameter/payloadstore/dev/tokens"
    )
    # The listing on the refresh interval, and one token by its hash on a miss (issue 23); the
    # deployment's path is one level below the stage's (issue 45), so both are on `<path>/*`
    assert ssm("authorizer") == [
        ("ssm:GetParameter", f"{path}/*"),
        ("ssm:GetParametersByPath", f"{path}/*"),
    ]
    # (namespace policies live beside the tokens: get_policy reads one by name)
    assert ssm("admin") == [
        ("ssm:DeleteParameter", f"{path}/*"),
        ("ssm:GetParameter", f"{path}/*"),
        ("ssm:GetParametersByPath", f"{path}/*"),
        ("ssm:PutParameter", f"{path}/*"),
    ]
    # The metrics function lists namespaces from Redis, not the token store (issue 23)
    for group in ("payloads", "jobs", "daemon", "public", "metrics", "renewals"):
        assert ssm(group) == [], group


# --- API -------------------------------------------------------------------------------------


def _methods(template):
    paths = api_paths(template)
    out = {}
    for method in resources(template, "AWS::ApiGateway::Method").values():
        props = method["Properties"]
        out[(props["HttpMethod"], paths[props["ResourceId"]["Ref"]])] = method
    return out


def test_api_has_exactly_the_routes_of_the_wire_each_on_its_function(template):
    methods = _methods(template)
    assert set(methods) == {(r.method, r.path) for r in ROUTES}
    for route in ROUTES:
        assert integrated_function(methods[(route.method, route.path)]) == function_logical_id(
            route.function
        )
        assert (
            methods[(route.method, route.path)]["Properties"]["Integration"]["Type"] == "AWS_PROXY"
        )
    # The admin function and the authorizer are not routes
    integrated = {integrated_function(m) for m in methods.values()}
    assert function_logical_id("admin") not in integrated
    assert function_logical_id("authorizer") not in integrated


def test_authorizer_guards_every_route_but_the_public_ones(template):
    ((authorizer_id, authorizer),) = resources(template, "AWS::ApiGateway::Authorizer").items()
    props = authorizer["Properties"]
    assert props["Type"] == "REQUEST"
    assert props["IdentitySource"] == "method.request.header.Authorization"
    assert 0 < props["AuthorizerResultTtlInSeconds"] <= 300
    assert function_logical_id("authorizer") in str(props["AuthorizerUri"])
    methods = _methods(template)
    for route in ROUTES:
        method = methods[(route.method, route.path)]["Properties"]
        if route.roles is None:
            assert method["AuthorizationType"] == "NONE", route.path
            assert "AuthorizerId" not in method
        else:
            assert method["AuthorizationType"] == "CUSTOM", route.path
            assert method["AuthorizerId"] == {"Ref": authorizer_id}, route.path
    assert [r.path for r in ROUTES if r.roles is None and r.path == "/v1/health"] == ["/v1/health"]


def test_a_failing_authorizer_answers_503_with_retry_after_and_the_wire_error(template):
    # Given the API's gateway responses, When the authorizer fails (it raised: the token store
    # unavailable to a cold container or one past TOKEN_STALE_MAX_S; timed out; malformed)
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in resources(template, "AWS::ApiGateway::GatewayResponse").values()
    }
    # Then both kinds answer 503 (not API Gateway's default 500 for every caller), with the
    # token store's back-off as Retry-After and the wire's error body with its code
    for kind in ("AUTHORIZER_FAILURE", "AUTHORIZER_CONFIGURATION_ERROR"):
        props = responses[kind]
        assert props["StatusCode"] == "503", kind
        headers = props["ResponseParameters"]
        assert headers["gatewayresponse.header.Retry-After"] == f"'{int(RETRY_AFTER_FAILURE_S)}'"
        assert headers["gatewayresponse.header.Content-Type"] == "'application/json'"
        body = json.loads(props["ResponseTemplates"]["application/json"])
        assert body["error"]["code"] == "token_store_unavailable"
        assert body["error"]["message"]


def test_api_accepts_msgpack_bodies_as_binary(template):
    (api,) = resources(template, "AWS::ApiGateway::RestApi").values()
    assert "application/msgpack" in api["Properties"]["BinaryMediaTypes"]
    assert set(api["Properties"]["BinaryMediaTypes"]) == set(BINARY_MEDIA_TYPES)


def test_api_gzips_answers_as_large_as_a_presigned_url(template):
    # Given the API, When its compression setting is read, Then an answer carrying a presigned
    # URL (~800 B) is compressed and the small ones (config, errors) are not
    (api,) = resources(template, "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["MinimumCompressionSize"] == MIN_COMPRESSION_BYTES
    assert 256 <= MIN_COMPRESSION_BYTES <= 800


def test_stage_is_throttled_traced_and_access_logged(template):
    (stage,) = resources(template, "AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["TracingEnabled"] is True
    (settings,) = props["MethodSettings"]
    assert settings["HttpMethod"] == "*" and settings["ResourcePath"] == "/*"
    assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0
    assert settings["DataTraceEnabled"] is False, "bodies may be payload bytes: never log them"
    destination = render(props["AccessLogSetting"]["DestinationArn"])
    (log_group,) = resources(template, "AWS::Logs::LogGroup").keys() & {
        k for k in template["Resources"] if f"log-group:<{k}>" in destination
    }
    assert template["Resources"][log_group]["Properties"]["RetentionInDays"] > 0
    assert '"status"' in props["AccessLogSetting"]["Format"]


# --- alarms and outputs ------------------------------------------------------------------------


def test_outputs_name_the_api_bucket_token_store_and_alarm_topic(template):
    outputs = template["Outputs"]
    assert {
        "ApiUrl",
        "PayloadBucketName",
        "TokenParameterPath",
        "AlarmTopicArn",
        "AdminFunctionName",
    } <= set(outputs)
    assert outputs["TokenParameterPath"]["Value"]["Fn::Join"][1][0] == DEV.token_parameter_path
    assert render(outputs["PayloadBucketName"]["Value"]) == f"<{_payload_bucket_id(template)}>"
    (topic_id,) = resources(template, "AWS::SNS::Topic")
    assert render(outputs["AlarmTopicArn"]["Value"]) == f"<{topic_id}>"
    assert "execute-api" in str(outputs["ApiUrl"]["Value"])


def test_a_setting_can_be_overridden_by_context_and_a_bad_one_fails_synth():
    import aws_cdk as cdk

    from infra.config import CTX_SETTINGS_PREFIX
    from infra.functions import settings_environment
    from payloadstore_controlplane.models.settings import SettingsError

    resources_ = {
        "PAYLOAD_BUCKET": "b",
        "REDIS_URL": "u",
        "REDIS_CLUSTER": "true",
        "REDIS_AUTH_SECRET": "s",
        "REDIS_MIN_REPLICA_ACKS": "1",
        "TOKEN_PARAMETER_PATH": "/p",
    }
    # Given -c payloadstore:setting:INLINE_THRESHOLD=131072
    ok = cdk.Stack(cdk.App(context={CTX_SETTINGS_PREFIX + "INLINE_THRESHOLD": "131072"}), "Ok")
    # Then the functions get that value
    assert settings_environment(ok, resources_)["INLINE_THRESHOLD"] == "131072"
    # And a value the functions would refuse at cold start is refused at synth, naming the field
    bad = cdk.Stack(cdk.App(context={CTX_SETTINGS_PREFIX + "PRESIGN_TTL_S": "0"}), "Bad")
    with pytest.raises(SettingsError, match="presign_ttl_s"):
        settings_environment(bad, resources_)
