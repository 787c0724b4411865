"""Bearer tokens: random, shown once, stored only as sha256 hashes in SSM Parameter Store.

Layout: one String parameter per token, `<TOKEN_PARAMETER_PATH>/<sha256 hex of the token>`,
whose value is `{"namespace": ..., "role": ..., "created_at": ...}`. A hash is not a secret
(the token has 256 random bits), so no SecureString/KMS is needed; revocation is a delete.
The authorizer reads the whole path once per TOKEN_CACHE_S (the refresh interval) and only
then. A token the listing does not know is looked up by name: one GetParameter of
`<path>/<its hash>`, so a token minted a second ago works at once. The answer is cached, a
found token for TOKEN_CACHE_S, an unknown hash for NEGATIVE_CACHE_S; and by-name reads are
rationed per container (MISS_READS_PER_S, bursts of MISS_READ_BURST), so a flood of junk tokens
costs SSM a bounded number of calls (SSM's Get* APIs share one account-wide rate, ~40 TPS by
default) while every known token keeps working from the listing. A token first seen while the
ration is spent is refused (401) until the next listing or a later lookup. A revoked token
stops working within TOKEN_CACHE_S plus API Gateway's authorizer cache TTL (see
docs/operations.md, "Revoking a token").

SSM failing or throttled (issue 43): no reader waits on a silent SSM longer than SSM_WAIT_S.
The listing is refreshed by a thread of its own; a caller waits for it at most SSM_WAIT_S (one
with no listing to fall back on, for as long as its pages keep coming, each within SSM_WAIT_S),
and past that (or when the refresh failed) answers from the last good listing while it is younger than
TOKEN_CACHE_S + TOKEN_STALE_MAX_S (`on_stale` is told: the authorizer's TokenListingStale
metric). After a failed read SSM is left alone for RETRY_AFTER_FAILURE_S, so a stall costs one
wait per container, not one per request. With no usable listing (a cold container, or one past
the stale bound), and for by-name reads and the admin's reads, a read that does not answer
within SSM_WAIT_S raises TokenStoreUnavailable. While stale, a revoked token keeps working and
a token minted since is not known (docs/operations.md, "When SSM fails").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..models.policy import POLICY_PARAMETER_PREFIX, NamespacePolicy, validate_policy
from ..runtime.once import built_once

TOKEN_PREFIX = "pst_"
# How long an unknown hash is remembered as unknown (a junk token sent again costs nothing).
NEGATIVE_CACHE_S = 10.0
# By-name reads (GetParameter) for tokens the listing does not know, per container: a token
# bucket of MISS_READ_BURST refilled at MISS_READS_PER_S.
MISS_READS_PER_S = 2.0
MISS_READ_BURST = 10
# Remembered by-name answers per container, at most (junk hashes past it push out the oldest).
MAX_BY_NAME = 4096
NOT_FOUND = "ParameterNotFound"
# How long one request waits for SSM at most (the authorizer answers within 1 s).
SSM_WAIT_S = 0.7
# A caller with no listing to fall back on waits for the read while its pages keep coming
# (each within SSM_WAIT_S), at most this long in all.
LISTING_WAIT_MAX_S = 10.0
# All the SSM waits of one authorizer request together.
REQUEST_BUDGET_S = 0.8
# After a failed read, SSM is not asked again for this long (per container).
RETRY_AFTER_FAILURE_S = 5.0
# A refresh still running after this long is given up on, and a new one started.
REFRESH_GIVE_UP_S = 30.0
# How long past TOKEN_CACHE_S the last good listing answers while SSM fails (TOKEN_STALE_MAX_S).
DEFAULT_STALE_MAX_S = 900
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ROLES = ("client", "daemon")


@dataclass(frozen=True)
class TokenInfo:
    namespace: str
    role: str
    token_id: str  # first 12 hex chars of the hash: safe to log, enough to revoke


class TokenStoreError(RuntimeError):
    pass


class TokenStoreUnavailable(TokenStoreError):
    """SSM failed, throttled or did not answer within SSM_WAIT_S, and nothing else answers."""


class _Read:
    """One read of SSM on a thread of its own: its answer, or its error, once `done` is set."""

    def __init__(self, started: float):
        self.started = started
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


def _in_thread(fn: Callable[[], Any], started: float) -> _Read:
    read = _Read(started)

    def run() -> None:
        try:
            read.value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on it
            read.error = e
        finally:
            read.done.set()

    threading.Thread(target=run, name="ssm-read", daemon=True).start()
    return read


def bounded(fn: Callable[[], Any], what: str, wait_s: float = SSM_WAIT_S) -> Any:
    """fn()'s answer if it comes within wait_s; TokenStoreUnavailable otherwise (the thread is
    left to finish on its own: its socket timeouts end it)."""
    read = _in_thread(fn, time.monotonic())
    if not read.done.wait(wait_s):
        raise TokenStoreUnavailable(f"SSM did not answer {what} within {wait_s:g} s")
    if read.error is not None:
        raise read.error
    return read.value


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id_of(token_hash: str) -> str:
    return token_hash[:12]


class TokenStore:
    def __init__(
        self,
        ssm_client: Any,
        path: str,
        cache_s: int = 60,
        *,
        stale_max_s: float = DEFAULT_STALE_MAX_S,
        on_stale: Callable[[float, str], None] | None = None,
        ssm_wait_s: float = SSM_WAIT_S,
    ):
        self._ssm = ssm_client
        self._path = path.rstrip("/")
        self._cache_s = cache_s
        # The last good listing answers this long past cache_s while SSM fails.
        self._stale_max_s = stale_max_s
        # How long a caller waits on a silent SSM (an operator's CLI, not behind API Gateway,
        # may wait longer than a request).
        self._wait_s = ssm_wait_s
        # Told (listing's age in s, why) each time the last good listing answers instead of SSM.
        self.on_stale = on_stale
        # The listing's refresh under way (or the last one), and when SSM may be asked again.
        self._refresh: _Read | None = None
        self._retry_at = 0.0
        # When the refresh under way last got a page: a listing of many pages that still
        # progresses is slow, not stalled (no stale answer is counted meanwhile).
        self._page_at = 0.0
        self._cache: tuple[float, dict[str, dict]] | None = None
        self._policies: dict[str, NamespacePolicy] = {}
        # hash -> (read at, value or None for unknown): the by-name lookups' answers.
        self._by_name: dict[str, tuple[float, dict | None]] = {}
        self._ration = float(MISS_READ_BURST)
        self._ration_at = time.monotonic()
        self._by_name_lock = threading.Lock()
        # One read of SSM at a time: callers arriving during a read take its answer.
        self._load_lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    def _parameter_name(self, token_hash: str) -> str:
        return f"{self._path}/{token_hash}"

    def mint(self, namespace: str, role: str) -> tuple[str, TokenInfo]:
        """Create a token; the plain token is returned here and never stored."""
        if not NAMESPACE_RE.match(namespace):
            raise TokenStoreError(f"invalid namespace {namespace!r}: use [a-z0-9_-], 1-63 chars")
        if role not in ROLES:
            raise TokenStoreError(f"invalid role {role!r}: one of {', '.join(ROLES)}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_hash = hash_token(token)
        value = {"namespace": namespace, "role": role, "created_at": int(time.time())}
        self._ssm.put_parameter(
            Name=self._parameter_name(token_hash),
            Value=json.dumps(value, separators=(",", ":")),
            Type="String",
            Overwrite=False,
            Description=f"payloadstore {role} token for namespace {namespace}",
        )
        return token, TokenInfo(namespace, role, token_id_of(token_hash))

    def revoke(self, token_or_id: str) -> int:
        """Delete a token given the token itself or its id (hash prefix). Returns how many went."""
        if token_or_id.startswith(TOKEN_PREFIX):
            names = [self._parameter_name(hash_token(token_or_id))]
        else:
            if not re.fullmatch(r"[0-9a-f]{8,64}", token_or_id):
                raise TokenStoreError("give the token or its id (hex prefix of its hash, 8+ chars)")
            # The listing read as the authorizer's is (waited for while its pages come).
            listed = [self._parameter_name(h) for h in self._load(force=True)]
            names = [n for n in listed if n.rsplit("/", 1)[-1].startswith(token_or_id)]
        removed = 0
        for name in names:
            try:
                self._ssm.delete_parameter(Name=name)
                removed += 1
            except self._ssm.exceptions.ParameterNotFound:
                pass
        return removed

    def list(self) -> list[TokenInfo]:
        return [
            TokenInfo(v["namespace"], v["role"], token_id_of(h))
            for h, v in self._load(force=True).items()
        ]

    def _load(self, force: bool = False, *, quiet: bool = False) -> dict[str, dict]:
        """Every stored token, {hash: value}, read from SSM at most once per cache_s. Read with
        the client's own paginator (Powertools' SSMProvider would import boto3 at cold start),
        on a thread of its own: a caller waits for it at most SSM_WAIT_S, then answers from the
        last good listing within its bound, or raises TokenStoreUnavailable (module docstring).
        `force` (the admin's list) never answers a listing older than the call. A read is
        waited for until SSM_WAIT_S after it started, whoever waits: callers that come later
        while it hangs answer at once. `quiet`: a second look in the same request (its policy),
        not told to `on_stale` again."""
        asked_at = time.monotonic()
        if not force and self._fresh(asked_at):
            return self._cache[1]  # type: ignore[index]  # _fresh() is true only with a cache
        read = self._start_refresh(asked_at, force)
        if read is not None:
            self._wait(read, progressing=self._cache is None or force)
            if read.done.is_set() and read.error is None:
                return read.value
        cached = self._cache
        if force or cached is None or asked_at - cached[0] >= self._cache_s + self._stale_max_s:
            if read is not None and read.done.is_set() and read.error is not None:
                raise TokenStoreUnavailable(f"SSM failed: {read.error}") from read.error
            raise TokenStoreUnavailable(
                f"SSM did not answer within {self._wait_s:g} s and no listing is usable"
            )
        if cached[0] >= asked_at:
            return cached[1]
        why = "slow" if read is not None and not read.done.is_set() else "failed"
        if why == "slow" and time.monotonic() - self._page_at < self._wait_s:
            return cached[1]  # pages still come: a long listing, not a stall
        if self.on_stale is not None and not quiet:
            self.on_stale(asked_at - cached[0], why)
        return cached[1]

    def _wait(self, read: _Read, *, progressing: bool) -> None:
        """Wait for the read until SSM_WAIT_S after it started; with `progressing` (no listing
        to answer from otherwise), for as long as its pages keep coming, each within
        SSM_WAIT_S, up to LISTING_WAIT_MAX_S: a stalled SSM still ends the wait in SSM_WAIT_S."""
        read.done.wait(max(read.started + self._wait_s - time.monotonic(), 0.0))
        while progressing and not read.done.is_set():
            now = time.monotonic()
            cap = max(LISTING_WAIT_MAX_S, self._wait_s)
            left = min(self._page_at + self._wait_s, read.started + cap) - now
            if left <= 0:
                return
            read.done.wait(left)

    def _start_refresh(self, asked_at: float, force: bool) -> _Read | None:
        """The listing's read to wait for: the one under way, or a new one; None while SSM is
        left alone after a failure (RETRY_AFTER_FAILURE_S), unless `force`."""
        with self._load_lock:
            read = self._refresh
            if read is not None and not read.done.is_set():
                fresh_enough = not force or read.started >= asked_at
                if fresh_enough and asked_at - read.started < REFRESH_GIVE_UP_S:
                    return read
            elif read is not None and read.error is None and read.started >= asked_at:
                return read  # a read that started after this call is fresh enough
            if not force and asked_at < self._retry_at:
                return None
            now = time.monotonic()
            self._page_at = now
            self._refresh = _in_thread(lambda: self._read_or_back_off(now), now)
            return self._refresh

    def _ssm_failing(self, now: float) -> bool:
        """SSM failed a moment ago (its reads are left alone for RETRY_AFTER_FAILURE_S)."""
        return now < self._retry_at

    def _read_or_back_off(self, now: float) -> dict[str, dict]:
        try:
            return self._read(now)
        except BaseException:
            self._retry_at = time.monotonic() + RETRY_AFTER_FAILURE_S
            raise

    def _fresh(self, now: float | None = None) -> bool:
        cached = self._cache
        now = time.monotonic() if now is None else now
        return cached is not None and now - cached[0] < self._cache_s

    def _read(self, now: float) -> dict[str, dict]:
        """Every token, and (beside them, `policy.<namespace>`) every namespace's policy."""
        values: dict[str, dict] = {}
        policies: dict[str, NamespacePolicy] = {}
        paginator = self._ssm.get_paginator("get_parameters_by_path")
        for page in paginator.paginate(Path=self._path):
            self._page_at = time.monotonic()
            for parameter in page.get("Parameters", []):
                try:
                    value = json.loads(parameter["Value"])
                except (KeyError, ValueError):
                    continue  # not one of ours: never a match
                if not isinstance(value, dict):
                    continue
                name = parameter["Name"].rsplit("/", 1)[-1]
                if name.startswith(POLICY_PARAMETER_PREFIX):
                    policies[name[len(POLICY_PARAMETER_PREFIX) :]] = NamespacePolicy.from_stored(
                        value
                    )
                elif "namespace" in value and "role" in value:
                    values[name] = value
        with self._by_name_lock:
            # A read given up on (REFRESH_GIVE_UP_S) that ends after a newer one keeps out.
            if self._cache is None or self._cache[0] <= now:
                self._policies = policies
                self._cache = (now, values)
        return values

    # -- namespace policies (models/policy.py), kept beside the tokens -------------------------

    def policy(self, namespace: str) -> NamespacePolicy:
        """The namespace's policy, read with the tokens (the same listing, the same cache);
        the defaults when none was set."""
        self._load(quiet=True)
        return self._policies.get(namespace, NamespacePolicy())

    def read_policy(self, namespace: str, *, wait_s: float | None = None) -> NamespacePolicy:
        """The namespace's stored policy, read now (GetParameter), for the admin's answers."""
        if not NAMESPACE_RE.match(namespace or ""):
            raise TokenStoreError(f"invalid namespace {namespace!r}: use [a-z0-9_-], 1-63 chars")
        try:
            answer = bounded(
                lambda: self._ssm.get_parameter(Name=self._policy_name(namespace)),
                "the policy read",
                self._wait_s if wait_s is None else wait_s,
            )
        except TokenStoreUnavailable:
            raise
        except Exception as e:
            if _error_code(e) == NOT_FOUND or type(e).__name__ == NOT_FOUND:
                return NamespacePolicy()
            raise
        try:
            value = json.loads(answer["Parameter"]["Value"])
        except (KeyError, TypeError, ValueError):
            return NamespacePolicy()
        return NamespacePolicy.from_stored(value if isinstance(value, dict) else {})

    def set_policy(
        self,
        namespace: str,
        *,
        retention: str | None = None,
        kms_key: str | None = None,
        inline: str | None = None,
        stack_key_arn: str | None = None,
        granted_keys: tuple[str, ...] = (),
    ) -> NamespacePolicy:
        """The fields given, over the namespace's current policy, validated and written (a bad
        value raises PolicyError and writes nothing). Returns the policy now in force."""
        current = self.read_policy(namespace)
        policy = validate_policy(
            current.retention if retention is None else retention,
            current.kms_key if kms_key is None else kms_key,
            current.inline if inline is None else inline,
            granted_keys=granted_keys,
            stack_key_arn=stack_key_arn,
        )
        if policy != current:
            self.write_policy(namespace, policy)
        return policy

    def write_policy(self, namespace: str, policy: NamespacePolicy) -> None:
        if not NAMESPACE_RE.match(namespace or ""):
            raise TokenStoreError(f"invalid namespace {namespace!r}: use [a-z0-9_-], 1-63 chars")
        self._ssm.put_parameter(
            Name=self._policy_name(namespace),
            Value=json.dumps(policy.as_dict(), separators=(",", ":")),
            Type="String",
            Overwrite=True,
            Description=f"payloadstore policy of namespace {namespace}",
        )
        self._cache = None  # this process's next read sees it

    def _policy_name(self, namespace: str) -> str:
        return f"{self._path}/{POLICY_PARAMETER_PREFIX}{namespace}"

    def lookup(self, token: str, deadline: float | None = None) -> TokenInfo | None:
        """The token's namespace and role, or None. The final compare is constant time.

        The listing (read at most once per cache_s) answers for every token it holds; a token
        it does not know is read by name (one GetParameter), within the per-container ration,
        and the answer, found or not, is remembered (see the module docstring). The by-name
        read ends by `deadline` (time.monotonic(): the request's SSM budget)."""
        if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 128:
            return None
        presented = hash_token(token)
        match = _match(presented, self._load())
        if match is None:
            match = self._by_name_lookup(presented, deadline)
        if match is None:
            return None
        return TokenInfo(match["namespace"], match["role"], token_id_of(presented))

    def _by_name_lookup(self, presented: str, deadline: float | None = None) -> dict | None:
        now = time.monotonic()
        with self._by_name_lock:
            known = self._by_name.get(presented)
            if known is not None:
                at, value = known
                if now - at < (self._cache_s if value is not None else NEGATIVE_CACHE_S):
                    return value
            if not self._take_ration(now):
                return None
        value = self._read_one(presented, _left(deadline, self._wait_s))
        with self._by_name_lock:
            if len(self._by_name) >= MAX_BY_NAME:
                for stale in list(self._by_name)[: MAX_BY_NAME // 4]:
                    del self._by_name[stale]
            self._by_name[presented] = (time.monotonic(), value)
        return value

    def _take_ration(self, now: float) -> bool:
        self._ration = min(
            float(MISS_READ_BURST), self._ration + (now - self._ration_at) * MISS_READS_PER_S
        )
        self._ration_at = now
        if self._ration < 1.0:
            return False
        self._ration -= 1.0
        return True

    def _read_one(self, token_hash: str, wait_s: float | None = None) -> dict | None:
        """The one parameter named by the hash (GetParameter), or None when there is none.
        Within SSM_WAIT_S, and not at all while SSM is left alone after a failure:
        TokenStoreUnavailable (whether the token exists is not known)."""
        if self._ssm_failing(time.monotonic()):
            raise TokenStoreUnavailable("SSM is failing: a token not listed is not known")
        try:
            answer = bounded(
                lambda: self._ssm.get_parameter(Name=self._parameter_name(token_hash)),
                "a token read",
                self._wait_s if wait_s is None else wait_s,
            )
        except TokenStoreUnavailable:
            raise
        except Exception as e:
            if _error_code(e) == NOT_FOUND:
                return None
            raise TokenStoreUnavailable(f"SSM failed: {e}") from e
        try:
            value = json.loads(answer["Parameter"]["Value"])
        except (KeyError, TypeError, ValueError):
            return None
        if not isinstance(value, dict) or "namespace" not in value or "role" not in value:
            return None
        return value


def _left(deadline: float | None, at_most: float) -> float:
    """What is left of a request's SSM budget, at most `at_most` (a little, once it is spent:
    a read that answers at once still answers)."""
    if deadline is None:
        return at_most
    return min(max(deadline - time.monotonic(), 0.01), at_most)


def _error_code(e: Exception) -> str:
    """The AWS error code of botocore's ClientError or aws_http's AwsRequestError."""
    code = getattr(e, "code", "")
    if not code:
        code = (getattr(e, "response", None) or {}).get("Error", {}).get("Code", "")
    return str(code)


def _match(presented: str, stored: dict[str, dict]) -> dict | None:
    # Compare against every stored hash in constant time rather than a dict lookup, so the
    # time taken says nothing about how close a guess came. Tokens number in the hundreds.
    match: dict | None = None
    for stored_hash, entry in stored.items():
        if hmac.compare_digest(stored_hash, presented):
            match = entry
    return match


@built_once(maxsize=8)
def process_token_store(
    path: str, cache_s: int, stale_max_s: float = DEFAULT_STALE_MAX_S
) -> TokenStore:
    """This process's token store: one SSM client and one cache, whichever handler instance asks.

    The client reads the tokens with one SigV4-signed HTTPS request of its own (store/aws_http.py:
    botocore's import and SSM model cost ~0.25 s of CPU at cold start, for that one call) when
    the environment holds the region and the keys, as Lambda's does; otherwise, and for the
    admin function's writes, it is botocore's (not boto3: ~0.1 s fewer imports)."""
    from .aws_http import SsmHttpClient

    client = SsmHttpClient.from_environment()
    if client is None:
        import botocore.session

        return TokenStore(
            botocore.session.get_session().create_client("ssm"),
            path,
            cache_s,
            stale_max_s=stale_max_s,
        )
    return TokenStore(client, path, cache_s=cache_s, stale_max_s=stale_max_s)
