"""Reserved concurrency of the long-poll functions: one decision for `make deploy`'s preflight
(infra/preflight.py), the CDK stack and the local gateway (issues 23 and 32).

Every waiting daemon poll and every `result?wait` holds one Lambda execution for up to its wait.
Unbounded, enough idle daemons take the account's whole concurrency and every route fails, the
authorizer and health included. Reserved concurrency on `daemon` and `jobs` is also their cap:
past it Lambda throttles them alone, and the rest of the account's pool stays for the authorizer
and the short routes (payloads, public, admin, metrics).

But a reservation is the account's, taken whether the functions run or not, and AWS refuses one
that leaves fewer than 100 executions of the account unreserved: on a new account (limits of 10
or a few hundred) or beside a stage that already reserves, a fixed split fails CloudFormation
mid-deploy. So the template reserves nothing unless told (`payloadstore:reservedConcurrency`):

- `off`: nothing reserved (the template's default, what a plain `cdk synth` gives);
- `N`: the stage reserves N in all, split 4:3 between daemon and jobs (SHARES);
- `auto` (`make deploy`'s default): `decide()` from the account's limit and what the account's
  other functions already reserve, read before CloudFormation starts: the default partition
  (daemon 40 %, jobs 30 % of the limit) where it fits, scaled down to what fits while each part
  keeps MIN_PARTITION, else off, with the reason.

`payloadstore:daemonConcurrency` / `:jobsConcurrency` set one function's reservation outright,
whatever the mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The CDK context flags (cdk.json or `-c`); the local gateway's stand-ins are in
# devstack/payloadstore_devstack/gateway.py (LOCAL_CONCURRENCY_ENV).
FLAG_MODE = "payloadstore:reservedConcurrency"
FLAG_OVERRIDES: dict[str, str] = {
    "daemon": "payloadstore:daemonConcurrency",
    "jobs": "payloadstore:jobsConcurrency",
}
OFF, AUTO = "off", "auto"

# The default partition, as shares of the account's limit: idle daemon threads are the largest
# and least urgent holders (40 %); jobs serves result waits but also enqueue and status (30 %);
# the remaining 30 % stays unreserved for the short functions. A given or scaled total keeps the
# same 4:3 ratio.
SHARES: dict[str, float] = {"daemon": 0.40, "jobs": 0.30}
# AWS keeps at least this many executions of an account unreserved (Lambda quotas).
MIN_UNRESERVED = 100
# Below this a function's cap throttles ordinary use (a handful of daemons, a few result waits):
# auto reserves nothing rather than less than this for either function.
MIN_PARTITION = 10
# Service Quotas' code of "Concurrent executions" (AWS Lambda), for the request command we print.
QUOTA_CODE = "L-B99A9384"

Mode = str | int  # OFF, AUTO, or a total to reserve


def parse_mode(raw: object, source: str = FLAG_MODE) -> Mode:
    """off | auto | a total of at least 2 (one execution for each function)."""
    text = str(raw).strip().lower() if raw is not None else ""
    if text in ("", OFF, "false", "none", "0"):
        return OFF
    if text == AUTO:
        return AUTO
    try:
        total = int(text)
    except ValueError:
        raise ValueError(f"{source} must be off, auto or a number; got {raw!r}") from None
    if total < len(SHARES):
        raise ValueError(
            f"{source} must reserve at least {len(SHARES)} (one for each of daemon and jobs); "
            f"got {total}"
        )
    return total


def parse_override(raw: object, source: str) -> int | None:
    if raw is None or str(raw).strip() == "":
        return None
    try:
        cap = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{source} must be an integer; got {raw!r}") from None
    if cap < 1:
        raise ValueError(f"{source} must be at least 1; got {cap}")
    return cap


def split(total: int) -> dict[str, int]:
    """A total between daemon and jobs in the ratio of SHARES (4:3), each at least 1."""
    daemon_share = SHARES["daemon"] / sum(SHARES.values())
    daemon = min(max(1, int(total * daemon_share)), total - 1)
    return {"daemon": daemon, "jobs": total - daemon}


def caps_for(mode: int | str, overrides: Mapping[str, int | None] | None = None) -> dict[str, int]:
    """group -> ReservedConcurrentExecutions for a resolved mode (OFF or a total); functions not
    in the answer reserve nothing. AUTO must have been decided first (decide())."""
    if mode == AUTO:
        raise ValueError(
            f"{FLAG_MODE}=auto is decided from the account's settings by `make deploy` "
            "(infra/preflight.py) before CloudFormation starts; a `cdk synth` or `cdk deploy` "
            f"run directly takes {FLAG_MODE}=off (the default) or a number"
        )
    caps: dict[str, int] = {} if mode == OFF else split(int(mode))
    for group, cap in (overrides or {}).items():
        if cap is not None:
            caps[group] = cap
    return caps


@dataclass(frozen=True)
class AccountConcurrency:
    """What the preflight reads (`lambda get-account-settings` and this stage's own functions)."""

    limit: int  # AccountLimit.ConcurrentExecutions
    unreserved: int  # AccountLimit.UnreservedConcurrentExecutions
    own_reserved: int = 0  # what this stage's functions reserve now (a redeploy replaces it)

    @property
    def reserved_elsewhere(self) -> int:
        """What every other function of the account and region reserves."""
        return max(0, self.limit - self.unreserved - self.own_reserved)

    @property
    def room(self) -> int:
        """The most this stage may reserve: AWS keeps MIN_UNRESERVED of the limit unreserved."""
        return self.limit - self.reserved_elsewhere - MIN_UNRESERVED


@dataclass(frozen=True)
class Decision:
    caps: dict[str, int] = field(default_factory=dict)  # empty: nothing reserved
    reason: str = ""
    advice: str = ""  # how to ask for a higher limit, where the limit is what stands in the way

    def context(self) -> dict[str, str]:
        """The CDK context that makes the template reserve exactly `caps`."""
        if not self.caps:
            return {FLAG_MODE: OFF}
        flags = {FLAG_MODE: str(sum(self.caps.values()))}
        flags.update({FLAG_OVERRIDES[g]: str(c) for g, c in self.caps.items()})
        return flags

    def line(self) -> str:
        """The one line `make deploy` prints."""
        if not self.caps:
            return f"reserved concurrency: none ({self.reason})"
        parts = ", ".join(f"{g} {c}" for g, c in self.caps.items())
        return f"reserved concurrency: {parts} ({self.reason})"


def default_caps(limit: int) -> dict[str, int]:
    """70 % of the limit, split 4:3: daemon 400 and jobs 300 of 1,000."""
    return split(int(limit * sum(SHARES.values()))) if limit >= len(SHARES) else {}


def decide(account: AccountConcurrency) -> Decision:
    """`auto`: the default partition where it fits, scaled down where only less fits, else none."""
    limit, elsewhere, room = account.limit, account.reserved_elsewhere, account.room
    context = f"limit {limit}" + (f", other functions reserve {elsewhere}" if elsewhere else "")
    wanted = default_caps(limit)
    if wanted and min(wanted.values()) >= MIN_PARTITION and sum(wanted.values()) <= room:
        left = limit - elsewhere - sum(wanted.values())
        return Decision(wanted, f"40 % and 30 % of the account's {context}; {left} unreserved")
    scaled = split(room) if room >= len(SHARES) else {}
    if scaled and all(c >= MIN_PARTITION for c in scaled.values()):
        return Decision(
            scaled,
            f"all that fits: the account's {context}, and AWS keeps {MIN_UNRESERVED} unreserved",
        )
    why = (
        f"the account's {context} leaves {limit - elsewhere}: too few to reserve "
        f"{MIN_PARTITION} for each of daemon and jobs and keep the {MIN_UNRESERVED} unreserved "
        "AWS requires; daemon and jobs share the unreserved pool with every route"
    )
    return Decision({}, why, quota_advice(limit))


def check_fits(caps: dict[str, int], account: AccountConcurrency) -> None:
    """Raises ValueError, naming the numbers, where AWS would refuse `caps` mid-deploy."""
    left = account.limit - account.reserved_elsewhere - sum(caps.values())
    if caps and left < MIN_UNRESERVED:
        parts = ", ".join(f"{g} {c}" for g, c in caps.items())
        raise ValueError(
            f"reserving {parts} leaves {left} of the account's {account.limit} unreserved "
            f"(other functions reserve {account.reserved_elsewhere}); AWS requires at least "
            f"{MIN_UNRESERVED}: reserve at most {max(0, account.room)} in all, or "
            f"{FLAG_MODE}=auto or off"
        )


def quota_advice(limit: int) -> str:
    """How to ask for a higher limit: Service Quotas, AWS Lambda, Concurrent executions."""
    return (
        f"the account's Lambda concurrency limit here is {limit} (new accounts start low); ask "
        "for more in the Service Quotas console (AWS Lambda > Concurrent executions) or with "
        f"`aws service-quotas request-service-quota-increase --service-code lambda --quota-code "
        f"{QUOTA_CODE} --desired-value 1000`, then run `make deploy` again"
    )


def resolve(
    mode: Mode, overrides: dict[str, int | None], account: AccountConcurrency | None
) -> Decision:
    """What a stage reserves for a mode (FLAG_MODE) and per-function overrides, checked against
    the account; `account` may be None only where nothing is reserved (off, no override)."""
    given = {g: c for g, c in overrides.items() if c is not None}
    if mode == AUTO:
        if account is None:
            raise ValueError(f"{FLAG_MODE}=auto needs the account's settings")
        auto = decide(account)
        if not given:
            return auto
        caps, reason = {**auto.caps, **given}, f"{auto.reason}; set by {_flags(given)}"
        advice = auto.advice
    else:
        caps = caps_for(mode, given)
        reason = f"{FLAG_MODE}={mode}" + (f", {_flags(given)}" if given else "")
        advice = ""
    if caps:
        if account is None:
            raise ValueError("reserving concurrency needs the account's settings")
        check_fits(caps, account)
    return Decision(caps, reason, advice)


def _flags(given: dict[str, int]) -> str:
    return ", ".join(f"{FLAG_OVERRIDES[g]}={c}" for g, c in given.items())
