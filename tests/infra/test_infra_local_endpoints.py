"""The template's local-endpoint variables: declared (so `sam local invoke --env-vars` can point a
function at local services), and empty as deployed, which means AWS's own endpoints."""

from __future__ import annotations

import pytest

from infra.functions import LOCAL_ENDPOINT_ENV
from payloadstore_controlplane import routes
from payloadstore_controlplane.models.settings import Settings
from payloadstore_controlplane.routes import FUNCTIONS, ROUTES
from tests.infra.cfn import resources
from tools.sam_local import plan

pytestmark = pytest.mark.infra

REGION = "eu-west-1"


def _deployed_literals(template) -> dict[str, dict[str, str]]:
    return {
        logical_id: {
            k: v
            for k, v in fn["Properties"]["Environment"]["Variables"].items()
            if isinstance(v, str)
        }
        for logical_id, fn in resources(template, "AWS::Lambda::Function").items()
    }


def test_every_function_declares_the_local_endpoint_variables_empty(template):
    # Given the synthesized template
    for logical_id, env in _deployed_literals(template).items():
        # Then each function declares every local endpoint variable, with an empty value
        for name in ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
            assert env.get(name) == "", (logical_id, name, env.get(name))
        assert set(LOCAL_ENDPOINT_ENV) <= set(env)


def test_deployed_values_mean_aws_endpoints(template, monkeypatch):
    import boto3

    from payloadstore_controlplane.store.s3.client import cached_s3_client

    for logical_id, env in _deployed_literals(template).items():
        # Given a process with exactly the deployed values of the endpoint variables
        for name in LOCAL_ENDPOINT_ENV:
            monkeypatch.setenv(name, env[name])
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unused")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unused")
        # When the settings are read and the clients made (no request is sent)
        settings = Settings.from_env(
            {**env, "PAYLOAD_BUCKET": "bucket", "REDIS_URL": "rediss://h:6379/0"}
        )
        s3 = cached_s3_client.__wrapped__(REGION, settings.s3_endpoint_url)
        ssm = boto3.client("ssm", region_name=REGION)
        secrets = boto3.client("secretsmanager", region_name=REGION)
        # Then every client talks to AWS's regional endpoint
        assert settings.s3_endpoint_url is None, logical_id
        assert s3.meta.endpoint_url == f"https://s3.{REGION}.amazonaws.com"
        assert ssm.meta.endpoint_url == f"https://ssm.{REGION}.amazonaws.com"
        assert secrets.meta.endpoint_url == f"https://secretsmanager.{REGION}.amazonaws.com"


def test_sam_local_env_vars_file_overrides_only_declared_variables(template):
    from tools.sam_local.__main__ import LOCAL_ENDPOINT_VARS, Services, env_vars

    class FakeRelay:
        host, port = "10.213.7.1", 4000

    services = Services("http://127.0.0.1:1", 1, 2, "bucket", "/p", None, None)
    # When `make sam-local` writes its env-vars file for this template
    written = env_vars(template, FakeRelay(), FakeRelay(), services)["Parameters"]
    declared = set().union(*(set(v) for v in plan.declared_variables(template).values()))
    # Then it names only variables the template declares (SAM ignores the others) and points
    # every local endpoint at the relay, with no Redis AUTH secret and no cluster mode
    assert set(written) <= declared
    for name in LOCAL_ENDPOINT_VARS:
        assert written[name] == "http://10.213.7.1:4000"
    assert written["REDIS_AUTH_SECRET"] == ""
    assert written["REDIS_CLUSTER"] == "false"


def test_sam_local_has_fixtures_for_every_function_and_every_fixture_a_function(template):
    # Given the events/ fixtures, classified as `make sam-local` does
    fixtures, problems = plan.load_fixtures(FUNCTIONS, ROUTES, getattr(routes, "SCHEDULES", ()))
    groups, foreign = plan.template_functions(template, FUNCTIONS)
    # Then each is for a route or a function, every function has one, and every route too
    assert problems == []
    assert foreign == []
    assert {fx.group for fx in fixtures} == set(groups) == set(FUNCTIONS)
    covered = {(fx.route.method, fx.route.path) for fx in fixtures if fx.kind == "api"}
    assert covered == {(r.method, r.path) for r in ROUTES}
