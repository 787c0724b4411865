"""The actors and their operations: clients, daemons and an operator, each operation the real
handlers called with API Gateway events (tests/support/control_plane.py), run in a thread the
scheduler pauses between its steps.

An operation is described by plain data (its name and parameters: which job, which daemon,
with or without blobs, ...), so a run is a list of decisions that replays. Parameters name jobs
and deliveries by their position in the model's lists, resolved when the operation starts (a
shrunk sequence that dropped an enqueue still names some job, or none: then it does nothing).

What an operation checks of its own answers (the rest is invariants.py):
- no answer is a 5xx but a 503 with Retry-After (then sent again, as the SDK does), none over 6 MB;
- a delivery carries its job's own arguments and its full blob list;
- a daemon that still holds the current lease (the job hash says so after the answer) has its
  heartbeat, leases renewal, presign, parts and result post accepted;
- an Idempotency-Key sent again answers the job it created.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.races.sched import SCHEDULER, unhooked
from tests.races.world import MiB
from tests.support.control_plane import (
    ControlPlane,
    Reply,
    heartbeat,
    leases,
    sha256_hex,
)

QUEUES = ("q1", "q2")
DAEMONS = ("d1", "d2")
MULTIPART_SIZE = 5 * MiB + 4096  # two parts: 5 MiB and 4 KiB


@dataclass
class JobIntent:
    """What a client asked for: the job it should become (id once known)."""

    label: str
    tier: str  # inline | s3 | multipart
    queue: str
    blobs: list[str]
    inline: bytes | None = None
    job_id: str | None = None
    acked: bool = False  # an enqueue answered 201/200
    # Its enqueue's last answer was a refusal (a policy or limit changed under it): whatever an
    # earlier try of it appended must never run (`refused_job_ran`).
    refused: bool = False
    idem_key: str | None = None
    # The days passed (Model.shift_s) when it was sent: an Idempotency-Key lives
    # IDEMPOTENCY_TTL_S (at most 6 h), so once days pass the same key may make a new job.
    idem_shift_s: float = 0.0
    # When it was enqueued (the explorer's clock) and how long it is promised to live: the
    # shortest of its namespace's retention classes since (a shortened retention shortens the
    # promise: an honest expiry) and the queue retention (RESULT_TTL_S) deployed since.
    enqueued_at: float = 0.0
    promise_s: float = float("inf")


@dataclass
class Held:
    """A delivery a daemon holds: what its poll answered."""

    job_id: str
    lease: str
    attempt: int
    daemon: str


@dataclass
class Model:
    namespace: str
    cp: ControlPlane
    redis: Any  # the explorer's own client (reads the job hash after an answer)
    blobs: list[str] = field(default_factory=list)
    blob_data: dict[str, bytes] = field(default_factory=dict)
    intents: list[JobIntent] = field(default_factory=list)
    by_label: dict[str, JobIntent] = field(default_factory=dict)
    held: dict[str, list[Held]] = field(default_factory=lambda: {d: [] for d in DAEMONS})
    # result posts answered 204 (success): job id -> when (the explorer's clock)
    succeeded: dict[str, float] = field(default_factory=dict)
    violations: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)
    # Changes (RELIABILITY.md "Changes"): the namespace's policy as last set (None: the
    # defaults), bumped `policy_gen` at each set; `deploy(values)` brings new settings.
    policy: Any = None
    policy_gen: int = 0
    deploy: Callable[[dict[str, str]], None] | None = None
    # Error texts posted while the namespace's policy was inline `never` from before the post
    # to its answer: none of their bytes may rest in Redis.
    never_texts: list[bytes] = field(default_factory=list)
    s3: Any = None  # the explorer's own S3 client (the invariants read objects with it)
    clock: Callable[[], float] = lambda: 0.0  # the explorer's clock (the handlers' now)
    # Seconds by which the explorer moved Redis's TTLs and the objects' lifecycle ahead (days
    # passed: world.Stack.advance); what Redis and S3 read as now is the machine's time + this.
    shift_s: float = 0.0
    # Blobs whose last verification (POST .../blobs) had days pass inside it, between its HEAD
    # of the object and its record: the handlers' clock saw none of them, so the record may
    # promise an object the days deleted (the explorer's doing: a request lasts seconds).
    blobs_verified_across_days: set[str] = field(default_factory=set)
    # Policy changes so far: an upload re-signed after each one may need a round per change
    policy_changes: int = 0
    # Idempotency-Keys handed out to operations (one per call, see _operation)
    operation_keys: int = 0
    # Connections cut in this run (a poll's delivery may have counted with its answer lost)
    cuts: int = 0
    written: Callable[[float], float] = lambda t: t  # world.Stack.written
    told: dict[str, int] = field(default_factory=dict)  # job id -> deliveries a daemon was told
    reported_lost: set[str] = field(default_factory=set)  # jobs a daemon reported payload_lost
    result_ttl_s: float = 172_800.0  # RESULT_TTL_S deployed now
    memory_full: bool = False  # Redis at its maxmemory (the `memory` operation)
    ssm: Any = None  # the world's proxy in front of SSM (the `ssm` operation stalls it)

    def past_promise(self, job_id: str, slack_s: float = 0.0) -> bool:
        """Whether a job may be gone by now, by design: past what its class promised."""
        intent = self.intent(job_id)
        if intent is None:
            # (a job the model does not know by id: created in this run, so only days
            # passing can have taken it past any promise)
            return self.shift_s >= 86_400
        return self.clock() + slack_s >= intent.enqueued_at + intent.promise_s

    def shorten_promises(self, seconds: float) -> None:
        for i in self.intents:
            i.promise_s = min(i.promise_s, seconds)

    def intent(self, job_id: str) -> JobIntent | None:
        return next((i for i in self.intents if i.job_id == job_id), None)

    def jobs(self) -> list[JobIntent]:
        return [i for i in self.intents if i.job_id]

    def violation(self, kind: str, detail: str) -> None:
        if kind in ("refused", "lease_holder_refused", "result_stranded") and (
            getattr(_op_started, "shift_s", self.shift_s) != self.shift_s
        ):
            # Days passed while the operation ran: its presigned URLs, issued keys and
            # leases of days ago may be gone, honestly.
            return
        self.violations.append((kind, detail))


_op_started = threading.local()  # shift_s when this thread's operation started


def started(m: Model, fn: Callable[[], None]) -> None:
    """Run an operation, remembering how many days had passed when it started."""
    _op_started.shift_s = m.shift_s
    _op_started.model = m
    fn()


def _days_passed_under() -> bool:
    """Whether days passed while this thread's operation ran."""
    m = getattr(_op_started, "model", None)
    return m is not None and _op_started.shift_s != m.shift_s


