"""Who signs a request to the S3 emulator: the operator's local keys, and each function's own
(`local-<group>` / `local-<group>-secret`, the keys its role has in the local stack, by which the
grants are judged)."""

from __future__ import annotations

import os

# The credentials the local stack hands its handlers (services.local_aws_env); more pairs may be
# given as PAYLOADSTORE_S3_CREDENTIALS="KEYID:SECRET,KEYID2:SECRET2".
LOCAL_ACCESS_KEY_ID = "local"
LOCAL_SECRET_ACCESS_KEY = "local-secret"
# Each function's local keys: `local-<group>` / `local-<group>-secret`.
FUNCTION_KEY_PREFIX = "local-"


def function_groups() -> tuple[str, ...]:
    from payloadstore_controlplane.routes import FUNCTIONS

    return tuple(FUNCTIONS)


def function_credentials(group: str) -> tuple[str, str, None]:
    """The local keys function `group` signs with (its role's, in the local stack)."""
    return f"{FUNCTION_KEY_PREFIX}{group}", f"{FUNCTION_KEY_PREFIX}{group}-secret", None


def function_of(access_key: str) -> str | None:
    """The function whose local key this is, or None (the operator's, or a key of a test)."""
    if not access_key.startswith(FUNCTION_KEY_PREFIX):
        return None
    group = access_key[len(FUNCTION_KEY_PREFIX) :]
    return group if group in function_groups() else None


def known_credentials(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    creds = {LOCAL_ACCESS_KEY_ID: LOCAL_SECRET_ACCESS_KEY}
    for group in function_groups():
        key_id, secret, _ = function_credentials(group)
        creds[key_id] = secret
    for pair in (env.get("PAYLOADSTORE_S3_CREDENTIALS") or "").split(","):
        key_id, sep, secret = pair.strip().partition(":")
        if sep and key_id and secret:
            creds[key_id] = secret
    return creds
