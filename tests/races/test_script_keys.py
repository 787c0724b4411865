"""Every Redis script touches only the keys it declares, all of one hash slot (issue 45).

ElastiCache Serverless refuses a script that reaches a key it did not declare in KEYS, or whose
keys are in more than one slot; Redis Cluster refuses the second too. Reading the sources is not
proof, so this test runs the workload and lets the server say what each script touched:

- every script of the control plane (store/jobs/*.lua and the queue listing's) is registered
  with an audit prelude: each `redis.call`/`redis.pcall`, however the body reaches it (the
  prelude shadows `redis` with a local table whose call/pcall check first), first asks the
  server itself (`COMMAND GETKEYS`, the server's own key specs) which keys the command
  reaches, and logs any key not in KEYS; the prelude also logs declared keys of more than one
  hash tag, code compiled at run time (loadstring, load: out of its sight), and each run;
- the workload is the race explorer's (clients, daemons and an operator on the real handlers,
  every operation and every way a delivery ends) plus the few paths it does not take (a
  layout-1 job's conversion, the renewals function, a consumed result, a blob in parts);
- then the server's log must show every script run at least once and no finding.

A new script that the workload never runs fails the coverage check: add its path here.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.races.explore import Runner
from tests.races.sched import install_hooks
from tests.races.world import race_stack

AUDIT = "script-audit"

# Inserted after a script's shebang line; the body then sees a local `redis` whose call/pcall
# are `__call`/`__pcall`. A key's hash tag is Redis Cluster's: the text between the first `{` and the
# next `}`, when not empty; else the whole key.
PRELUDE = r"""
local __name = '%(name)s'
local __declared, __tag = {}, nil
local function __tag_of(k)
  local s = string.find(k, '{', 1, true)
  if s then
    local e = string.find(k, '}', s + 1, true)
    if e and e > s + 1 then return string.sub(k, s + 1, e - 1) end
  end
  return k
end
for _, k in ipairs(KEYS) do
  __declared[k] = true
  local t = __tag_of(k)
  if __tag == nil then __tag = t
  elseif __tag ~= t then
    redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' cross-slot ' .. k)
  end
end
redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' ran')
local __keyspace = {SCAN = true, KEYS = true, RANDOMKEY = true, DBSIZE = true,
                    FLUSHDB = true, FLUSHALL = true}
local function __check(command, ...)
  if __keyspace[string.upper(command)] then
    redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' keyspace ' .. command)
    return
  end
  -- SORT's BY and GET read the keys a pattern names, which COMMAND GETKEYS does not list.
  local upper = string.upper(command)
  if upper == 'SORT' or upper == 'SORT_RO' then
    local args = {...}
    for i = 2, #args do
      local option = string.upper(tostring(args[i]))
      if (option == 'BY' or option == 'GET') and args[i + 1] ~= nil and args[i + 1] ~= '#' then
        redis.log(redis.LOG_WARNING,
          '%(audit)s ' .. __name .. ' pattern ' .. command .. ' ' .. tostring(args[i + 1]))
      end
    end
  end
  local ok, touched = pcall(redis.call, 'COMMAND', 'GETKEYS', command, ...)
  if ok then
    for _, k in ipairs(touched) do
      if not __declared[k] then
        redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' undeclared ' .. command .. ' ' .. k)
      end
    end
  end
end
local function __call(...) __check(...) return redis.call(...) end
local function __pcall(...) __check(...) return redis.pcall(...) end
-- From here on `redis` is this local table, so a body's every way to a command passes the
-- check: redis.call(...), `local call = redis.call`, redis['call']. The global table is
-- read-only (it cannot be patched) and a text rewrite misses all but the first spelling.
local redis = setmetatable({call = __call, pcall = __pcall}, {__index = redis})
local _G = setmetatable({redis = redis}, {__index = _G})
-- Code compiled at run time sees the global `redis`, out of the audit's sight: a finding.
local __loadstring, __load = loadstring, load
local function loadstring(...)
  redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' runtime-code loadstring')
  return __loadstring(...)
end
local function load(...)
  redis.log(redis.LOG_WARNING, '%(audit)s ' .. __name .. ' runtime-code load')
  return __load(...)