def _step(what: str) -> None:
    """A call that leaves the process but is not Redis or the control plane's S3 (a client's
    upload through a presigned URL): a step of its own."""
    SCHEDULER.checkpoint(what)


# Lambda's synchronous response limit (6 MB), as it counts it: the whole proxy answer.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024


def _no_5xx(m: Model, what: str, r: Reply) -> Reply:
    """Every answer: no 5xx but a 503 with Retry-After (a dependency unavailable for a while,
    by design: the caller retries), and nothing over Lambda's 6 MB (which API Gateway would
    turn into a 502 after the handler had done its work: a poll's jobs leased, never told)."""
    retry_after = {k.lower(): v for k, v in (r.headers or {}).items()}.get("retry-after")
    if r.status >= 500 and not (r.status == 503 and retry_after):
        m.violation("server_error", f"{what} answered {r.status}: {r.raw_body[:300]}")
    if r.proxy_bytes > LAMBDA_RESPONSE_LIMIT:
        m.violation(
            "answer_over_6mb",
            f"{what} answered {r.status} with {r.proxy_bytes} bytes (Lambda's limit: "
            f"{LAMBDA_RESPONSE_LIMIT}; API Gateway answers 502 instead)",
        )
    return r


def _class_s(m: Model) -> float:
    """What the namespace's retention class promises now, in seconds (`consume`: its
    backstop's two days)."""
    from payloadstore_controlplane.models.policy import RETENTION_DAYS

    retention = m.policy.retention if m.policy is not None else "2d"
    return RETENTION_DAYS[retention] * 86_400.0


def _setting(name: str) -> int:
    import os

    return int(os.environ[name])


def _put(url: dict, data: bytes) -> int:
    _step("s3 put (presigned)")
    return requests.put(url["url"], data=data, headers=url["headers"], timeout=60).status_code


