"""The in-process AWS clients against the local emulator: the Redis AUTH secret and the token
hashes read as botocore reads them."""

from __future__ import annotations

import uuid

import boto3
from controlplane.store.aws_http import SecretsManagerHttpClient, SsmHttpClient, secret_value

from tests.support.env import patched_environ


def test_secret_value_reads_the_secret(aws_env, moto_server):
    sm = boto3.client("secretsmanager", endpoint_url=moto_server.endpoint)
    name = f"payloadstore-test/redis-auth-{uuid.uuid4().hex[:8]}"
    arn = sm.create_secret(Name=name, SecretString="s3cret pass/word")["ARN"]
    with patched_environ({"AWS_ENDPOINT_URL_SECRETS_MANAGER": moto_server.endpoint}):
        assert isinstance(SecretsManagerHttpClient.from_environment(), SecretsManagerHttpClient)
        assert secret_value(arn) == "s3cret pass/word"
        assert secret_value(name) == "s3cret pass/word"


def test_parameters_by_path_pages_like_botocore(aws_env, moto_server, ssm_client):
    path = f"/payloadstore-test/paging-{uuid.uuid4().hex[:8]}"
    for i in range(23):  # three pages of at most 10
        ssm_client.put_parameter(Name=f"{path}/p{i:02d}", Value=str(i), Type="String")
    client = SsmHttpClient.from_environment()
    assert client is not None
    ours = [
        p["Name"]
        for page in client.get_paginator("get_parameters_by_path").paginate(Path=path)
        for p in page["Parameters"]
    ]
    theirs = [
        p["Name"]
        for page in ssm_client.get_paginator("get_parameters_by_path").paginate(Path=path)
        for p in page["Parameters"]
    ]
    assert sorted(ours) == sorted(theirs) and len(ours) == 23