end
"""


def audited(name: str, text: str) -> str:
    """`text` with the audit prelude after its shebang line (a shebang must stay first)."""
    head, body = "", text
    if text.startswith("#!"):
        head, _, body = text.partition("\n")
        head += "\n"
    return head + PRELUDE % {"name": name, "audit": AUDIT} + body


def script_names() -> list[str]:
    from payloadstore_controlplane.store.jobs import names

    return [*names(), "queue_stats"]


@pytest.fixture(scope="module")
def audited_world(tmp_path_factory):
    """The explorer's world (our own redis-server, the S3 emulator, the real handlers) with every
    script registered in its audited form, and the path of the server's log."""
    from payloadstore_controlplane.store import jobs, redis_queues
    from payloadstore_controlplane.store.jobs import _base

    install_hooks()
    original = jobs.source
    mp = pytest.MonkeyPatch()
    mp.setattr(_base, "source", lambda name: audited(name, original(name)))
    mp.setattr(redis_queues, "_QUEUE_STATS", audited("queue_stats", redis_queues._QUEUE_STATS))
    workdir = Path(tmp_path_factory.mktemp("script-keys"))
    try:
        with race_stack(cluster=False, workdir=workdir) as world:
            yield world, workdir / "redis" / "redis.log"
    finally:
        mp.undo()


# The explorer's runs, each dwelling on some operations (swarm weights), then the paths it does
# not take. Seeds are fixed: the same workload every time.
EXPLORER_RUNS = [
    {},
    {"retry": 3.0, "finish-error": 3.0},
    {"finish-payload_lost": 3.0, "forget": 3.0},
    {"cancel": 3.0, "finish-cancelled": 3.0, "heartbeat": 3.0},
    {"purge": 3.0, "redrive": 3.0, "finish-error": 3.0},
    {"multipart": 3.0, "finish-multipart": 3.0, "s3": 3.0},
    {"policy": 3.0, "view": 3.0, "status": 3.0},
    {"next": 3.0, "finish-inline": 3.0, "enqueue_again": 3.0},
]


def test_every_script_touches_only_declared_keys_of_one_slot(audited_world):
    world, log_path = audited_world
    # Given the control plane's workload: the explorer's runs, each weighted to some operations
    for i, weights in enumerate(EXPLORER_RUNS * 2):
        rng = random.Random(f"script-keys:{i}")
        Runner(world, f"k{i}", rng, length=60, weights=weights).run()
    # And the paths the explorer does not take
    extra_paths(world)
    # When the server's log is read
    lines = [
        line.split(AUDIT.encode(), 1)[1].strip()
        for line in log_path.read_bytes().splitlines()
        if AUDIT.encode() in line
    ]
    ran = {line.split()[0].decode() for line in lines if line.endswith(b" ran")}
    findings = sorted({line for line in lines if not line.endswith(b" ran")})
    # Then none reached a key it did not declare, or declared keys of two slots
    assert not findings, "\n".join(f.decode(errors="replace") for f in findings)
    # And every script ran at least once (a new one needs its path in the workload)
    never = sorted(set(script_names()) - ran)
    assert not never, f"scripts the workload never ran: {never}"


def test_the_audit_sees_an_undeclared_key_and_a_second_slot(audited_world):
    # Given a script that reads a key it does not declare and declares keys of two hash tags
    world, log_path = audited_world
    source = "return redis.call('GET', 'ps:{b}:undeclared')"
    script = world.client.register_script(audited("probe", source))
    before = log_path.read_bytes().count(b"probe")
    # When it runs
    script(keys=["ps:{a}:one", "ps:{b}:two"])
    # Then the server's log names both findings (the check above can fail)
    log = log_path.read_bytes()
    assert log.count(b"probe") > before
    assert b"probe undeclared GET ps:{b}:undeclared" in log
    assert b"probe cross-slot ps:{b}:two" in log


def test_the_audit_sees_a_call_made_through_an_alias(audited_world):
    # Given a script that reaches undeclared keys without writing `redis.call(`: through a
    # local alias of redis.call, one of redis.pcall, and redis's table indexed by name
    world, log_path = audited_world
    source = (
        "local call, pcall = redis.call, redis.pcall\n"
        "call('GET', 'ps:{c}:aliased')\n"
        "pcall('GET', 'ps:{c}:aliased-pcall')\n"
        "return redis['call']('GET', 'ps:{c}:indexed')"
    )
    script = world.client.register_script(audited("alias", source))
    # When it runs
    script(keys=["ps:{c}:one"])
    # Then the server's log names each undeclared key, as for a plain redis.call
    log = log_path.read_bytes()
    assert b"alias undeclared GET ps:{c}:aliased" in log
    assert b"alias undeclared GET ps:{c}:aliased-pcall" in log
    assert b"alias undeclared GET ps:{c}:indexed" in log