def _bytes_of(label: str, size: int) -> bytes:
    seed = hashlib.sha256(label.encode()).digest()
    return (seed * (size // 32 + 1))[:size]


# -- clients ---------------------------------------------------------------------------------


def enqueue(
    m: Model,
    label: str,
    tier: str,
    queue: str,
    blobs: int,
    idem: bool,
    wait: bool = False,
    large: bool | float = False,
) -> None:
    """`wait`: enqueue-and-wait (`?wait=0`: the answer says whether the job already ended; a
    longer wait would block the one running thread for its whole length). `large`: an inline
    payload of INLINE_THRESHOLD bytes, the largest the settings deployed now allow (a number:
    that fraction of it)."""
    shas = m.blobs[:blobs]
    intent = JobIntent(label, tier, queue, shas, enqueued_at=m.clock())
    intent.promise_s = min(_class_s(m), m.result_ttl_s)
    m.intents.append(intent)
    m.by_label[label] = intent
    cp = m.cp
    if tier == "inline":
        intent.inline = f"inline:{label}".encode()
        if large:
            size = int(_setting("INLINE_THRESHOLD") * (1.0 if large is True else float(large)))
            intent.inline = (intent.inline + b"\n" + _bytes_of(label, size))[:size]
        body: dict[str, Any] = {"payloadInline": base64.b64encode(intent.inline).decode()}
        headers = None
        if idem:
            intent.idem_key = f"idem-{label}"
            intent.idem_shift_s = m.shift_s
            headers = {"Idempotency-Key": intent.idem_key}
    else:
        size = 2048 if tier == "s3" else MULTIPART_SIZE
        data = _bytes_of(label, size)
        if tier == "s3":
            r = _no_5xx(m, "presign put", cp.presign_put(size, sha256=sha256_hex(data)))
            if r.status != 200:
                if not _over_a_limit(r):
                    m.violation("refused", f"presign of a fresh S3 payload answered {r.status}")
                return
            intent.job_id = r.json["job_id"]
            if _put(r.json, data) != 200:
                m.violation("refused", "upload to a presigned URL refused")
                return
        else:
            r = _no_5xx(m, "presign put", cp.presign_put(size, sha256=None))
            if r.status != 200:
                if not _over_a_limit(r):
                    m.violation("refused", f"multipart presign answered {r.status}")
                return
            intent.job_id = r.json["job_id"]
            if not _upload_parts(m, cp, r.json, data, role="client"):
                return
        body = {"payloadRef": {"bucket": r.json["bucket"], "key": r.json["key"], "size": size}}
        headers = None
    if shas:
        body["blobs"] = shas

    def send() -> Reply:
        if wait:
            return cp.call(
                "jobs",
                "POST",
                "/v1/namespaces/{ns}/queues/{queue}/jobs",
                {"ns": cp.ns, "queue": queue},
                body=body,
                headers=headers,
                query={"wait": "0"},
            )
        return cp.enqueue(body=body, headers=headers, queue=queue)

    policy_at_start = m.cp.policy
    r = _resent_on_503(m, "enqueue", send)
    if r.status == 409 and r.error.get("code") == "unknown_blob":
        # A blob verified under another KMS key than the namespace's now (a `kms_key` change):
        # the SDK uploads it again under the current policy and sends the enqueue once more.
        for sha in r.error.get("blobs") or []:
            if sha in m.blob_data and not _upload_blob(m, sha, m.blob_data[sha]):
                return
        r = _resent_on_503(m, "enqueue after the blobs' upload", send)
        if (
            r.status == 409
            and r.error.get("code") == "unknown_blob"
            and m.cp.policy != policy_at_start
        ):
            # The policy changed again while the blob was uploaded (its verification was
            # authorized under the earlier one): refused, nothing written, as a policy
            # refusal is; the SDK raises it to the caller.
            _refused(m, intent)
            return
    # An enqueue answered 503 each time it was sent (or one days passed under) acknowledged
    # nothing; what it left half-written must still be no `queued` job without an entry: the
    # invariants judge it as any other (queued_without_entry).
    if r.status == 503 or _days_passed_under():
        return
    if r.status in (200, 201):
        intent.job_id = r.json["job_id"]
        intent.acked = True
    elif (
        r.status < 500
        and not _policy_refusal(r)
        and not _over_a_limit(r)
        # (days passed: a blob no job needed was let go; the client uploads it again)
        and not (m.shift_s and r.error.get("code") == "unknown_blob")
    ):
        m.violation("refused", f"enqueue {tier} answered {r.status}: {r.raw_body[:200]}")
    else:
        # Refused by design (a policy or limit changed under it): no job was acknowledged, and
        # what a first try cut off left must read as no job (judged by the invariants) and
        # never run.
        _refused(m, intent)


def _refused(m: Model, intent: JobIntent) -> None:
    intent.refused = True
    if intent.job_id is not None and m.told.get(intent.job_id):
        m.violation(
            "refused_job_ran", f"job {intent.job_id} was delivered, its enqueue answered refused"
        )


def _resent_on_503(m: Model, what: str, send: Callable[[], Reply]) -> Reply:
    """A call answered 503 with Retry-After is sent again, as the SDK does (up to 3 times):
    what it did before the answer (a connection cut after its command ran) must be finished or
    undone by the same call again."""
    r = _no_5xx(m, what, send())
    for _ in range(2):
        if r.status != 503:
            break
        r = _no_5xx(m, f"{what} again", send())
    return r


def _over_a_limit(r: Reply) -> bool:
    """Refusals by design: 413, a payload over a limit a deploy lowered between the client's
    choice and its call (INLINE_THRESHOLD, MAX_PAYLOAD_BYTES; the client sends it otherwise);
    a 503 (Redis full or cut off: _no_5xx checks its Retry-After; the client tries again).
    Nothing is written either way."""
    return r.status in (413, 503)


def enqueue_again(m: Model, job: int) -> None:
    """The same Idempotency-Key again (a client whose answer was lost): the same job, while the
    key lives (IDEMPOTENCY_TTL_S, at most 6 h): a key sent before days passed may have expired,
    and its re-send is a new job by design, so it is not sent again."""
    keyed = [i for i in m.intents if i.idem_key and i.acked and i.idem_shift_s == m.shift_s]
    if not keyed:
        return
    intent = keyed[job % len(keyed)]
    body: dict[str, Any] = {"payloadInline": base64.b64encode(intent.inline or b"").decode()}
    if intent.blobs:
        body["blobs"] = intent.blobs
    r = _no_5xx(
        m,
        "enqueue again",
        m.cp.enqueue(
            body=body, headers={"Idempotency-Key": intent.idem_key or ""}, queue=intent.queue
        ),
    )
    if r.status in (200, 201) and r.json["job_id"] != intent.job_id:
        m.violation(
            "idempotency",
            f"Idempotency-Key {intent.idem_key} answered job {r.json['job_id']}, "
            f"not {intent.job_id}",
        )


def _upload_parts(
    m: Model, cp: ControlPlane, presigned: dict, data: bytes, *, role: str, lease: str | None = None
) -> bool:
    mp = presigned["multipart"]
    size = mp["part_bytes"]
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    body: dict[str, Any] = {
        "job_id": presigned["job_id"],
        "parts": [
            {"number": n, "size": len(c), "sha256": sha256_hex(c)} for n, c in enumerate(chunks, 1)
        ],
    }
    if role == "daemon":
        body["kind"] = "result"
        body["lease"] = lease
    r = _no_5xx(
        m,
        "parts",
        cp.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/parts",
            {"ns": cp.ns},
            role=role,
            body=body,
        ),
    )
    if r.status != 200:
        if role == "client" and not _over_a_limit(r):
            m.violation("refused", f"parts of a fresh upload answered {r.status}")
        return False
    for url, chunk in zip(r.json["parts"], chunks, strict=True):
        if _put(url, chunk) != 200:
            m.violation("refused", "a part upload to its presigned URL was refused")
            return False
    return True


def _operation(
    m: Model, what: str, method: str, resource: str, params: dict, body: Any = None
) -> Reply:
    """An operator's call as the SDK makes it (issue 46): an Idempotency-Key of its own, the
    same on each re-send after a 503, so a re-sent call finishes what a cut connection left
    half done."""
    m.operation_keys += 1
    headers = {"Idempotency-Key": f"{m.namespace}-{what}-{m.operation_keys}"}
    return _resent_on_503(
        m,
        what,
        lambda: m.cp.call(
            "jobs", method, resource, {"ns": m.namespace, **params}, body=body, headers=headers
        ),
    )


def cancel_job(m: Model, job: int) -> None:
    jobs = m.jobs()
    if jobs:
        jid = jobs[job % len(jobs)].job_id or ""
        _operation(m, "cancel", "DELETE", "/v1/namespaces/{ns}/jobs/{job_id}", {"job_id": jid})


def retry(m: Model, job: int) -> None:
    """A retry, re-sent on a 503 with its Idempotency-Key as the SDK does: a retry whose
    connection was cut between its job step and its queue step (the job `queued`, `x` = '*',
    no entry yet) is finished by the re-send, which resumes it."""
    jobs = m.jobs()
    if jobs:
        jid = jobs[job % len(jobs)].job_id
        _operation(m, "retry", "POST", "/v1/namespaces/{ns}/jobs/{job_id}/retry", {"job_id": jid})


def status(m: Model, job: int) -> None:
    jobs = m.jobs()
    if jobs:
        _no_5xx(m, "status", m.cp.status(jobs[job % len(jobs)].job_id))


def view(m: Model, job: int) -> None:
    """The operators' read routes (the dashboard, `status --show-args`): a job's payloads and
    the namespace's throughput. Invariants: never a 5xx; inline arguments read back are the
    bytes the client sent; a throughput answer holds one count per minute, none negative."""
    jobs = [j for j in m.jobs() if j.job_id]
    if jobs:
        intent = jobs[job % len(jobs)]
        r = _no_5xx(
            m,
            "payloads",
            m.cp.call(
                "jobs",
                "GET",
                "/v1/namespaces/{ns}/jobs/{job_id}/payloads",
                {"ns": m.namespace, "job_id": intent.job_id},
            ),
        )
        shown = (r.json or {}).get("args", {}).get("inline") if r.status == 200 else None
        if (
            shown is not None
            and intent.inline is not None
            and base64.b64decode(shown) != intent.inline
        ):
            m.violation("wrong_bytes", f"job {intent.job_id}: its arguments read back differ")
    r = _no_5xx(
        m,
        "throughput",
        m.cp.call("jobs", "GET", "/v1/namespaces/{ns}/throughput", {"ns": m.namespace}),
    )
    if r.status == 200:
        counts = (r.json or {}).get("succeeded", []) + (r.json or {}).get("failed", [])
        if len(counts) != 120 or min(counts) < 0:
            m.violation("throughput", f"throughput answered {r.raw_body[:200]!r}")


# Uploads of one blob before a verification must have answered `exists` (each round after the
# first follows a policy change between upload and verification).
BLOB_UPLOAD_ROUNDS = 3


def create_blob(m: Model, label: str, multipart: bool = False) -> None:
    """A blob: one PUT, or (`multipart`) an upload in parts (its POST opens it, a parts call
    signs each part, the POST after the parts completes and records it)."""
    data = _bytes_of(label, MULTIPART_SIZE if multipart else 1024)
    sha = sha256_hex(data)
    if _upload_blob(m, sha, data) and sha not in m.blobs:
        m.blobs.append(sha)
        m.blob_data[sha] = data


def _verify_blob(m: Model, what: str, sha: str, size: int) -> Reply:
    shift = m.shift_s
    r = _no_5xx(m, what, m.cp.blob(sha, size))
    if m.shift_s != shift:
        # Kept for the run: a later verification that finds the record standing answers
        # `exists` without recording again, so the record made across days stays (seed 9402).
        m.blobs_verified_across_days.add(sha)
    return r


def _upload_blob(m: Model, sha: str, data: bytes) -> bool:
    """POST .../blobs, upload what it asks for, POST again until it answers `exists`; False
    (with a violation where it is one) when the blob could not be made."""
    changes_before = m.policy_changes
    r = _verify_blob(m, "blob", sha, len(data))
    if r.status != 200:
        if not _over_a_limit(r):
            m.violation("refused", f"blob create answered {r.status}")
        return False
    # A verification may answer a fresh upload instead (the object was signed under a policy
    # that has changed since: issue 43's defect 2): upload again, as the SDK's blob loop does.
    for _ in range(BLOB_UPLOAD_ROUNDS):
        if r.json["exists"]:
            break
        if r.json.get("multipart"):
            if not _upload_blob_parts(m, r.json["multipart"], sha, data):
                return False
        elif _put(r.json["upload"], data) != 200:
            m.violation("refused", "blob upload refused")
            return False
        r = _verify_blob(m, "blob again", sha, len(data))
        if r.status != 200:
            if not _over_a_limit(r):
                m.violation("refused", f"blob verify answered {r.status}: {r.raw_body[:200]}")
            return False
    if not r.json["exists"]:
        if m.policy_changes == changes_before:
            # (a policy changed at each round re-signs the upload each time: a client's bounded
            # loop gives up by design, as the SDK's does; seed 9402)
            m.violation(
                "refused",
                f"blob still not verified after {BLOB_UPLOAD_ROUNDS} uploads: {r.raw_body[:200]}",
            )
        return False
    return True


def _upload_blob_parts(m: Model, spec: dict, sha: str, data: bytes) -> bool:
    size = spec["part_bytes"]
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    parts = [
        {"number": n, "size": len(c), "sha256": sha256_hex(c)} for n, c in enumerate(chunks, 1)
    ]
    r = _no_5xx(
        m,
        "blob parts",
        m.cp.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/parts",
            {"ns": m.namespace},
            body={"blob": sha, "parts": parts},
        ),
    )
    if r.status != 200:
        if r.status != 404 and not _over_a_limit(r):
            # (404: another uploader of the same content completed it first)
            m.violation("refused", f"parts of a blob's open upload answered {r.status}")
        return False
    for url, chunk in zip(r.json["parts"], chunks, strict=True):
        if _put(url, chunk) != 200:
            m.violation("refused", "a blob part upload to its presigned URL was refused")
            return False
    return True


