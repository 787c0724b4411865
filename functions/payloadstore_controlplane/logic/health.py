"""Health: every check the design needs before dispatch (redis, bucket, region, encryption, lifecycle).

Two answers from the same checks: `public_health` (no token: only ok/failing per check, nothing
about the bucket's name or the errors' types) and `health` (any token: the details). The four
bucket checks cost four S3 calls; an unauthenticated caller must not be able to multiply them,
so they are cached per container for BUCKET_CHECKS_CACHE_S (the detailed answer refreshes them).
"""

from __future__ import annotations

import time

from ..models.api import (
    ConfigResponse,
    HealthCheck,
    HealthResponse,
    PolicyModel,
    PublicHealthResponse,
)
from .context import Deps, Principal
from .guard import memory_state
from .payload_keys import PAYLOAD_PREFIX

# The prefix backstop of untagged objects: the longest retention class (infra/storage.py).
LIFECYCLE_MAX_DAYS = 30
BUCKET_CHECKS_CACHE_S = 30.0
# (bucket, region, endpoint) -> (monotonic time, checks); one entry per container in practice.
_bucket_cache: dict[tuple, tuple[float, dict[str, HealthCheck]]] = {}
_now = time.monotonic  # tests move it


def public_health(deps: Deps) -> PublicHealthResponse:
    """What anyone may know: overall status and ok/failing per check."""
    report = health(deps, fresh=False)
    return PublicHealthResponse(
        status=report.status,
        failing=report.failing,
        checks={name: "ok" if check.ok else "failing" for name, check in report.checks.items()},
    )


def health(deps: Deps, *, fresh: bool = True) -> HealthResponse:
    checks: dict[str, HealthCheck] = {}
    try:
        deps.jobs.ping()
        checks["redis"] = HealthCheck(ok=True, detail="ping ok")
        checks["redis_memory"] = redis_memory_check(deps)
    except Exception as e:  # noqa: BLE001 - any failure is the check's answer, not a crash
        checks["redis"] = HealthCheck(ok=False, detail=f"redis unreachable: {type(e).__name__}")
    checks.update(bucket_checks(deps, fresh=fresh))
    failing = [name for name, check in checks.items() if not check.ok]
    return HealthResponse(status="failing" if failing else "ok", failing=failing, checks=checks)


def bucket_checks(deps: Deps, *, fresh: bool = True) -> dict[str, HealthCheck]:
    """bucket, region, encryption, lifecycle: from the cache unless `fresh` or older than
    BUCKET_CHECKS_CACHE_S; the answer is cached either way."""
    s = deps.settings
    key = (s.payload_bucket, s.aws_region, s.s3_endpoint_url)
    hit = _bucket_cache.get(key)
    if not fresh and hit is not None and _now() - hit[0] < BUCKET_CHECKS_CACHE_S:
        return hit[1]
    checks: dict[str, HealthCheck] = {}
    objects = deps.objects
    reachable, detail = objects.check_reachable()
    checks["bucket"] = HealthCheck(ok=reachable, detail=detail)
    by_name = {
        "region": lambda: objects.check_region(s.aws_region),
        "encryption": objects.check_encryption,
        "lifecycle": lambda: objects.check_lifecycle(PAYLOAD_PREFIX, LIFECYCLE_MAX_DAYS),
    }
    for name, check in by_name.items():
        # An unreachable bucket would fail each of these after its own timeouts and retries;
        # answer at once so health stays well inside API Gateway's 29 s.
        ok, detail = check() if reachable else (False, "not checked: bucket not reachable")
        checks[name] = HealthCheck(ok=ok, detail=detail)
    _bucket_cache.clear()
    _bucket_cache[key] = (_now(), checks)
    return checks


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


def client_config(p: Principal, deps: Deps) -> ConfigResponse:
    """The settings clients need, and the caller's namespace policy (an SDK of a namespace with
    inline `never` sends every payload and result through S3)."""
    s = deps.settings
    return ConfigResponse(
        policy=PolicyModel(**p.policy.as_dict()),
        inline_threshold=s.inline_threshold,
        max_payload_bytes=s.max_payload_bytes,
        presign_ttl_s=s.presign_ttl_s,
        result_ttl_s=s.result_ttl_s,
        max_presigns_per_job=s.max_presigns_per_job,
        multipart_threshold=s.multipart_threshold,
        multipart_part_bytes=s.multipart_part_bytes,
        batch_max_jobs=s.batch_max_jobs,
        batch_max_bytes=s.batch_max_bytes,
    )