def test_the_audit_sees_keys_a_sort_pattern_reads(audited_world):
    # Given a script that sorts its declared list by, and gets, keys named by a pattern
    world, log_path = audited_world
    source = (
        "redis.call('RPUSH', KEYS[1], 'a', 'b')\n"
        "return redis.call('SORT', KEYS[1], 'BY', 'ps:{d}:w_*', 'GET', '#', 'GET', 'ps:{d}:v_*')"
    )
    script = world.client.register_script(audited("sorter", source))
    # When it runs
    script(keys=["ps:{d}:list"])
    # Then the server's log names both patterns (COMMAND GETKEYS lists only the sorted key),
    # and not GET's `#`, which is the element itself
    log = log_path.read_bytes()
    assert b"sorter pattern SORT ps:{d}:w_*" in log
    assert b"sorter pattern SORT ps:{d}:v_*" in log
    assert b"sorter pattern SORT #" not in log


def test_the_audit_sees_code_compiled_at_run_time_and_calls_through_the_globals(audited_world):
    # Given a script that reaches keys through code it compiles at run time (whose calls the
    # prelude cannot check) and through the globals table
    world, log_path = audited_world
    source = (
        'loadstring("return 1")()\n'
        'local parts = {"return 2"}\n'
        "load(function() return table.remove(parts) end)()\n"
        "return _G.redis.call('GET', 'ps:{f}:through-globals')"
    )
    script = world.client.register_script(audited("compiler", source))
    # When it runs
    script(keys=["ps:{f}:one"])
    # Then the server's log names the run-time code (a finding) and the undeclared key
    log = log_path.read_bytes()
    assert b"compiler runtime-code loadstring" in log
    assert b"compiler runtime-code load" in log
    assert b"compiler undeclared GET ps:{f}:through-globals" in log