# -- operator ----------------------------------------------------------------------------------


def purge(m: Model, queue: str) -> None:
    _operation(m, "purge", "POST", "/v1/namespaces/{ns}/queues/{queue}/purge", {"queue": queue})


def redrive(m: Model, queue: str, cancelled: bool) -> None:
    states = ["failed", "payload_lost", "payload_corrupt"] + (["cancelled"] if cancelled else [])
    _operation(
        m,
        "redrive",
        "POST",
        "/v1/namespaces/{ns}/queues/{queue}/redrive",
        {"queue": queue},
        body={"states": states},
    )


def policy(m: Model, inline: str, retention: str, kms_key: str | None = None) -> None:
    """The operator sets the namespace's policy (the admin function's set_policy): inline
    payloads and results allowed or never, the retention tag every upload is signed with, and
    the KMS key (`none`, `stack`); a field left out keeps its value. From the next call on, the
    authorizer's context carries it (tokens read uncached: TOKEN_CACHE_S=0)."""
    from payloadstore_controlplane.handlers import admin
    from payloadstore_controlplane.models.policy import NamespacePolicy
    from tests.support.events import FakeLambdaContext

    m.policy_changes += 1
    event = {"action": "set_policy", "namespace": m.namespace, "inline": inline}
    event["retention"] = retention
    if kms_key is not None:
        event["kms_key"] = kms_key
    from payloadstore_controlplane.store.aws_http import AwsRequestError

    for _ in range(5):
        # Parameter Store of the emulator, slow on a loaded machine: the operator tries again
        # (a policy not set is no change; nothing of a job's depends on this call).
        try:
            answer = admin.lambda_handler(event, FakeLambdaContext())
            break
        except AwsRequestError:
            continue
    else:
        return
    if "error" in answer:
        m.violation("refused", f"set_policy answered {answer}")
        return
    m.policy = NamespacePolicy(**answer["policy"])
    m.cp.policy = m.policy
    m.policy_gen += 1
    m.shorten_promises(_class_s(m))


