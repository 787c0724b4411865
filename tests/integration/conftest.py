"""Call the real lambda_handlers with API Gateway events against our redis-server and moto's S3.

Fixtures only: the helpers tests import (`ControlPlane`, `upload`, `sha256_hex`, ...) live in
tests/support/control_plane.py."""

from __future__ import annotations

import uuid

import pytest

from tests.support.control_plane import TOKEN_PATH, ControlPlane
from tests.support.env import patched_environ


@pytest.fixture(scope="session")
def cp_env(redis_target, aws_env, payload_bucket):
    env = {
        "PAYLOAD_BUCKET": payload_bucket,
        **redis_target,
        "TOKEN_PARAMETER_PATH": TOKEN_PATH,
        "TOKEN_CACHE_S": "0",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "payloadstore",
        "POWERTOOLS_METRICS_NAMESPACE": "PayloadStore",
        "POLL_MAX_WAIT_S": "2",
        "RESULT_MAX_WAIT_S": "2",
    }
    with patched_environ(env):
        reset_caches()
        yield env
    reset_caches()


def reset_caches() -> None:
    from payloadstore_controlplane.handlers import _deps, authorizer
    from payloadstore_controlplane.logic import health
    from payloadstore_controlplane.models.settings import get_settings
    from payloadstore_controlplane.store.replicated import forget_replica_counts
    from payloadstore_controlplane.store.tokens import process_token_store

    health._bucket_cache.clear()
    get_settings.cache_clear()
    _deps.get_deps.cache_clear()
    authorizer.token_store.cache_clear()
    process_token_store.cache_clear()
    forget_replica_counts()


@pytest.fixture
def settings_env(cp_env, monkeypatch):
    """Override settings for one test: settings_env(MAX_PRESIGNS_PER_JOB="2")."""

    def apply(**values: str) -> None:
        for k, v in values.items():
            monkeypatch.setenv(k, str(v))
        reset_caches()

    yield apply
    monkeypatch.undo()
    reset_caches()


@pytest.fixture
def cp(cp_env) -> ControlPlane:
    return ControlPlane("t" + uuid.uuid4().hex[:10])


@pytest.fixture
def other_cp(cp_env) -> ControlPlane:
    return ControlPlane("o" + uuid.uuid4().hex[:10])
