"""Reserved concurrency of the long-poll functions: one derivation for the CDK stack and the local
gateway (issue 23).

Every waiting daemon poll and every `result?wait` holds one Lambda execution for up to its wait.
Unbounded, enough idle daemons take the account's whole concurrency and every route fails, the
authorizer and health included. So `daemon` and `jobs` get reserved concurrency, which is also
their cap: past it Lambda throttles them alone, and the rest of the account's pool stays for the
authorizer and the short routes (payloads, public, admin, metrics).

Defaults, as shares of the account limit (`payloadstore:accountConcurrency`, default 1000):
daemon 40 % (idle daemon threads are the largest and least urgent holders), jobs 30 % (result
waits plus enqueue and status, which a client needs), the remaining 30 % unreserved. AWS refuses
reserved concurrency that leaves fewer than 100 executions unreserved; we refuse the same at
synth, before CloudFormation does it mid-deploy.
"""

from __future__ import annotations

DEFAULT_ACCOUNT_CONCURRENCY = 1000
DEFAULT_SHARES: dict[str, float] = {"daemon": 0.40, "jobs": 0.30}
# AWS keeps at least this many executions of an account unreserved (Lambda quotas).
MIN_UNRESERVED = 100


def reserved_concurrency(
    account: int = DEFAULT_ACCOUNT_CONCURRENCY, overrides: dict[str, int | None] | None = None
) -> dict[str, int]:
    """group -> reserved concurrent executions: an override, else its share of `account`.

    Raises ValueError for a cap below 1 or a split leaving fewer than MIN_UNRESERVED unreserved.
    """
    if account < 1:
        raise ValueError(f"account concurrency must be at least 1; got {account}")
    given = overrides or {}
    caps: dict[str, int] = {}
    for group, share in DEFAULT_SHARES.items():
        value = given.get(group)
        cap = int(account * share) if value is None else int(value)
        if cap < 1:
            raise ValueError(f"reserved concurrency of {group} must be at least 1; got {cap}")
        caps[group] = cap
    unreserved = account - sum(caps.values())
    if unreserved < MIN_UNRESERVED:
        split = ", ".join(f"{g}={c}" for g, c in caps.items())
        raise ValueError(
            f"reserved concurrency {split} leaves {unreserved} of the account's {account} "
            f"unreserved; AWS requires at least {MIN_UNRESERVED} for the other functions "
            "(the authorizer, payloads, public, admin, metrics)"
        )
    return caps