def memory(m: Model, full: bool) -> None:
    """Redis reaches its maxmemory (noeviction: every write that needs memory is refused with
    OOM, as ElastiCache's is) or recovers (room again). Reads go on either way; a write refused
    must be answered 503 with Retry-After, and nothing acknowledged lost."""
    r = m.redis
    with unhooked():
        nodes = {"target_nodes": r.PRIMARIES} if hasattr(r, "get_primaries") else {}
        r.config_set("maxmemory-policy", "noeviction", **nodes)
        # 1 byte: below what every node holds, so the next write that needs memory is refused.
        r.config_set("maxmemory", "1" if full else "0", **nodes)
    m.memory_full = full


# The authorizer answers within this long while SSM fails (store/tokens.py: it waits for SSM
# SSM_WAIT_S, 0.7 s, then answers from its last good listing).
SSM_ANSWER_S = 1.0
# How long after a stall ends the listing must have been read again: the back-off after a
# failed read (world.SSM_RETRY_AFTER_FAILURE_S), a read, and room for a loaded machine.
SSM_RECOVER_S = 8.0


def ssm(m: Model, how: str, calls: int) -> None:
    """Parameter Store stalls (`stall`: the request never answered) or throttles every call
    (`throttle`: 400 ThrottlingException), and `calls` requests go through the authorizer
    handler itself with a client token of the namespace; then SSM answers again.

    Before the stall the token is minted and the listing read once with SSM answering (the
    container's last good listing holds it). While SSM fails each request must be allowed, for
    the namespace, within SSM_ANSWER_S, never an authorizer error (API Gateway's 500 for every
    caller): `ssm_stall_answer`. Once SSM answers again a request must be answered from a
    listing read again, not the stale one, within SSM_RECOVER_S: `ssm_not_recovered`. The
    authorizer is called in this thread with no Redis or S3 call of the scheduler's between:
    the operation runs whole, so no parking adds to the time measured. The stall is undone and
    the token revoked whatever happens (the other operations' SSM calls go through the same
    proxy)."""
    import time

    from payloadstore_controlplane.handlers import authorizer
    from payloadstore_controlplane.store.tokens import TokenStoreError

    proxy = m.ssm
    if proxy is None:
        return
    failing = "stalled" if how == "stall" else "throttled"
    store = authorizer.token_store()
    with unhooked():
        try:
            token, info = store.mint(m.namespace, "client")
        except Exception:  # noqa: BLE001 - the emulator slow on a loaded machine: no change
            return
        stale: list[str] = []
        metric = getattr(store, "on_stale", None)  # (none on a tree before issue 43)

        def on_stale(age_s: float, why: str) -> None:
            stale.append(why)
            if metric is not None:
                metric(age_s, why)

        store.on_stale = on_stale
        try:
            try:
                listed = {t.token_id for t in store.list()}
            except TokenStoreError:
                return  # no listing with SSM answering: nothing to fall back on, no stall
            if info.token_id not in listed:
                return
            proxy.mode = how
            try:
                for i in range(calls):
                    answer, took = _authorize(authorizer, token)
                    context = answer.get("context", {}) if isinstance(answer, dict) else {}
                    if context.get("namespace") != m.namespace or took >= SSM_ANSWER_S:
                        m.violation(
                            "ssm_stall_answer",
                            f"request {i + 1} of {calls} with SSM {failing} answered in "
                            f"{took:.2f} s (at most {SSM_ANSWER_S} s): {answer!r:.300}",
                        )
                        return
                if not stale:
                    m.violation(
                        "ssm_stall_answer",
                        f"SSM {failing}, yet no request was answered from the last good listing",
                    )
                    return
            finally:
                proxy.release()
            until = time.monotonic() + SSM_RECOVER_S
            while True:
                before = len(stale)
                answer, took = _authorize(authorizer, token)
                context = answer.get("context", {}) if isinstance(answer, dict) else {}
                if context.get("namespace") == m.namespace and len(stale) == before:
                    return
                if time.monotonic() >= until:
                    m.violation(
                        "ssm_not_recovered",
                        f"{SSM_RECOVER_S} s after SSM {failing} and answered again, the "
                        f"authorizer still answers from the stale listing: {answer!r:.300}",
                    )
                    return
                time.sleep(0.05)
        finally:
            proxy.release()
            store.on_stale = metric
            # (a token left over, the emulator slow, is one more in the listing: no harm)
            with contextlib.suppress(Exception):
                store.revoke(token)


