"""Errors of `inline: never` namespaces, kept in S3 (issue 43): the error text and traceback a
daemon posts (or a failure report's detail) are payload bytes too (`ValueError(f"bad {x!r}")`
carries an argument), so such a namespace keeps none of them in Redis.

The control plane writes the error's JSON itself, a small object under the job's prefix
(`payload_keys.error_key`), with the namespace's retention tag and encryption (the headers an
upload of it signs in), and keeps in the job's done list only `{"type": <type>, "kept": <key>}`:
the error's type (an exception class name, which listings show and filter by) and where the
rest is. Reads put the error back together (one GetObject), so every answer that carries an
`error` is shaped as before and the SDK, CLI and dashboard show it unchanged. An object gone
before its record (its class expired it) answers the type with a message saying so."""

from __future__ import annotations

import json

from ..models.api import JobError
from ..store.records import dumps
from .context import Deps, Principal
from .payload_keys import error_key
from .policy import policy_headers

KEPT_FIELD = "kept"
ERROR_CONTENT_TYPE = "application/json"


def kept_error(
    p: Principal, job_id: str, error_json: str, deps: Deps, *, write: bool = True
) -> str:
    """What the done list keeps of an error: under `inline: never` the stub, once the error's
    JSON is in S3 (the same key and bytes for a re-sent post); else the error JSON as is.
    `write=False`: a post the job will refuse (or a repeat of the one it ended with, whose
    object is there already) writes no object; its stub names the same key."""
    if not p.policy.inline_never:
        return error_json
    key = error_key(job_id, error_json)
    if write:
        deps.objects.put_small(
            key, error_json.encode(), ERROR_CONTENT_TYPE, policy_headers(p.policy, deps)
        )
    return dumps({"type": json.loads(error_json).get("type", ""), KEPT_FIELD: key})


def error_of(raw: bytes, deps: Deps) -> JobError:
    """The job error of a done list's JSON: as stored, or read back from S3 when kept there."""
    value = json.loads(raw)
    key = value.get(KEPT_FIELD) if isinstance(value, dict) else None
    if not key:
        return JobError.model_validate(value)
    body = deps.objects.read_small(key)
    if body is None:
        return JobError(
            type=value.get("type", ""),
            message="the error's text is no longer kept: its object expired with the "
            "namespace's retention",
        )
    return JobError.model_validate(json.loads(body))