def extra_paths(world) -> None:
    """The paths the explorer's operations do not take, each through the route that runs them:
    a blob in parts (blobs_upload, blobs_parts), a layout-1 job's conversion, a re-presign
    (presign_count), a daemon's S3 result (presign_result), an operator's look at inline
    arguments (operate_args), a result read in a `consume` namespace (consume_mark) and the
    renewals function (blobs_renewed); and the ones the explorer's seeds may miss (a layout-1
    repeat, a queued inline job's cancel, a retry, a refused S3-tier enqueue)."""
    import base64

    import requests

    from payloadstore_controlplane.handlers import admin, renewals
    from payloadstore_controlplane.logic.renewals import renew_blobs
    from payloadstore_controlplane.models.domain import new_job_id
    from payloadstore_controlplane.models.policy import NamespacePolicy
    from payloadstore_controlplane.store import keys
    from tests.integration.test_upgrade_layout1 import Layout1
    from tests.races.world import BUCKET, forget_container_state
    from tests.support.control_plane import ControlPlane, sha256_hex, upload
    from tests.support.events import FakeLambdaContext

    world.flush()
    forget_container_state()
    cp = ControlPlane("kx")

    # A blob above MULTIPART_THRESHOLD (5 MiB here): opened, its parts presigned, put, completed
    part = 5 * 1024 * 1024
    data = os.urandom(part + 1000)
    sha = sha256_hex(data)
    opened = cp.blob(sha, len(data))
    assert opened.status == 200 and opened.json.get("multipart"), opened.raw_body
    chunks = [data[:part], data[part:]]
    specs = [
        {"number": n + 1, "size": len(c), "sha256": sha256_hex(c)} for n, c in enumerate(chunks)
    ]
    urls = cp.call(
        "payloads", "POST", "/v1/namespaces/{ns}/payloads/parts", {"ns": cp.ns},
        body={"blob": sha, "parts": specs},
    )  # fmt: skip
    assert urls.status == 200, urls.raw_body
    for u, chunk in zip(urls.json["parts"], chunks, strict=True):
        assert requests.put(u["url"], data=chunk, headers=u["headers"], timeout=60).ok
    assert cp.blob(sha, len(data)).json["exists"] is True

    # A job that references the blob, whose object is due for renewal: the renewals function
    job = cp.enqueue(body={"blobs": [sha], "payloadInline": base64.b64encode(b"\x91\x01").decode()})
    assert job.status == 201, job.raw_body
    world.client.pexpire(keys.blob(cp.ns, sha), 3600 * 1000)
    renew_blobs([cp.ns], renewals.renewal_deps())

    # An S3-tier job presigned twice (a re-presign counts), then delivered; the daemon's result
    # goes through S3; an operator looks at an inline job's arguments
    args = os.urandom(300_000)
    first = cp.presign_put(len(args), sha256=sha256_hex(args))
    again = cp.presign_put(len(args), sha256=sha256_hex(args), job_id=first.json["job_id"])
    assert again.status == 200, again.raw_body
    assert requests.put(again.json["url"], data=args, headers=again.json["headers"], timeout=60).ok
    ref = {"kind": "s3", "bucket": again.json["bucket"], "key": again.json["key"],
           "size": len(args), "contentType": "application/msgpack", "sha256": sha256_hex(args)}  # fmt: skip
    s3_job = cp.enqueue(ref=ref).json["job_id"]
    inline_job = job.json["job_id"]
    for _ in range(2):
        polled = cp.poll()
        assert polled.status == 200, polled.raw_body
        got = polled.json["job_id"]
        if got == s3_job:
            result = upload(cp, os.urandom(300_000), role="daemon", job_id=got)
            assert cp.post_result(got, {"resultRef": result}).status == 204
        else:
            assert cp.post_result(got, {"resultInline": "AQ=="}).status == 204
    cp.call("jobs", "GET", "/v1/namespaces/{ns}/jobs/{job_id}/payloads",
            {"ns": cp.ns, "job_id": inline_job})  # fmt: skip

    # An S3-tier job whose daemon reports its arguments lost: requeued once (payload_lost policy
    # retry_once), its old entry released
    lost = cp.enqueue(ref=upload(cp, os.urandom(300_000))).json["job_id"]
    assert cp.poll().json["job_id"] == lost
    reported = cp.report(lost, {"state": "payload_lost", "detail": "404 on GET"})
    assert reported.status == 204, reported.raw_body
    assert cp.poll().json["job_id"] == lost
    assert cp.post_result(lost, {"resultInline": "AQ=="}).status == 204

    # A layout-1 job (written as the previous layout did) converted by the poll that takes it
    old = Layout1(world.client, cp.ns, cp.queue, BUCKET)
    legacy = new_job_id()
    old.job(legacy, tier="inline", size=1)
    old.entry(legacy, inline=b"\x01")
    assert cp.poll().json["job_id"] == legacy

    # A running job cancelled: the cancel wakes its daemon's leases long-poll
    # (lifecycle_signal)
    running = cp.enqueue(inline=b"\x91\x04").json["job_id"]
    assert cp.poll(daemon_id="d-cancel").json["job_id"] == running
    cancelled = cp.call(
        "jobs", "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": cp.ns, "job_id": running}
    )
    assert cancelled.status == 202, cancelled.raw_body

    # An operator's purge sent with an Idempotency-Key (run once; its repeat answered)
    for _ in range(2):
        purged = cp.call(
            "jobs", "POST", "/v1/namespaces/{ns}/queues/{queue}/purge",
            {"ns": cp.ns, "queue": cp.queue}, headers={"Idempotency-Key": "purge-once"},
        )  # fmt: skip
        assert purged.status == 200, purged.raw_body

    # A result posted in a `7d` namespace keeps the job's record for the class
    cp.policy = NamespacePolicy("7d", "none", "allowed")  # as the authorizer passes it
    kept = cp.enqueue(inline=b"\x91\x03").json["job_id"]
    assert cp.poll().json["job_id"] == kept
    assert cp.post_result(kept, {"resultInline": "AQ=="}).status == 204

    # A result read in a `consume` namespace marks it for deletion after its grace
    admin.lambda_handler(
        {"action": "set_policy", "namespace": cp.ns, "retention": "consume"}, FakeLambdaContext()
    )
    cp.policy = NamespacePolicy("consume", "none", "allowed")  # as the authorizer passes it
    consumed = cp.enqueue(inline=b"\x91\x02").json["job_id"]
    assert cp.poll().json["job_id"] == consumed
    assert cp.post_result(consumed, {"resultInline": "AQ=="}).status == 204
    assert cp.result(consumed).status == 200

    # A policy change of kms_key under a recorded blob: its POST cuts the old record to the
    # class of the upload that replaces it (blobs_cap)
    from payloadstore_controlplane.logic import daemon
    from payloadstore_controlplane.models.errors import ServiceUnavailable
    from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
    from tests.support.control_plane import create_blob

    keyed = ControlPlane("kk")
    small = create_blob(keyed, b"kept" * 900)
    keyed.policy = NamespacePolicy("2d", LOCAL_KMS_KEY_ARN)
    assert keyed.blob(small, 900 * 4).json["exists"] is False

    # A multipart result completed and verified by a post that then answered 503, re-posted
    # after a kms_key change: its kept completion is forgotten (presign_reopen)
    keyed.policy = NamespacePolicy()
    assert keyed.enqueue(inline=b"\x91\x03").status == 201
    running = keyed.poll().json["job_id"]
    result = os.urandom(part + 1000)
    presigned = keyed.presign_put(len(result), sha256=None, role="daemon", job_id=running)
    assert presigned.json.get("multipart"), presigned.raw_body
    chunks = [result[:part], result[part:]]
    specs = [
        {"number": n + 1, "size": len(c), "sha256": sha256_hex(c)} for n, c in enumerate(chunks)
    ]
    urls = keyed.call(
        "payloads", "POST", "/v1/namespaces/{ns}/payloads/parts", {"ns": keyed.ns},
        body={"job_id": running, "kind": "result", "lease": keyed.leases[running],
              "parts": specs}, role="daemon",
    )  # fmt: skip
    assert urls.status == 200, urls.raw_body
    for u, chunk in zip(urls.json["parts"], chunks, strict=True):
        assert requests.put(u["url"], data=chunk, headers=u["headers"], timeout=60).ok
    ref = {"bucket": presigned.json["bucket"], "key": presigned.json["key"], "size": len(result)}

    def unavailable(*args, **kwargs):
        raise ServiceUnavailable("redis unreachable")

    completing = daemon._complete
    daemon._complete = unavailable  # type: ignore[assignment]
    try:
        assert keyed.post_result(running, {"resultRef": ref}).status == 503
    finally:
        daemon._complete = completing  # type: ignore[assignment]
    keyed.policy = NamespacePolicy("2d", LOCAL_KMS_KEY_ARN)
    assert keyed.post_result(running, {"resultRef": ref}).error["code"] == "policy_mismatch"

    # Paths the explorer takes only as its state allows (a workload's seeds may miss them): a
    # layout-1 inline job whose Idempotency-Key's first request never reached its queue, repeated
    # (its append, then enqueue_record_entry); a queued inline job cancelled before it has a hash
    # (lifecycle_find_entry); a failed job retried (operate_retry, operate_requeue); a keyed
    # cancel (operate_once's claim, operate_answer keeping its answer)
    from tests.integration.test_operate import fail, retry
    from tests.support.control_plane import cancel

    late = ControlPlane("kr")
    layout1 = Layout1(world.client, late.ns, late.queue, BUCKET)
    unappended = new_job_id()
    layout1.job(unappended, tier="inline", size=2)
    layout1.idempotency("order-9", unappended)
    again = late.enqueue(raw=b"\x92\x01", headers={"Idempotency-Key": "order-9"})
    assert (again.status, again.json["job_id"]) == (200, unappended), again.raw_body
    assert late.poll().json["job_id"] == unappended
    fail(late, unappended)
    retried = retry(late, unappended)
    assert retried.status == 200, retried.raw_body
    queued = late.enqueue(inline=b"\x91\x05").json["job_id"]
    assert cancel(late, queued).status == 200
    other = late.enqueue(inline=b"\x91\x06").json["job_id"]
    keyed_cancel = late.call(
        "jobs", "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", {"ns": late.ns, "job_id": other},
        headers={"Idempotency-Key": "cancel-1"},
    )  # fmt: skip
    assert keyed_cancel.status == 200, keyed_cancel.raw_body

    # An S3-tier enqueue refused for a policy changed since its upload (enqueue_refuse_ref)
    late.policy = NamespacePolicy("1d")
    uploaded = upload(late, os.urandom(3000))
    late.policy = NamespacePolicy("7d")
    assert late.enqueue(ref=uploaded).error["code"] == "policy_mismatch"