def _authorize(authorizer: Any, token: str) -> tuple[Any, float]:
    """The authorizer handler's answer for an API Gateway REQUEST event with `token` (or what
    it raised: an authorizer error), and the wall time it took."""
    import copy
    import time

    from tests.support.events import FakeLambdaContext, load_event

    event = copy.deepcopy(load_event("authorizer_request"))
    event["headers"] = {"Authorization": f"Bearer {token}"}
    started = time.monotonic()
    try:
        answer: Any = authorizer.lambda_handler(event, FakeLambdaContext())
    except Exception as e:  # noqa: BLE001 - an authorizer error: judged by the caller
        answer = e
    return answer, time.monotonic() - started


def settings(m: Model, name: str, value: str) -> None:
    """A deploy with one setting changed, within what the settings allow: every container of
    the control plane starts anew with it (settings, clients, caches), while the operations in
    flight finish on the containers they started on, as they would on AWS."""
    import os

    from payloadstore_controlplane.models.settings import Settings

    try:
        Settings.from_env({**os.environ, name: value})
    except Exception:  # noqa: BLE001 - not a value the settings allow beside the others
        return
    assert m.deploy is not None
    m.deploy({name: value})
    if name == "RESULT_TTL_S":
        m.result_ttl_s = float(value)
        m.shorten_promises(float(value))


# -- daemons -----------------------------------------------------------------------------------


def poll(m: Model, daemon: str, queues: list[str], max_jobs: int | None) -> None:
    body: dict[str, Any] = {
        "namespace": m.namespace,
        "queues": queues,
        "wait_s": 0,
        "daemon_id": daemon,
    }
    if max_jobs:
        body["max_jobs"] = max_jobs
    r = _no_5xx(m, "poll", m.cp.call("daemon", "POST", "/v1/daemon/poll", role="daemon", body=body))
    if r.status != 200:
        return
    _told(m, daemon, r.json.get("jobs", [r.json]), r)


def _told(m: Model, daemon: str, deliveries: list[dict], r: Reply) -> None:
    """The daemon holds what it was told; an answer over Lambda's limit never reaches it (API
    Gateway answers 502): its deliveries are leased but never told."""
    if r.proxy_bytes > LAMBDA_RESPONSE_LIMIT:
        return
    for d in deliveries:
        m.held[daemon].append(Held(d["job_id"], d["lease"], d["attempt"], daemon))
        m.told[d["job_id"]] = m.told.get(d["job_id"], 0) + 1
        _check_delivery(m, d)


def _check_delivery(m: Model, d: dict) -> None:
    """A job runs with its own arguments and its full blob list."""
    job_id = d["job_id"]
    intent = m.intent(job_id)
    if intent is None and d.get("payloadInline"):
        head = base64.b64decode(d["payloadInline"])[:200].split(b"\n", 1)[0]
        label = head.decode(errors="replace")
        intent = m.by_label.get(label.removeprefix("inline:"))
        if intent is not None and intent.job_id is None:
            intent.job_id = job_id
    if intent is None:
        m.violation("phantom", f"delivered job {job_id} was never enqueued")
        return
    if intent.refused and not intent.acked:
        m.violation("refused_job_ran", f"job {job_id} delivered after its enqueue was refused")
    got = sorted(b["sha256"] for b in d.get("blobs") or [])
    if got != sorted(intent.blobs):
        m.violation(
            "blob_list",
            f"job {job_id} ({intent.tier}, enqueued with {len(intent.blobs)} blobs) delivered "
            f"(attempt {d['attempt']}) with {len(got)}",
        )
    if intent.tier == "inline":
        got_args = base64.b64decode(d.get("payloadInline") or "")
        if got_args != intent.inline:
            m.violation("arguments", f"inline job {job_id} delivered with other arguments")
    elif not (d.get("payloadRef") or {}).get("key", "").endswith(f"{job_id}/args"):
        m.violation("arguments", f"S3 job {job_id} delivered without its args key: {d}")


def _held(m: Model, daemon: str, hold: int, *, keep: bool) -> Held | None:
    held = m.held[daemon]
    if not held:
        return None
    h = held[hold % len(held)]
    if not keep:
        held.remove(h)
    return h


def _policy_refusal(r: Reply) -> bool:
    """A namespace policy changed under the call (docs/wire.md "Namespace policies"): inline
    refused, or an object uploaded under the earlier policy. Nothing was written: not a race."""
    return r.status == 409 and r.error.get("code") in ("inline_never", "policy_mismatch")


