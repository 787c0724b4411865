"""Health: every check the design needs before dispatch (redis, bucket, region, encryption, lifecycle)."""

from __future__ import annotations

from ..models.wire import ConfigResponse, HealthCheck, HealthResponse
from .context import Deps
from .guard import memory_state
from .payload_keys import PAYLOAD_PREFIX

LIFECYCLE_MAX_DAYS = 2


def health(deps: Deps) -> HealthResponse:
    checks: dict[str, HealthCheck] = {}
    try:
        deps.jobs.ping()
        checks["redis"] = HealthCheck(ok=True, detail="ping ok")
        checks["redis_memory"] = redis_memory_check(deps)
    except Exception as e:  # noqa: BLE001 - any failure is the check's answer, not a crash
        checks["redis"] = HealthCheck(ok=False, detail=f"redis unreachable: {type(e).__name__}")
    objects = deps.objects
    reachable, detail = objects.check_reachable()
    checks["bucket"] = HealthCheck(ok=reachable, detail=detail)
    bucket_checks = {
        "region": lambda: objects.check_region(deps.settings.aws_region),
        "encryption": objects.check_encryption,
        "lifecycle": lambda: objects.check_lifecycle(PAYLOAD_PREFIX, LIFECYCLE_MAX_DAYS),
    }
    for name, check in bucket_checks.items():
        # An unreachable bucket would fail each of these after its own timeouts and retries;
        # answer at once so health stays well inside API Gateway's 29 s.
        ok, detail = check() if reachable else (False, "not checked: bucket not reachable")
        checks[name] = HealthCheck(ok=ok, detail=detail)
    failing = [name for name, check in checks.items() if not check.ok]
    return HealthResponse(status="failing" if failing else "ok", failing=failing, checks=checks)


def redis_memory_check(deps: Deps) -> HealthCheck:
    """Redis memory used/max and whether the guard is on. Failing only past the hard mark
    (no new jobs); past the high-water mark inline bytes are rerouted through S3 and the
    service works."""
    state = memory_state(deps)
    if not state.limit:
        return HealthCheck(ok=True, detail=f"used {state.used} B, no maxmemory set; guard off")
    guard = (
        "hard mark reached: new jobs refused"
        if state.enqueue_refused
        else "guard on: inline refused"
        if state.inline_refused
        else "guard off"
    )
    return HealthCheck(
        ok=not state.enqueue_refused,
        detail=f"used {state.used} of {state.limit} B ({state.pct:.0f}%); {guard}",
    )


def client_config(deps: Deps) -> ConfigResponse:
    s = deps.settings
    return ConfigResponse(
        inline_threshold=s.inline_threshold,
        max_payload_bytes=s.max_payload_bytes,
        presign_ttl_s=s.presign_ttl_s,
        result_ttl_s=s.result_ttl_s,
        max_presigns_per_job=s.max_presigns_per_job,
        batch_max_jobs=s.batch_max_jobs,
        batch_max_bytes=s.batch_max_bytes,
    )
