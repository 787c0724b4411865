"""The consume drain shares its DeleteObjects calls between namespaces (issue 43, "also seen"):
a busy namespace, or one early in the alphabet, never spends a run's calls while others wait.
Real Redis (the due sets), the S3 emulator over HTTP (DeleteObjects under the scheduled
function's grants)."""

from __future__ import annotations

import uuid

from payloadstore_controlplane.store.sigv4 import invocation_running_as
from payloadstore_devstack.s3_credentials import function_credentials


def _exists(s3_client, bucket: str, key: str) -> bool:
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=key)
    return any(o["Key"] == key for o in listed.get("Contents", []))


def test_a_busy_namespace_does_not_starve_the_others(
    settings_env, s3_client, payload_bucket, monkeypatch
):
    from payloadstore_controlplane.handlers._deps import get_deps
    from payloadstore_controlplane.logic import policy
    from payloadstore_controlplane.runtime import clock

    settings_env()
    deps = get_deps()
    # Given three `consume` namespaces with objects due for deletion: the first (in the
    # alphabet) has 6, the others 1 each; a run may make 2 DeleteObjects calls of 2 keys
    monkeypatch.setattr(policy, "MAX_DELETE_CALLS", 2)
    tag = uuid.uuid4().hex[:8]
    namespaces = [f"a-busy-{tag}", f"b-{tag}", f"c-{tag}"]
    due: dict[str, list[str]] = {}
    for ns, count in zip(namespaces, (6, 1, 1), strict=True):
        due[ns] = [f"payloads/2026/01/01/{ns}-{i}/args" for i in range(count)]
        for key in due[ns]:
            s3_client.put_object(Bucket=payload_bucket, Key=key, Body=b"x")
    now = clock.now()
    deps.jobs.schedule_deletions(namespaces[0], due[namespaces[0]], int(now * 1000) - 1)
    for ns in namespaces[1:]:
        deps.jobs.schedule_deletions(ns, due[ns], int(now * 1000) - 1)
    # When the scheduled function's drain runs twice, a minute apart
    for minute in range(2):
        monkeypatch.setattr(clock, "now", lambda m=minute: now + 60 * m)
        with invocation_running_as(function_credentials("metrics")):
            assert policy.drain_consumed(namespaces, deps, limit=2) > 0
    # Then the quiet namespaces' objects are gone, whatever the busy one still has due
    for ns in namespaces[1:]:
        assert not any(_exists(s3_client, payload_bucket, k) for k in due[ns]), ns