def _current_lease_refused(m: Model, h: Held, what: str, r: Reply) -> None:
    """A refusal is a violation when the job still says this delivery holds it."""
    if r.status < 400 or r.status >= 500 or _policy_refusal(r) or _over_a_limit(r):
        return
    from payloadstore_controlplane.store import keys

    with unhooked():
        f = m.redis.hmget(keys.job(h.job_id), ["s", "lt"])
    if f[0] == b"running" and f[1] == h.lease.encode():
        m.violation(
            "lease_holder_refused",
            f"{what} by the current delivery (attempt {h.attempt}, {h.daemon}) of job "
            f"{h.job_id} answered {r.status}: {r.raw_body[:240]}",
        )


def beat(m: Model, daemon: str, hold: int) -> None:
    h = _held(m, daemon, hold, keep=True)
    if h is None:
        return
    r = _no_5xx(m, "heartbeat", heartbeat(m.cp, h.job_id, {"lease": h.lease}))
    _current_lease_refused(m, h, "heartbeat", r)
    if r.status == 409 and h in m.held[daemon]:
        m.held[daemon].remove(h)


def renew(m: Model, daemon: str) -> None:
    """The daemon's leases long-poll (wait 0): every delivery it holds renewed in one call. A
    delivery answered `lost` is dropped (the daemon stops); one the job hash still says is
    current must not be."""
    if not m.held[daemon]:
        return
    # One lease per job, its newest delivery's, as a daemon's lease keeper holds one delivery
    # per job. Two polls of one daemon in flight at once (the explorer's daemons, not the
    # SDK's single poller) can hold a job twice, the older answered last: a request naming
    # that stale lease is answered `lost`, rightly, and says nothing of the newer delivery.
    newest: dict[str, Held] = {}
    for h in m.held[daemon]:
        if h.job_id not in newest or h.attempt > newest[h.job_id].attempt:
            newest[h.job_id] = h
    held = list(newest.values())
    r = _no_5xx(m, "leases", leases(m.cp, daemon, {h.job_id: h.lease for h in held}))
    if r.status == 503:
        # Redis unreachable or full (a cut connection, maxmemory): `_no_5xx` checked its
        # Retry-After; the daemon renews again at its next round, as after any failed call.
        return
    if r.status != 200:
        m.violation("refused", f"leases of {daemon} answered {r.status}: {r.raw_body[:240]}")
        return
    lost = set(r.json.get("lost") or ())
    for h in held:
        if h.job_id not in lost:
            continue
        lost_reply = json.dumps({"error": {"code": "lost", "message": "answered lost"}})
        _current_lease_refused(m, h, "leases renewal", Reply(409, {}, lost_reply, 0))
        if h in m.held[daemon]:
            m.held[daemon].remove(h)


def finish(m: Model, daemon: str, hold: int, how: str, next: int = 0) -> None:
    """The held delivery ends: inline | s3 | multipart result, error, payload_lost,
    cancelled (the error type a daemon posts after a cancel request). `next` > 0: the post asks
    for that many next deliveries (result-and-next), which the daemon then holds.

    A result post refused `policy_mismatch` (the namespace's policy changed since the upload)
    is stored again under the policy now and posted once more, as the SDK's daemon does; a
    delivery whose lease still holds must then have its result stored (`result_stranded`).
    An error text or failure detail sent while the namespace's policy is inline `never` (from
    before the post to its answer) must not rest in Redis (`inline_never_in_redis`)."""
    h = _held(m, daemon, hold, keep=False)
    if h is None:
        return
    cp = m.cp
    body: dict[str, Any] = {"lease": h.lease}
    never_before = _inline_never(m)
    gen_before = m.policy_gen
    text = f"explorer error text of {h.job_id} attempt {h.attempt}".encode()
    if how in ("s3", "multipart"):
        ref = _store_result(m, h, how)
        if ref is None:
            return
        body["resultRef"] = ref
    elif how == "inline":
        body["resultInline"] = base64.b64encode(b"ok").decode()
    elif how in ("error", "cancelled"):
        body["error"] = {
            "type": "Cancelled" if how == "cancelled" else "ValueError",
            "message": text.decode(),
            "traceback": "Traceback (most recent call last):\n  " + text.decode(),
        }
    ask = {"queues": ["q1"], "max_jobs": next, "wait_s": 0, "daemon_id": daemon} if next else None
    if how == "payload_lost":
        report: dict[str, Any] = {
            "lease": h.lease,
            "state": "payload_lost",
            "detail": text.decode(),
        }
        if ask:
            report["next"] = ask
        m.reported_lost.add(h.job_id)
        r = _resent_on_503(m, "payload_lost", lambda: cp.report(h.job_id, report))
        _current_lease_refused(m, h, "payload_lost report", r)
    else:
        if ask:
            body["next"] = ask
        r = _resent_on_503(m, f"result {how}", lambda: cp.post_result(h.job_id, body))
        if (
            how in ("s3", "multipart")
            and r.status == 409
            and r.error.get("code") == ("policy_mismatch")
        ):
            gen = m.policy_gen
            ref = _store_result(m, h, how, again=True)
            if ref is None:
                return
            body["resultRef"] = ref
            r = _resent_on_503(m, f"result {how} again", lambda: cp.post_result(h.job_id, body))
            if _policy_refusal(r) and m.policy_gen == gen:
                _still_holds_then(
                    m,
                    h,
                    "result_stranded",
                    f"result post ({how}) stored again under the policy now answered "
                    f"{r.status} {r.error.get('code')}",
                )
        _current_lease_refused(m, h, f"result post ({how})", r)
        # (a post days passed under: its job may be gone by design)
        if (
            r.status in (200, 204)
            and how in ("inline", "s3", "multipart")
            and not (_days_passed_under())
        ):
            m.succeeded.setdefault(h.job_id, m.clock())
    if (
        how in ("error", "cancelled", "payload_lost")
        and r.status in (200, 204)
        and never_before
        and m.policy_gen == gen_before
    ):
        m.never_texts.append(text)
        where = _redis_holding(m, text)
        if where:
            m.violation(
                "inline_never_in_redis",
                f"the {how} of job {h.job_id}, posted while its namespace's policy is inline "
                f"never, rests in Redis: {where}",
            )
    if r.status == 200 and ask:
        _told(m, daemon, r.json["jobs"], r)


def _inline_never(m: Model) -> bool:
    return m.policy is not None and m.policy.inline == "never"


def _redis_holding(m: Model, needle: bytes) -> str | None:
    """The first key of the whole Redis state whose value holds `needle` (None: none does)."""
    r = m.redis
    with unhooked():
        if hasattr(r, "get_primaries"):
            keys = list(r.scan_iter(count=1000, target_nodes=r.PRIMARIES))
        else:
            keys = list(r.scan_iter(count=1000))
        for key in keys:
            kind = r.type(key)
            if kind == b"string":
                values = [r.get(key) or b""]
            elif kind == b"hash":
                values = list(r.hgetall(key).values())
            elif kind == b"list":
                values = r.lrange(key, 0, -1)
            elif kind == b"set":
                values = list(r.smembers(key))
            elif kind == b"zset":
                values = r.zrange(key, 0, -1)
            elif kind == b"stream":
                values = [v for _, f in r.xrange(key) for v in f.values()]
            else:
                continue
            if any(needle in v for v in values if isinstance(v, bytes)):
                return key.decode("latin-1")
    return None


def _still_holds_then(m: Model, h: Held, kind: str, detail: str) -> None:
    """A violation `kind` when the job still says this delivery holds it."""
    from payloadstore_controlplane.store import keys

    with unhooked():
        f = m.redis.hmget(keys.job(h.job_id), ["s", "lt"])
    if f[0] == b"running" and f[1] == h.lease.encode():
        m.violation(kind, f"job {h.job_id} (attempt {h.attempt}, {h.daemon}): {detail}")


def _store_result(m: Model, h: Held, how: str, again: bool = False) -> dict | None:
    """Upload a result (s3: one PUT; multipart: in parts) through a presign for this delivery:
    its reference, or None. `again`: the second upload after a refusal for a policy change,
    which must succeed while the lease holds (`result_stranded`)."""
    cp = m.cp
    data = _bytes_of(f"result-{h.job_id}-{h.attempt}", 1024 if how == "s3" else MULTIPART_SIZE)
    sha = sha256_hex(data) if how == "s3" else None
    r = _no_5xx(
        m,
        "result presign",
        cp.presign_put(len(data), role="daemon", job_id=h.job_id, sha256=sha, lease=h.lease),
    )
    _current_lease_refused(m, h, "result presign", r)
    if r.status != 200:
        return None
    if how == "s3":
        if _put(r.json, data) != 200:
            if again:
                _still_holds_then(m, h, "result_stranded", "its result upload was refused")
            else:
                m.violation("refused", "result upload refused")
            return None
    elif not _upload_parts_daemon(m, cp, r.json, data, h, again=again):
        return None
    return {"bucket": r.json["bucket"], "key": r.json["key"], "size": len(data)}


def _upload_parts_daemon(
    m: Model, cp: ControlPlane, presigned: dict, data: bytes, h: Held, again: bool = False
) -> bool:
    mp = presigned["multipart"]
    size = mp["part_bytes"]
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    r = _no_5xx(
        m,
        "result parts",
        cp.call(
            "payloads",
            "POST",
            "/v1/namespaces/{ns}/payloads/parts",
            {"ns": cp.ns},
            role="daemon",
            body={
                "job_id": h.job_id,
                "kind": "result",
                "lease": h.lease,
                "parts": [
                    {"number": n, "size": len(c), "sha256": sha256_hex(c)}
                    for n, c in enumerate(chunks, 1)
                ],
            },
        ),
    )
    _current_lease_refused(m, h, "result parts", r)
    if r.status != 200:
        return False
    for url, chunk in zip(r.json["parts"], chunks, strict=True):
        if _put(url, chunk) != 200:
            if again:
                _still_holds_then(
                    m,
                    h,
                    "result_stranded",
                    f"a part of its result's upload {presigned['multipart'].get('upload_id')} "
                    "was refused (presigned again after a policy change)",
                )
            else:
                m.violation("refused", "a result part upload was refused")
            return False
    return True


def forget(m: Model, daemon: str, hold: int) -> None:
    """The daemon dies with the delivery (its lease will lapse)."""
    _held(m, daemon, hold, keep=False)


# -- the catalogue -----------------------------------------------------------------------------

# name -> (actor kind, function); parameters are the decision's keyword arguments.
OPERATIONS: dict[str, Callable[..., None]] = {
    "enqueue": enqueue,
    "enqueue_again": enqueue_again,
    "cancel": cancel_job,
    "retry": retry,
    "status": status,
    "view": view,
    "blob": create_blob,
    "purge": purge,
    "redrive": redrive,
    "policy": policy,
    "settings": settings,
    "memory": memory,
    "ssm": ssm,
    "poll": poll,
    "heartbeat": beat,
    "leases": renew,
    "finish": finish,
    "forget": forget,
}


def describe(name: str, params: dict) -> str:
    return f"{name}({', '.join(f'{k}={json.dumps(v)}' for k, v in params.items())})"
